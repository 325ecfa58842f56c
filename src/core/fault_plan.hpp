// Built-in fault injection (SHARC_FAULT): the grammar's parser and the process-wide plan that
// the engine and transport::FaultyEndpoint consult. Off by default: with SHARC_FAULT unset,
// FaultPlan::active() is null and nothing else here runs.
//
//   SHARC_FAULT = rule [';' rule]...
//   rule        = action ':' key '=' value [',' key '=' value]...
//   kill|stop|fail|drop: rank=R,seq=N[,comm=C][,after=K]
//   delay:               rank=R,ms=T[,comm=C][,seq=N|seq=A-B]
//
// rank is the world rank; comm the communicator id (0 = the world communicator; default any);
// seq the 1-based number of a collective on that communicator (every call of start() counts,
// the library's own split and closing barriers included); after=K lets K transfers of that
// call complete on that rank first, so the fault lands mid-collective.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/message_tag.hpp"

namespace sharc::core {

enum class FaultAction { Kill, Stop, Delay, Fail, Drop };

/// "kill", "stop", "delay", "fail" or "drop".
const char* faultActionName(FaultAction action);

/// One parsed rule of SHARC_FAULT.
struct FaultRule {
  FaultAction action = FaultAction::Kill;
  int rank = 0;                        ///< world rank that injects the fault
  std::optional<uint32_t> comm;        ///< communicator id; none = any
  uint64_t seq = 0;                    ///< 1-based collective number (delay: first; 0 = every call)
  uint64_t seqLast = 0;                ///< delay: last collective delayed (inclusive; 0 = open)
  uint64_t after = 0;                  ///< transfers of the call that complete before the fault
  std::chrono::milliseconds delay{0};  ///< delay: how long each send waits before it is posted
  std::string text;                    ///< the rule as written (for messages)
};

/// What a transfer completion on a faulty endpoint turns into.
enum class FaultHit { None, Fail, Drop };

class FaultPlan {
 public:
  /// Parses SHARC_FAULT's grammar (above). Empty rules (a trailing ';') and spaces around
  /// tokens are allowed. Throws sharc::Error(InvalidArgument) naming SHARC_FAULT, the rule and
  /// the expected form.
  static FaultPlan parse(const std::string& text);

  const std::vector<FaultRule>& rules() const { return rules_; }
  bool empty() const { return rules_.empty(); }
  /// Whether any rule names `worldRank` (an endpoint of another rank needs no decorator).
  bool concerns(int worldRank) const;

  /// The process-wide plan made from core::Config::get().fault on first use; nullptr when
  /// SHARC_FAULT is unset. Throws the parse error (on every call) when it is malformed.
  static FaultPlan* active();

  /// The engine calls this as collective `seq` (1-based; its messages' tags carry the low
  /// bits, kTagSeqMask) of communicator `commId` starts on world rank `worldRank`. Kill, stop
  /// and drop rules without `after` act here and now (kill does not return, stop returns after
  /// SIGCONT); the others are armed for the endpoint. Thread-safe.
  void atCall(uint32_t commId, int worldRank, uint64_t seq);

  // Called by transport::FaultyEndpoint (thread-safe). `comm` and `tagSeq` come from the
  // tag of a collective's message (abort notices and point-to-point messages are not passed).
  /// A transfer of call (`comm`, `tagSeq`) completed on `worldRank`'s endpoint. Counts it for
  /// the armed rules of that call and kills or stops the process when one says so. Fail:
  /// report this completion as an error with `message`; Drop: this completion stands, the
  /// endpoint is gone from now on (`message` says why, as dropped() does).
  FaultHit onCompletion(int worldRank, uint32_t comm, uint32_t tagSeq, std::string& message);
  /// How long a send of communicator `comm` from `worldRank` waits before it is posted;
  /// `tagSeq` is its call's tag sequence (none for point-to-point: only delay rules without
  /// a seq apply to those).
  std::chrono::milliseconds sendDelay(int worldRank, uint32_t comm,
                                      std::optional<uint32_t> tagSeq) const;
  /// Non-empty (the reason) once a drop rule fired on `worldRank`.
  std::string dropped(int worldRank) const;

  FaultPlan(const FaultPlan& other) : FaultPlan() { adopt(other.rules_); }
  FaultPlan(FaultPlan&& other) noexcept : FaultPlan() { adopt(std::move(other.rules_)); }

  /// Bits of the sequence number that a message tag carries (message_tag.hpp).
  static constexpr uint32_t kTagSeqMask = (1u << tag::kSeqBits) - 1;

 private:
  FaultPlan() = default;
  void adopt(std::vector<FaultRule> rules) {
    rules_ = std::move(rules);
    spent_.assign(rules_.size(), false);
  }
  // The reason of a drop that fired on `worldRank`, or "" (mu_ held).
  std::string dropsFor(int worldRank) const;
  // The full sequence number of call `tagSeq` of `comm` on `worldRank` (0: none started).
  uint64_t fullSeq(int worldRank, uint32_t comm, uint32_t tagSeq) const;
  // A rule whose call has started: it waits for `remaining` completions of that call.
  struct Armed {
    size_t rule;
    int worldRank;
    uint32_t comm;
    uint32_t tagSeq;
    uint64_t seq;
    uint64_t remaining;
    bool pendingFail = false;  // counted down: the next completion on `comm` fails
  };
  // Marks rule `i` spent and returns what to do; a drop takes effect here (mu_ held).
  FaultAction fire(size_t i, int worldRank, uint32_t comm, uint64_t seq);
  // Kills or stops the process (mu_ not held); other actions return at once.
  static void act(FaultAction action);

  std::vector<FaultRule> rules_;
  mutable std::mutex mu_;
  std::vector<Armed> armed_;
  std::vector<bool> spent_;  // per rule: fired (kill, stop, fail, drop fire once)
  std::vector<std::pair<int, std::string>> drops_;  // world rank -> reason
  // Last collective started per (world rank, comm): maps a tag's 12-bit sequence back to it.
  struct Latest {
    int worldRank;
    uint32_t comm;
    uint64_t seq;
    uint32_t tagSeq;
  };
  std::vector<Latest> latest_;
};

}  // namespace sharc::core

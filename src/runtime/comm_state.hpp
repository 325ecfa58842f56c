// CommState: what one communicator is (ranks, tag space, call sequence, plans) and its control
// channel (abort notices and stall probes).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "algorithms/node_map.hpp"
#include "algorithms/tuner.hpp"
#include "runtime/engine.hpp"
#include "runtime/flight_recorder.hpp"
#include "runtime/learned_tuner.hpp"
#include "runtime/schedule_cache.hpp"
#include "transport/endpoint.hpp"

namespace sharc::detail {

/// A call as the stall probe describes it on the control channel (plain bytes: every rank
/// runs the same build).
struct ProbeCall {
  uint64_t seq = 0;  ///< 0: none
  uint64_t count = 0;
  int32_t root = -1;
  uint8_t kind = 0, type = 0, op = 0, hasOp = 0, state = 0, internal = 0;
  static ProbeCall of(const TraceEntry& e);
  /// "AllGather #7 (count=3, float32)" with op, root and what sharc called it for.
  std::string describe() const;
  /// Same collective, type, op, count and root.
  bool sameCall(const ProbeCall& o) const;
};

/// What one communicator is: its ranks, tag space, sequence and abort channel.
class CommState final : public transport::TransferOwner {
 public:
  CommState(std::shared_ptr<Engine> engine, uint32_t id, int rank, std::vector<uint32_t> peers,
            std::vector<int32_t> pids, algo::NodeMap nodes, std::chrono::milliseconds timeout,
            algo::AlgorithmOverride algos);
  ~CommState();

  std::shared_ptr<Engine> engine;
  const uint32_t id;
  const int rank;
  const int size;
  const std::vector<uint32_t> peers;  ///< communicator rank -> endpoint peer
  const std::vector<int32_t> pids;    ///< communicator rank -> pid; empty without single copy
  const algo::NodeMap nodes;          ///< communicator rank -> node
  /// Bound on each operation started from now on (Communicator::setTimeout changes it).
  std::atomic<std::chrono::milliseconds> timeout;
  const algo::AlgorithmOverride algos;
  /// Collective calls issued so far: the last sequence number (tags carry its low 12 bits).
  uint64_t calls = 0;
  uint64_t p2pGroups = 0;     ///< point-to-point groups issued so far
  uint32_t shrinks = 0;       ///< shrink() calls so far (their messages' sequence)
  int parentId = -1;          ///< the communicator this one was split from (-1: the world)
  const char* path = "host";  ///< "stream": the executor of stream-ordered calls
  /// The device path's links, per communicator rank: non-zero where the endpoint carries
  /// device memory to that rank (FI_HMEM), zero where messages are staged; filled by the
  /// first call on the device path (deviceLinks() in communicator_impl_device.cc).
  std::vector<uint8_t> directLinks;
  /// The same links, all staged: for a call whose registration failed.
  std::vector<uint8_t> stagedLinks;
  /// "device-direct", "device-staged" or "device-mixed": the flight record's path of a call
  /// on the device path.
  const char* devicePath = "device-staged";
  /// Which links are direct and which staged, and why ("" until the first device call).
  std::string deviceLinksNote;
  /// What the tuner costs a call on the device path with: the queue's rates, staged links.
  algo::DeviceCall deviceCall;
  const char* internalCall = "";  ///< set around calls sharc makes itself (split, destroy)
  FlightRecorder recorder;
  /// Communicators split from this one: abort reaches them too.
  std::vector<std::weak_ptr<CommState>> children;
  bool userAborted = false;  ///< failed through Communicator::abort
  bool dumped = false;       ///< its failure has been written to SHARC_TRACE_DIR
  std::array<int, 8> lastAlgorithm{-1, -1, -1, -1,
                                   -1, -1, -1, -1};  ///< per CollectiveKind, for logs
  /// A plan that needs no measurement: SHARC_ALGO's, the SHARC_TUNER_FILE choice or the
  /// model's.
  struct StaticPlan {
    algo::Plan plan;
    bool fixed = false;  ///< SHARC_ALGO or the file chose it: not learned
  };
  /// Recent static plans by (collective, bytes): every input of the plan but these is fixed
  /// for the communicator's life.
  std::unordered_map<uint64_t, StaticPlan> plans;
  /// What the learning tuner measured and chose per (collective, bytes).
  LearnedTuner learner{core::Config::get().tunerLearn, core::Config::get().tunerLearnAfter};
  /// Schedules of recent shapes, rearmed by later calls of the same shape.
  ScheduleCache schedules{core::Config::get().scheduleCache};
  /// Point-to-point sequences per (peer << 32 | slot), sends and receives apart.
  std::unordered_map<uint64_t, uint32_t> sendSeq, recvSeq;
  /// Messages a receive from any source took from peers it did not pick (their cancel came
  /// too late), by (peer << 32 | slot): that peer's next receive on the slot gets them.
  std::unordered_map<uint64_t, std::vector<std::byte>> strayMessages;
  /// Receives from any source by slot: until one finishes, other receives on its slot are
  /// refused (their sequences depend on which peer it takes).
  std::unordered_map<uint32_t, std::weak_ptr<RequestState>> anySourceRecvs;
  bool aborted = false;
  std::string abortMessage;
  /// Why the communicator failed (Success while it has not): this rank's failure's code, or
  /// RemoteError for a peer's notice.
  Result abortCode = Result::Success;

  /// Posts the abort-notice receive (engine lock held).
  void start();
  /// Marks the communicator failed with `code` and tells every other rank (engine lock held).
  void abort(const std::string& reason, Result code);
  /// Cancels the abort-notice receive before the communicator goes away, and frees its id
  /// unless it was aborted (engine lock held).
  void close();
  bool quiescent() const { return posted_ == 0 && unposted_ == 0; }
  /// What is still outstanding on the control channel, for messages.
  std::string controlState() const;
  /// Posts the control messages the provider could not take yet (engine lock held).
  void retryControlSends();

  void onTransferDone(transport::Transfer& t, size_t bytes, uint64_t tag) override;
  void onTransferError(transport::Transfer& t, Result code, const std::string& message) override;

  // ---- stall probe (stall_probe.cc) ----
  /// Asks communicator rank `peer` which call it is in (engine lock held).
  void sendProbe(int peer, const TraceEntry& mine);
  /// Handles the control messages received since the last pass (engine lock held).
  void serviceControl();

 private:
  struct ControlSend {
    transport::Transfer transfer;
    std::string bytes;
    int peer = -1;
    bool posted = false;
    bool done = false;  // completed, failed or dropped: freed by reapControlSends()
  };
  // Frees the finished control sends. Never while the list is walked: a post may progress
  // the provider, whose completions mark other sends done.
  void reapControlSends();
  void postControlSend(std::list<ControlSend>::iterator s);
  void postControlRecv();
  void sendControl(int peer, std::string bytes);
  void answerProbe(int asker, const std::string& body);
  void readReply(int peer, const std::string& body);

  transport::Transfer controlRecv_;
  char controlBuf_[256] = {};
  std::list<ControlSend> controlSends_;
  std::vector<std::pair<int, std::string>> inbox_;  // (sender, message) to service
  int posted_ = 0;
  int unposted_ = 0;  // control sends waiting for the provider (a connection being made)
  bool controlPosted_ = false;
};

}  // namespace sharc::detail

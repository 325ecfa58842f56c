#include "fault_plan.hpp"

#include <signal.h>

#include <algorithm>
#include <charconv>
#include <sharc/error.hpp>
#include <string_view>

#include "config.hpp"
#include "log.hpp"

namespace sharc::core {
namespace {

constexpr const char* kEventKeys = "rank=R,seq=N[,comm=C][,after=K]";
constexpr const char* kDelayForm = "delay:rank=R,ms=T[,comm=C][,seq=N|seq=A-B]";
constexpr uint64_t kMaxRank = tag::kMaxRanks - 1;
constexpr uint64_t kMaxComm = tag::kMaxComms - 1;
constexpr uint64_t kMaxDelayMs = 3600000;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool parseUnsigned(std::string_view text, uint64_t& out) {
  if (text.empty() || text.front() < '0' || text.front() > '9') return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

std::string expectedForm(FaultAction a) {
  if (a == FaultAction::Delay) return kDelayForm;
  return std::string(faultActionName(a)) + ":" + kEventKeys;
}

[[noreturn]] void bad(std::string_view rule, const std::string& what, const std::string& form) {
  throw Error(Result::InvalidArgument, "SHARC_FAULT rule '" + std::string(rule) +
                                           "' is malformed: " + what + "; expected " + form);
}

// One rule: "action:key=value,...".
FaultRule parseRule(std::string_view text) {
  const size_t colon = text.find(':');
  const std::string_view name = trim(text.substr(0, colon));
  FaultRule r;
  r.text = std::string(text);
  if (name == "kill")
    r.action = FaultAction::Kill;
  else if (name == "stop")
    r.action = FaultAction::Stop;
  else if (name == "fail")
    r.action = FaultAction::Fail;
  else if (name == "drop")
    r.action = FaultAction::Drop;
  else if (name == "delay")
    r.action = FaultAction::Delay;
  else
    bad(text, "unknown action '" + std::string(name) + "'",
        "one of kill, stop, fail, drop (ACTION:" + std::string(kEventKeys) + ") or " + kDelayForm);
  const std::string form = expectedForm(r.action);
  if (colon == std::string_view::npos) bad(text, "no ':' after the action", form);
  const bool delay = r.action == FaultAction::Delay;
  bool hasRank = false, hasSeq = false, hasAfter = false, hasMs = false;
  std::string_view rest = text.substr(colon + 1);
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view item = trim(rest.substr(0, comma));
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      bad(text,
          item.empty() ? "an empty key=value item" : "'" + std::string(item) + "' is not key=value",
          form);
    const std::string key(trim(item.substr(0, eq)));
    const std::string_view value = trim(item.substr(eq + 1));
    const auto number = [&](uint64_t lo, uint64_t hi) {
      uint64_t v = 0;
      if (!parseUnsigned(value, v) || v < lo || v > hi)
        bad(text,
            key + "='" + std::string(value) + "' is not an integer in " + std::to_string(lo) +
                ".." + std::to_string(hi),
            form);
      return v;
    };
    const auto once = [&](bool& seen) {
      if (seen) bad(text, key + " is given twice", form);
      seen = true;
    };
    bool hasComm = r.comm.has_value();
    if (key == "rank") {
      once(hasRank);
      r.rank = static_cast<int>(number(0, kMaxRank));
    } else if (key == "comm") {
      once(hasComm);
      r.comm = static_cast<uint32_t>(number(0, kMaxComm));
    } else if (key == "seq") {
      once(hasSeq);
      const size_t dash = value.find('-');
      if (dash != std::string_view::npos && delay) {
        uint64_t a = 0, b = 0;
        if (!parseUnsigned(trim(value.substr(0, dash)), a) ||
            !parseUnsigned(trim(value.substr(dash + 1)), b) || a < 1 || b < a)
          bad(text, "seq='" + std::string(value) + "' is not a range A-B with 1 <= A <= B", form);
        r.seq = a;
        r.seqLast = b;
      } else {
        r.seq = number(1, UINT64_MAX);
        if (delay) r.seqLast = r.seq;
      }
    } else if (key == "after" && !delay) {
      once(hasAfter);
      r.after = number(0, UINT64_MAX);
    } else if (key == "ms" && delay) {
      once(hasMs);
      r.delay = std::chrono::milliseconds(number(1, kMaxDelayMs));
    } else {
      bad(text,
          "unknown key '" + key + "' for " + faultActionName(r.action) +
              (delay ? " (it takes rank, ms, comm, seq)" : " (it takes rank, seq, comm, after)"),
          form);
    }
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  if (!hasRank) bad(text, "rank= is missing", form);
  if (delay && !hasMs) bad(text, "ms= is missing", form);
  if (!delay && !hasSeq) bad(text, "seq= is missing", form);
  return r;
}

}  // namespace

const char* faultActionName(FaultAction action) {
  switch (action) {
    case FaultAction::Kill: return "kill";
    case FaultAction::Stop: return "stop";
    case FaultAction::Delay: return "delay";
    case FaultAction::Fail: return "fail";
    case FaultAction::Drop: return "drop";
  }
  return "?";
}

FaultPlan FaultPlan::parse(const std::string& text) {
  std::vector<FaultRule> rules;
  std::string_view rest = text;
  while (true) {
    const size_t semi = rest.find(';');
    const std::string_view rule = trim(rest.substr(0, semi));
    if (!rule.empty()) rules.push_back(parseRule(rule));
    if (semi == std::string_view::npos) break;
    rest = rest.substr(semi + 1);
  }
  if (rules.empty())
    throw Error(Result::InvalidArgument,
                "SHARC_FAULT='" + text + "' has no rule; expected rules separated by ';', each " +
                    "ACTION:" + kEventKeys + " (ACTION kill, stop, fail or drop) or " + kDelayForm);
  FaultPlan plan;
  plan.adopt(std::move(rules));
  return plan;
}

bool FaultPlan::concerns(int worldRank) const {
  return std::any_of(rules_.begin(), rules_.end(),
                     [&](const FaultRule& r) { return r.rank == worldRank; });
}

FaultPlan* FaultPlan::active() {
  // Lives until the process exits: endpoints on any thread may consult it until then. A
  // malformed SHARC_FAULT throws here, and again on the next call.
  static FaultPlan* const plan = []() -> FaultPlan* {
    const std::string& text = Config::get().fault;
    return text.empty() ? nullptr : new FaultPlan(parse(text));
  }();
  return plan;
}

FaultAction FaultPlan::fire(size_t i, int worldRank, uint32_t comm, uint64_t seq) {
  const FaultRule& r = rules_[i];
  spent_[i] = true;
  const std::string where = "collective #" + std::to_string(seq) + " of communicator " +
                            std::to_string(comm) +
                            (r.after ? " after " + std::to_string(r.after) + " transfers" : "");
  SHARC_WARN("rank " << worldRank << ": SHARC_FAULT rule '" << r.text
                     << "': " << faultActionName(r.action) << " at " << where);
  if (r.action == FaultAction::Drop)
    drops_.emplace_back(worldRank,
                        "endpoint dropped by SHARC_FAULT (rule '" + r.text + "' at " + where + ")");
  return r.action;
}

void FaultPlan::act(FaultAction action) {
  if (action == FaultAction::Kill) raise(SIGKILL);
  if (action == FaultAction::Stop) raise(SIGSTOP);  // returns after SIGCONT
}

void FaultPlan::atCall(uint32_t commId, int worldRank, uint64_t seq) {
  const auto tagSeq = static_cast<uint32_t>(seq) & kTagSeqMask;
  FaultAction now = FaultAction::Delay;  // Delay: nothing to do now
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto latest = std::find_if(latest_.begin(), latest_.end(), [&](const Latest& l) {
      return l.worldRank == worldRank && l.comm == commId;
    });
    if (latest == latest_.end()) latest = latest_.insert(latest_.end(), {worldRank, commId, 0, 0});
    latest->seq = seq;
    latest->tagSeq = tagSeq;
    for (size_t i = 0; i < rules_.size(); ++i) {
      const FaultRule& r = rules_[i];
      if (spent_[i] || r.action == FaultAction::Delay || r.rank != worldRank || r.seq != seq ||
          (r.comm && *r.comm != commId))
        continue;
      if (r.after > 0 || r.action == FaultAction::Fail) {
        spent_[i] = true;  // armed once, even where several communicators reach seq
        armed_.push_back({i, worldRank, commId, tagSeq, seq, r.after, r.after == 0});
        SHARC_INFO("rank " << worldRank << ": SHARC_FAULT rule '" << r.text
                           << "' armed at collective #" << seq << " of communicator " << commId);
      } else {
        const FaultAction a = fire(i, worldRank, commId, seq);
        if (a != FaultAction::Drop) now = a;
      }
    }
  }
  act(now);
}

FaultHit FaultPlan::onCompletion(int worldRank, uint32_t comm, uint32_t tagSeq,
                                 std::string& message) {
  FaultAction now = FaultAction::Delay;
  FaultHit hit = FaultHit::None;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (armed_.empty()) return FaultHit::None;
    tagSeq &= kTagSeqMask;
    for (auto it = armed_.begin(); it != armed_.end(); ++it) {
      if (it->worldRank != worldRank || it->comm != comm || !it->pendingFail) continue;
      // The completion a provider would have reported as failed.
      const FaultRule& r = rules_[it->rule];
      message = "completion error injected by SHARC_FAULT (rule '" + r.text + "' at collective #" +
                std::to_string(it->seq) + " of communicator " + std::to_string(comm) + ")";
      SHARC_WARN("rank " << worldRank << ": SHARC_FAULT rule '" << r.text
                         << "': failing a transfer completion");
      armed_.erase(it);
      return FaultHit::Fail;
    }
    for (auto it = armed_.begin(); it != armed_.end();) {
      if (it->worldRank != worldRank || it->comm != comm || it->tagSeq != tagSeq ||
          it->pendingFail || --it->remaining > 0) {
        ++it;
        continue;
      }
      if (rules_[it->rule].action == FaultAction::Fail) {
        it->pendingFail = true;  // this one completes; the next one of the communicator fails
        ++it;
        continue;
      }
      const FaultAction a = fire(it->rule, worldRank, comm, it->seq);
      if (a == FaultAction::Drop)
        hit = FaultHit::Drop;
      else
        now = a;
      it = armed_.erase(it);
    }
    if (hit == FaultHit::Drop) message = dropsFor(worldRank);
  }
  act(now);
  return hit;
}

std::chrono::milliseconds FaultPlan::sendDelay(int worldRank, uint32_t comm,
                                               std::optional<uint32_t> tagSeq) const {
  std::chrono::milliseconds longest{0};
  std::lock_guard<std::mutex> lock(mu_);
  for (const FaultRule& r : rules_) {
    if (r.action != FaultAction::Delay || r.rank != worldRank || (r.comm && *r.comm != comm))
      continue;
    if (r.seq != 0) {
      if (!tagSeq) continue;
      const uint64_t s = fullSeq(worldRank, comm, *tagSeq);
      if (s < r.seq || s > r.seqLast) continue;
    }
    longest = std::max(longest, r.delay);
  }
  return longest;
}

std::string FaultPlan::dropped(int worldRank) const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropsFor(worldRank);
}

std::string FaultPlan::dropsFor(int worldRank) const {
  for (const auto& [rank, reason] : drops_)
    if (rank == worldRank) return reason;
  return {};
}

uint64_t FaultPlan::fullSeq(int worldRank, uint32_t comm, uint32_t tagSeq) const {
  for (const Latest& l : latest_) {
    if (l.worldRank != worldRank || l.comm != comm) continue;
    // Calls in flight are recent: the newest call whose tag carries `tagSeq`.
    const uint64_t back = (l.tagSeq - tagSeq) & kTagSeqMask;
    return l.seq > back ? l.seq - back : 0;
  }
  return 0;
}

}  // namespace sharc::core

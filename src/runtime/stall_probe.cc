// The stall probe: an operation that has waited longer than SHARC_STALL_PROBE_MS asks the
// peer it waits on, over the communicator's control channel, which call that peer is in. A
// peer in another call at the same sequence number fails the call on every rank at once,
// naming both calls; a peer that has not reached the call yet, or does not answer, is
// reported (and remembered for the timeout's message) while the wait goes on.
#include <signal.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/collective.hpp"
#include "core/config.hpp"
#include "core/log.hpp"
#include "runtime/communicator_impl.hpp"

namespace sharc::detail {
namespace {

using Clock = std::chrono::steady_clock;

// How much later a rank whose peer is alive and itself waiting times out (once per call).
constexpr std::chrono::seconds kWaiterGrace{1};

// Control messages: 'Q' + ProbeQuery, 'R' + ProbeReply.
struct ProbeQuery {
  ProbeCall mine;  // the asker's call
};
struct ProbeReply {
  uint64_t askedSeq = 0;  // the sequence the asker is in
  ProbeCall atAskedSeq;   // what this rank called at that sequence (seq 0: not yet/unknown)
  ProbeCall current;      // this rank's oldest call in progress (seq 0: none)
  uint64_t lastCompletedSeq = 0;
  int64_t lastCompletedAgeMs = -1;  // -1: none completed
  int32_t currentWaitsOn = -1;      // communicator rank its current call waits on
};

template <class T>
std::string pack(char type, const T& body) {
  std::string out(1 + sizeof(T), '\0');
  out[0] = type;
  std::memcpy(out.data() + 1, &body, sizeof(T));
  return out;
}

template <class T>
bool unpack(const std::string& bytes, T& body) {
  if (bytes.size() != sizeof(T)) return false;
  std::memcpy(&body, bytes.data(), sizeof(T));
  return true;
}

// What the process of a silent peer on this host is doing: "exited", "stopped" or "".
std::string localProcessState(int32_t pid) {
  if (pid <= 0) return {};
  if (::kill(pid, 0) != 0 && errno == ESRCH) return "exited";
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');
  if (paren != std::string::npos && paren + 2 < line.size()) {
    const char state = line[paren + 2];
    if (state == 'T' || state == 't') return "stopped";
    if (state == 'Z') return "exited";
  }
  return {};
}

uint8_t internalCode(const char* internal) {
  return std::strcmp(internal, "split") == 0     ? 1
         : std::strcmp(internal, "destroy") == 0 ? 2
         : std::strcmp(internal, "tuner") == 0   ? 3
                                                 : 0;
}

}  // namespace

ProbeCall ProbeCall::of(const TraceEntry& e) {
  ProbeCall c;
  c.seq = e.seq;
  c.count = e.count;
  c.root = e.root;
  c.kind = static_cast<uint8_t>(e.kind);
  c.type = static_cast<uint8_t>(e.type);
  c.op = static_cast<uint8_t>(e.op);
  c.hasOp = e.hasOp;
  c.state = static_cast<uint8_t>(e.state);
  c.internal = internalCode(e.internal);
  return c;
}

std::string ProbeCall::describe() const {
  std::ostringstream os;
  os << core::collectiveName(static_cast<CollectiveKind>(kind)) << " #" << seq
     << " (count=" << count << ", " << dataTypeName(static_cast<DataType>(type));
  if (hasOp) os << ", " << redOpName(static_cast<RedOp>(op));
  if (root >= 0) os << ", root " << root;
  os << ")";
  if (internal == 1) os << " [sharc's exchange inside split]";
  if (internal == 2) os << " [the closing barrier of destroy]";
  if (internal == 3) os << " [the learning tuner's agreement]";
  return os.str();
}

bool ProbeCall::sameCall(const ProbeCall& o) const {
  return kind == o.kind && type == o.type && count == o.count && root == o.root &&
         hasOp == o.hasOp && (!hasOp || op == o.op);
}

void Engine::probeStallsIfDue() {
  if (Clock::now() - lastProbeCheck_ >= std::chrono::milliseconds(100)) probeStalls();
}

void Engine::probeStalls() {
  const auto threshold = core::Config::get().stallProbe;
  if (threshold.count() <= 0) return;
  const auto now = Clock::now();
  lastProbeCheck_ = now;
  for (const auto& rp : active_) {
    RequestState& r = *rp;
    CommState& c = *r.comm;
    const auto& ctx = r.schedule->context();
    if (c.aborted || c.size < 2 || ctx.kind == CollectiveKind::PointToPoint ||
        r.schedule->state() != algo::Schedule::State::Running || now - r.startedAt < threshold)
      continue;
    if (r.probedPeer >= 0 && now - r.probedAt >= threshold) {
      // Asked a whole threshold ago and no answer: stopped, dead, or not making progress.
      // Looked at again every threshold (a peer on this host may exit meanwhile).
      const bool first = !r.reportedSilence;
      r.reportedSilence = true;
      r.probedAt = now;
      const int w = static_cast<int>(c.peers[r.probedPeer]);
      const bool known = w < static_cast<int>(world.pids.size()) &&
                         w < static_cast<int>(world.hosts.size()) &&
                         world.rank < static_cast<int>(world.hosts.size());
      const int32_t pid = known ? world.pids[w] : -1;
      const std::string who = "rank " + std::to_string(r.probedPeer) + " (world rank " +
                              std::to_string(w) + ", pid " +
                              (known ? std::to_string(pid) : std::string("?")) + ")";
      // A peer on this host can be looked at directly: a dead one fails the call now.
      const std::string state =
          known && world.hosts[w] == world.hosts[world.rank] ? localProcessState(pid) : "";
      if (state == "exited") {
        r.probeNote = who + " has exited";
        r.schedule->fail(Result::SystemError, r.schedule->describe() + ": " + r.probeNote +
                                                  " (found by the stall probe)");
        continue;
      }
      const std::string note =
          who + (state == "stopped" ? " did not answer the stall probe: its process is stopped"
                                    : " did not answer the stall probe: stopped, dead, or not "
                                      "progressing");
      if (first || note != r.probeNote) SHARC_WARN(r.schedule->describe() << ": " << note);
      r.probeNote = note;
    }
    if (r.probedPeer >= 0) continue;  // an answer is awaited, or the peer is silent
    if (r.probedAt != Clock::time_point{} && now - r.probedAt < threshold) continue;
    const algo::Schedule::Progress p = r.schedule->progress();
    if (p.peer < 0) continue;
    const TraceEntry* mine = c.recorder.find(r.traceId);
    if (mine == nullptr) continue;
    r.probedAt = now;
    r.probedPeer = p.peer;
    c.sendProbe(p.peer, *mine);
  }
}

void CommState::sendProbe(int peer, const TraceEntry& mine) {
  ProbeQuery q;
  q.mine = ProbeCall::of(mine);
  SHARC_TRACE("rank " << rank << ": stall probe: asking rank " << peer << " about "
                      << q.mine.describe());
  sendControl(peer, pack('Q', q));
}

void CommState::answerProbe(int asker, const std::string& body) {
  ProbeQuery q;
  if (!unpack(body, q) || asker < 0 || asker >= size || asker == rank) return;
  ProbeReply reply;
  reply.askedSeq = q.mine.seq;
  if (const TraceEntry* e = recorder.findSeq(q.mine.seq)) reply.atAskedSeq = ProbeCall::of(*e);
  // The oldest collective of this communicator still running here.
  RequestState* oldest = nullptr;
  for (uint64_t s = recorder.lastCompletedSeq() + 1; s <= calls && oldest == nullptr; ++s)
    oldest = engine->activeCall(this, s);
  if (oldest != nullptr) {
    if (const TraceEntry* e = recorder.find(oldest->traceId)) reply.current = ProbeCall::of(*e);
    reply.currentWaitsOn = oldest->schedule->progress().peer;
  }
  reply.lastCompletedSeq = recorder.lastCompletedSeq();
  if (recorder.lastCompletedNs() > 0)
    reply.lastCompletedAgeMs = (wallClockNs() - recorder.lastCompletedNs()) / 1000000;
  sendControl(asker, pack('R', reply));
}

void CommState::readReply(int peer, const std::string& body) {
  ProbeReply a;
  if (!unpack(body, a)) return;
  RequestState* r = engine->activeCall(this, a.askedSeq);
  if (r == nullptr || r->probedPeer != peer) return;  // that call has ended meanwhile
  const TraceEntry* e = recorder.find(r->traceId);
  if (e == nullptr) return;
  const ProbeCall mine = ProbeCall::of(*e);
  r->probedPeer = -1;  // answered: the next probe may go after another threshold
  r->reportedSilence = false;
  const std::string me = "rank " + std::to_string(rank) + " is in " + mine.describe();
  if (a.atAskedSeq.seq == mine.seq && !mine.sameCall(a.atAskedSeq)) {
    const std::string what =
        "mismatched calls: " + me + ", rank " + std::to_string(peer) +
        (a.atAskedSeq.state == static_cast<uint8_t>(TraceState::Started) ? " in " : " called ") +
        a.atAskedSeq.describe() + " (every rank must make the same calls)";
    r->schedule->fail(Result::InvalidUsage, r->schedule->describe() + ": " + what);
    return;
  }
  std::ostringstream note;
  if (a.atAskedSeq.seq == mine.seq) {
    note << "rank " << peer << " is in the same call";
    if (a.atAskedSeq.state == static_cast<uint8_t>(TraceState::Completed))
      note << " and has completed it";
    else if (a.currentWaitsOn >= 0 && a.current.seq == mine.seq)
      note << ", waiting on rank " << a.currentWaitsOn;
  } else {
    note << "rank " << peer << " has not called " << core::collectiveName(e->kind) << " #"
         << mine.seq << "; ";
    if (a.current.seq != 0)
      note << "it is in " << a.current.describe()
           << (a.currentWaitsOn >= 0 ? ", waiting on rank " + std::to_string(a.currentWaitsOn)
                                     : std::string());
    else if (a.lastCompletedAgeMs >= 0)
      note << "its last completed call was #" << a.lastCompletedSeq << ", "
           << static_cast<double>(a.lastCompletedAgeMs) / 1000.0 << " s ago";
    else
      note << "it has completed no call yet";
  }
  // The peer is alive and in this call, itself waiting on a third rank: this rank's wait is a
  // consequence. Its timeout moves once by kWaiterGrace, so that the rank nearer the cause
  // (waiting on a silent or dead peer) times out first and its abort notice, naming that
  // peer, fails this call (in a ring with a dead rank, the others would otherwise name
  // whichever live neighbour they happened to wait on).
  if (a.atAskedSeq.seq == mine.seq && a.current.seq == mine.seq && a.currentWaitsOn >= 0 &&
      a.currentWaitsOn != rank &&
      a.atAskedSeq.state != static_cast<uint8_t>(TraceState::Completed) && !r->graceGiven) {
    r->graceGiven = true;
    r->schedule->extendDeadline(kWaiterGrace);
  }
  if (note.str() != r->probeNote) {
    r->probeNote = note.str();
    SHARC_INFO(r->schedule->describe() << ": stall probe: " << r->probeNote);
  }
}

}  // namespace sharc::detail

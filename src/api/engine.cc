// Engine (progress of one endpoint) and CommState (a communicator's tag space and control
// channel: abort notices and stall probes).
#include <algorithm>
#include <chrono>
#include <cstring>

#include "communicator_impl.hpp"
#include "core/config.hpp"
#include "core/log.hpp"
#include "engine_watch.hpp"

namespace sharc::detail {
namespace {
using Clock = std::chrono::steady_clock;
// How long a failed operation waits for its canceled transfers before reporting the error.
// Over tcp a send to a dead or stopped peer cannot be canceled; a second bounds the delay so
// that every survivor reports within its timeout plus that second.
constexpr std::chrono::milliseconds kCancelDrain{1000};
// Control messages carry their sender's rank in their first kRankBytes bytes and kControlRank
// in the tag's rank field, so that the control receive need not ignore the rank bits (see
// postControlRecv).
constexpr size_t kRankBytes = sizeof(uint32_t);
constexpr uint32_t kControlRank = 0;
}  // namespace

Engine::Engine(std::unique_ptr<transport::Endpoint> endpoint) : endpoint_(std::move(endpoint)) {}

Engine::~Engine() {
  watch_.reset();  // stops the watch thread before anything it uses goes away
  // Give the provider a moment to flush what was injected last (a closing barrier token may
  // still sit in its queues), then close the endpoint first, so that no completion can reach
  // the objects freed below.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(5);
  while (std::chrono::steady_clock::now() < until) endpoint_->progress();
  endpoint_.reset();
}

void Engine::startWatch() {
  if (!watch_ && EngineWatch::wanted()) watch_ = std::make_unique<EngineWatch>(*this);
}

bool Engine::progressLocked() {
  bool any = endpoint_->progress() > 0;
  if (!controlPending_.empty()) {
    std::vector<CommState*> pending;
    pending.swap(controlPending_);
    std::sort(pending.begin(), pending.end());
    pending.erase(std::unique(pending.begin(), pending.end()), pending.end());
    for (CommState* c : pending)
      if (std::find(comms.begin(), comms.end(), c) != comms.end()) c->serviceControl();
  }
  for (size_t i = 0; i < active_.size();) {
    RequestState& r = *active_[i];
    if (r.comm->aborted && r.schedule->state() == algo::Schedule::State::Running)
      r.schedule->fail(Result::RemoteError, r.schedule->describe() + ": " + r.comm->abortMessage);
    const auto st = r.schedule->advance();
    if (st == algo::Schedule::State::Running) {
      ++i;
      continue;
    }
    if (st == algo::Schedule::State::Failed && r.drainUntil == Clock::time_point{}) {
      r.code = r.schedule->errorCode();
      r.message = r.schedule->errorMessage();
      // What the stall probe learnt tells a timeout's victim who it really waits on.
      if (r.code == Result::Timeout && !r.probeNote.empty())
        r.message += " (stall probe: " + r.probeNote + ")";
      SHARC_WARN(r.message);
      if (TraceEntry* e = r.comm->recorder.find(r.traceId)) {
        e->failedAt = traceProgress(r);
        e->probeNote = r.probeNote;
      }
      r.comm->recorder.finish(r.traceId, false, r.message);
      // A local failure (dead peer, mismatch, timeout) is announced to the other ranks so
      // they fail now instead of at their own timeout. RemoteError is a notice only on an
      // aborted communicator; from the transport (a peer process that exited under this
      // rank's receive) it is this rank's own finding, announced and dumped as a failure.
      const bool notice = r.code == Result::RemoteError && r.comm->aborted;
      if (!r.comm->aborted) r.comm->abort(r.message, r.code);
      if (!r.comm->dumped) {
        r.comm->dumped = true;
        requestDump(r.code == Result::Timeout ? "timeout"
                    : notice                  ? "peer-failure"
                                              : "failure",
                    r.message);
      }
      r.drainUntil = Clock::now() + kCancelDrain;
    }
    if (st == algo::Schedule::State::Failed && !r.schedule->quiescent()) {
      // The user may free the buffers as soon as the call reports its error: wait until the
      // provider has finished with them (canceled, or completed after all), within bounds.
      if (Clock::now() < r.drainUntil) {
        ++i;
        continue;
      }
      SHARC_WARN(r.message << ": transfers still pending " << kCancelDrain.count()
                           << " ms after cancellation; their buffers may still be written");
      drain(r.schedule);
    }
    any = true;
    if (st == algo::Schedule::State::Done) r.comm->recorder.finish(r.traceId, true, {});
    r.status = st == algo::Schedule::State::Done ? RequestState::Status::Done
                                                 : RequestState::Status::Failed;
    active_.erase(active_.begin() + static_cast<long>(i));
  }
  std::erase_if(drainingSchedules_, [](const auto& s) { return s->quiescent(); });
  std::erase_if(drainingComms_, [](const auto& c) { return c->quiescent(); });
  if (dumpPending_) {
    dumpPending_ = false;
    const std::string& dir = core::Config::get().traceDir;
    try {
      const std::string path = writeTrace(dir, dumpReason_, dumpMessage_);
      SHARC_WARN("rank " << world.rank << ": flight record written to " << path
                         << " (analyse with: sharc-trace " << dir << ")");
    } catch (const std::exception& e) {
      SHARC_WARN("rank " << world.rank << ": could not write the flight record: " << e.what());
    }
  }
  return any;
}

void Engine::requestDump(const std::string& reason, const std::string& message) {
  if (core::Config::get().traceDir.empty() || dumpPending_) return;
  dumpPending_ = true;
  dumpReason_ = reason;
  dumpMessage_ = message;
}

void Engine::failActive(const CommState* comm, Result code, const std::string& message) {
  for (auto& r : active_) {
    if (r->comm.get() == comm && r->schedule->state() == algo::Schedule::State::Running)
      r->schedule->fail(code, r->schedule->describe() + ": " + message);
  }
}

RequestState* Engine::activeRequest(const CommState* comm, uint64_t traceId) const {
  for (const auto& r : active_)
    if (r->comm.get() == comm && r->traceId == traceId) return r.get();
  return nullptr;
}

RequestState* Engine::activeCall(const CommState* comm, uint64_t seq) const {
  for (const auto& r : active_)
    if (r->comm.get() == comm && r->schedule->context().seq == seq &&
        r->schedule->context().kind != CollectiveKind::PointToPoint)
      return r.get();
  return nullptr;
}

CommState::CommState(std::shared_ptr<Engine> e, uint32_t commId, int r, std::vector<uint32_t> p,
                     std::vector<int32_t> pidList, algo::NodeMap n, std::chrono::milliseconds t,
                     algo::AlgorithmOverride a)
    : engine(std::move(e)),
      id(commId),
      rank(r),
      size(static_cast<int>(p.size())),
      peers(std::move(p)),
      pids(std::move(pidList)),
      nodes(std::move(n)),
      timeout(t),
      algos(a),
      recorder(core::Config::get().traceEntries) {
  controlRecv_.owner = this;
}

CommState::~CommState() = default;

void CommState::start() {
  engine->usedCommIds.set(id);
  engine->comms.push_back(this);
  postControlRecv();
  if (!controlPosted_)
    SHARC_WARN("rank " << rank
                       << ": could not post the control receive; peers' failures "
                          "will surface as timeouts");
}

void CommState::postControlRecv() {
  // Every sender's control message matches with the signature ignored alone, as in every
  // other receive: libfabric's shm provider before 1.19 matches a receive against messages
  // that came before it with the ignore mask of whichever receive last used the queue entry,
  // so a wider mask here (any rank, any sequence) let later receives take another rank's
  // message, and the receive meant for it never completed.
  const uint64_t tag =
      algo::tag::make(algo::tag::base(id, 0, 0), kControlRank, algo::tag::kControlSlot);
  if (engine->endpoint().postRecv(transport::kAnyPeer, tag, algo::tag::kSigMask, controlBuf_,
                                  sizeof(controlBuf_) - 1,
                                  controlRecv_) == transport::PostStatus::Posted) {
    ++posted_;
    controlPosted_ = true;
  }
}

void CommState::sendControl(int peer, std::string bytes) {
  reapControlSends();
  controlSends_.emplace_back();
  ControlSend& s = controlSends_.back();
  s.transfer.owner = this;
  const auto from = static_cast<uint32_t>(rank);
  s.bytes.assign(reinterpret_cast<const char*>(&from), kRankBytes);
  s.bytes += bytes;
  s.peer = peer;
  ++unposted_;
  postControlSend(std::prev(controlSends_.end()));
}

void CommState::postControlSend(std::list<ControlSend>::iterator s) {
  const uint64_t tag =
      algo::tag::make(algo::tag::base(id, 0, 0), kControlRank, algo::tag::kControlSlot);
  const auto st = engine->endpoint().postSend(peers[s->peer], tag, s->bytes.data(), s->bytes.size(),
                                              s->transfer);
  if (st == transport::PostStatus::Retry) {
    // The provider cannot take it yet (over tcp: the connection to a peer this rank has not
    // talked to is being made). A lost abort notice would leave that peer to its timeout.
    engine->controlPending(this);
    return;
  }
  --unposted_;
  if (st == transport::PostStatus::Posted) {
    s->posted = true;
    ++posted_;
    return;
  }
  if (st == transport::PostStatus::Failed)
    SHARC_INFO("rank " << rank << ": control message to rank " << s->peer
                       << " not sent: " << engine->endpoint().lastError());
  s->done = true;  // completed at once (injected), or could not be sent
}

std::string CommState::controlState() const {
  return std::to_string(posted_ - (controlPosted_ ? 1 : 0)) + " control sends in flight, " +
         std::to_string(unposted_) + " not yet posted, control receive " +
         (controlPosted_ ? "still posted" : "closed");
}

void CommState::reapControlSends() {
  std::erase_if(controlSends_, [](const ControlSend& s) { return s.done; });
}

void CommState::retryControlSends() {
  if (unposted_ == 0) return;
  for (auto it = controlSends_.begin(); it != controlSends_.end(); ++it)
    if (!it->posted && !it->done) postControlSend(it);
}

void CommState::abort(const std::string& reason, Result code) {
  if (aborted) return;
  aborted = true;
  abortCode = code;
  abortMessage = "communicator aborted by this rank: " + reason;
  const std::string notice = "A" + reason.substr(0, sizeof(controlBuf_) - 3 - kRankBytes);
  for (int peer = 0; peer < size; ++peer)
    if (peer != rank) sendControl(peer, notice);
  engine->failActive(this, Result::RemoteError, abortMessage);
}

void CommState::close() {
  if (controlPosted_) engine->endpoint().cancel(controlRecv_);
  engine->usedCommIds.reset(id);
  std::erase(engine->comms, this);
}

void CommState::onTransferDone(transport::Transfer& t, size_t bytes, uint64_t) {
  --posted_;
  if (&t != &controlRecv_) {  // a control message we sent
    for (ControlSend& s : controlSends_)
      if (&s.transfer == &t) s.done = true;
    return;
  }
  controlPosted_ = false;
  // Handled after polling (a completion callback must not post or write files).
  // A message too short to name its sender is dropped (serviceControl posts the receive
  // again).
  bytes = std::min(bytes, sizeof(controlBuf_) - 1);
  if (bytes >= kRankBytes) {
    uint32_t from = 0;
    std::memcpy(&from, controlBuf_, kRankBytes);
    inbox_.emplace_back(static_cast<int>(from),
                        std::string(controlBuf_ + kRankBytes, bytes - kRankBytes));
  }
  engine->controlPending(this);
}

void CommState::serviceControl() {
  std::vector<std::pair<int, std::string>> inbox;
  inbox.swap(inbox_);
  for (auto& [from, msg] : inbox) {
    const char type = msg.empty() ? 'A' : msg[0];
    const std::string body = msg.empty() ? msg : msg.substr(1);
    if (type == 'Q') {
      answerProbe(from, body);
    } else if (type == 'R') {
      readReply(from, body);
    } else if (!aborted) {  // 'A': a peer's failure or abort
      aborted = true;
      abortCode = Result::RemoteError;
      abortMessage = "rank " + std::to_string(from) + " aborted the communicator: " + body;
      SHARC_WARN("rank " << rank << ": " << abortMessage);
      engine->failActive(this, Result::RemoteError, abortMessage);
      if (!dumped) {
        dumped = true;
        engine->requestDump("peer-failure", abortMessage);
      }
    }
  }
  if (!aborted && !controlPosted_) postControlRecv();
  retryControlSends();
}

void CommState::onTransferError(transport::Transfer& t, Result, const std::string& message) {
  --posted_;
  if (&t == &controlRecv_) {
    controlPosted_ = false;
    if (message != "canceled")
      SHARC_WARN("rank " << rank << ": control receive failed: " << message);
    return;
  }
  for (ControlSend& s : controlSends_)
    if (&s.transfer == &t) s.done = true;
}

}  // namespace sharc::detail

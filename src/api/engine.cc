// Engine (progress of one endpoint) and CommState (a communicator's tag space and abort
// channel).
#include <algorithm>
#include <chrono>
#include <cstring>

#include "communicator_impl.hpp"
#include "core/log.hpp"

namespace sharc::detail {
namespace {
using Clock = std::chrono::steady_clock;
// How long a failed operation waits for its canceled transfers before reporting the error.
constexpr std::chrono::milliseconds kCancelDrain{5000};
}  // namespace

Engine::Engine(std::unique_ptr<transport::Endpoint> endpoint) : endpoint_(std::move(endpoint)) {}

Engine::~Engine() {
  // Give the provider a moment to flush what was injected last (a closing barrier token may
  // still sit in its queues), then close the endpoint first, so that no completion can reach
  // the objects freed below.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(5);
  while (std::chrono::steady_clock::now() < until) endpoint_->progress();
  endpoint_.reset();
}

bool Engine::progressLocked() {
  bool any = endpoint_->progress() > 0;
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
      SHARC_WARN(r.message);
      // A local failure (dead peer, mismatch, timeout) is announced to the other ranks so
      // they fail now instead of at their own timeout.
      if (r.code != Result::RemoteError && !r.comm->aborted) r.comm->abort(r.message, r.code);
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
    r.status = st == algo::Schedule::State::Done ? RequestState::Status::Done
                                                 : RequestState::Status::Failed;
    active_.erase(active_.begin() + static_cast<long>(i));
  }
  std::erase_if(drainingSchedules_, [](const auto& s) { return s->quiescent(); });
  std::erase_if(drainingComms_, [](const auto& c) { return c->quiescent(); });
  return any;
}

void Engine::failActive(const CommState* comm, Result code, const std::string& message) {
  for (auto& r : active_) {
    if (r->comm.get() == comm && r->schedule->state() == algo::Schedule::State::Running)
      r->schedule->fail(code, r->schedule->describe() + ": " + message);
  }
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
      algos(a) {
  controlRecv_.owner = this;
}

CommState::~CommState() = default;

void CommState::start() {
  engine->usedCommIds.set(id);
  const uint64_t tag = algo::tag::base(id, 0, 0) | algo::tag::kControlSlot;
  const uint64_t ignore = algo::tag::kRankMask | algo::tag::kSeqMask | algo::tag::kSigMask;
  if (engine->endpoint().postRecv(transport::kAnyPeer, tag, ignore, controlBuf_,
                                  sizeof(controlBuf_) - 1,
                                  controlRecv_) == transport::PostStatus::Posted) {
    ++posted_;
    controlPosted_ = true;
  } else
    SHARC_WARN("rank " << rank
                       << ": could not post the abort-notice receive; peers' failures "
                          "will surface as timeouts");
}

void CommState::abort(const std::string& reason, Result code) {
  if (aborted) return;
  aborted = true;
  abortCode = code;
  abortMessage = "communicator aborted by this rank: " + reason;
  notice_ = reason.substr(0, sizeof(controlBuf_) - 2);
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    auto t = std::make_unique<transport::Transfer>();
    t->owner = this;
    const uint64_t tag = algo::tag::make(algo::tag::base(id, 0, 0), static_cast<uint32_t>(rank),
                                         algo::tag::kControlSlot);
    const auto st =
        engine->endpoint().postSend(peers[peer], tag, notice_.data(), notice_.size(), *t);
    if (st == transport::PostStatus::Posted) {
      ++posted_;
      noticeSends_.push_back(std::move(t));
    }
  }
  engine->failActive(this, Result::RemoteError, abortMessage);
}

void CommState::close() {
  if (controlPosted_) engine->endpoint().cancel(controlRecv_);
  engine->usedCommIds.reset(id);
}

void CommState::onTransferDone(transport::Transfer& t, size_t bytes, uint64_t tag) {
  --posted_;
  if (&t != &controlRecv_) return;  // a notice we sent
  controlPosted_ = false;
  if (aborted) return;
  aborted = true;
  abortCode = Result::RemoteError;
  controlBuf_[std::min(bytes, sizeof(controlBuf_) - 1)] = '\0';
  abortMessage = "rank " + std::to_string(algo::tag::rankOf(tag)) +
                 " aborted the communicator: " + controlBuf_;
  SHARC_WARN("rank " << rank << ": " << abortMessage);
  engine->failActive(this, Result::RemoteError, abortMessage);
}

void CommState::onTransferError(transport::Transfer& t, Result, const std::string& message) {
  --posted_;
  if (&t == &controlRecv_) controlPosted_ = false;
  if (&t == &controlRecv_ && message != "canceled")
    SHARC_WARN("rank " << rank << ": abort-notice receive failed: " << message);
}

}  // namespace sharc::detail

// Engine: progress of one endpoint's operations, failure reporting and the watch thread.
#include "runtime/engine.hpp"

#include <algorithm>
#include <chrono>

#include "core/config.hpp"
#include "core/log.hpp"
#include "gpu/host_device_queue.hpp"
#include "runtime/comm_state.hpp"
#include "runtime/engine_watch.hpp"
#include "runtime/request_state.hpp"
#if SHARC_HAVE_CUDA
#include "gpu/cuda_device_queue.hpp"
#endif

namespace sharc::detail {
namespace {
using Clock = std::chrono::steady_clock;
// How long a failed operation waits for its canceled transfers before reporting the error.
// Over tcp a send to a dead or stopped peer cannot be canceled; a second bounds the delay so
// that every survivor reports within its timeout plus that second.
constexpr std::chrono::milliseconds kCancelDrain{1000};
}  // namespace

Engine::Engine(std::unique_ptr<transport::Endpoint> endpoint) : endpoint_(std::move(endpoint)) {}

Engine::~Engine() {
  watch_.reset();  // stops the watch thread before anything it uses goes away
  // Give the provider a moment to flush what was injected last (a closing barrier token may
  // still sit in its queues), then close the endpoint first, so that no completion can reach
  // the objects freed below.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(5);
  while (std::chrono::steady_clock::now() < until) endpoint_->progress();
  for (auto& [device, resources] : devices_) resources->releaseRegistrations();
  endpoint_.reset();
}

DeviceResources& Engine::deviceResources(int cudaDevice) {
  auto it = devices_.find(cudaDevice);
  if (it != devices_.end()) return *it->second;
  std::unique_ptr<core::DeviceQueue> queue;
  if (cudaDevice < 0) {
    queue = std::make_unique<gpu::HostDeviceQueue>(
        std::chrono::microseconds(core::Config::get().hostQueueDelayUs));
  } else {
#if SHARC_HAVE_CUDA
    queue = std::make_unique<gpu::CudaDeviceQueue>(cudaDevice);
#else
    throw Error(Result::InvalidUsage, "device memory on CUDA device " + std::to_string(cudaDevice) +
                                          " in a sharc built without CUDA (SHARC_WITH_CUDA=OFF)");
#endif
  }
  auto made = std::make_unique<DeviceResources>(std::move(queue), *endpoint_);
  return *devices_.emplace(cudaDevice, std::move(made)).first->second;
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
    // A finished request needs its schedule no more. Dropped here, under the lock, it goes
    // back to the scratch pool (not locked) here too, or stays with the drain or the
    // ScheduleCache, where the next call of its shape may rearm it while the user still holds
    // the request.
    r.schedule.reset();
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

}  // namespace sharc::detail

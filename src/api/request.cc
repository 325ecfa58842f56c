// Request: test() and wait() drive the engine's progress.
#include <sched.h>
#include <time.h>

#include "communicator_impl.hpp"

namespace sharc {
namespace detail {
namespace {

bool finished(const RequestState& r) {
  return r.status != RequestState::Status::Pending;
}

void throwIfFailed(const RequestState& r) {
  if (r.status == RequestState::Status::Failed) throw Error(r.code, r.message);
}

}  // namespace

void waitRequest(RequestState& r, std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const bool bounded = timeout != std::chrono::milliseconds::max();
  const auto deadline = bounded ? Clock::now() + timeout : Clock::time_point::max();
  Engine& engine = *r.comm->engine;
  int idle = 0;
  for (;;) {
    bool moved;
    {
      std::lock_guard<std::mutex> lock(engine.mu);
      moved = engine.progressLocked();
      if (finished(r)) break;
      // The stall probe, from the waiting thread too: the watch thread may not get the lock
      // soon while this loop spins (at most every 100 ms; a clock read per 256 idle turns).
      if (!moved && (idle & 255) == 255) engine.probeStallsIfDue();
    }
    // Spin briefly, then yield: ranks often outnumber cores, and the peer we wait for needs
    // the CPU to make progress. Long waits sleep a little to stop burning a core; with more
    // ranks than CPUs they sleep much sooner, since spinning then steals the peers' cores.
    if (moved) {
      idle = 0;
    } else if (++idle > (engine.oversubscribed ? 2 : 64)) {
      // Oversubscribed, a yield hands the core to a rank that has work (as MPI's
      // yield_when_idle does), and after a few yields a sleep: yielding ranks still starve
      // the kernel's own work (on the emulated cluster, its packet processing: 4 nodes of
      // one rank on 2 cores took 2.7 ms for a 64 KiB AllGather at 800 Mbit/s yielding 4,096
      // times, 0.5 ms sleeping after 16; on one host over shared memory the two were alike).
      const int sleepAfter = engine.oversubscribed ? 16 : 20000;
      if (idle > sleepAfter) {
        const timespec ts{0, 50000};
        nanosleep(&ts, nullptr);
      } else {
        sched_yield();
      }
    }
    if (bounded && (idle & 255) == 0 && Clock::now() > deadline)
      throw Error(Result::Timeout, r.schedule->describe() + ": wait timed out after " +
                                       std::to_string(timeout.count()) +
                                       " ms (the operation is still pending)");
  }
  throwIfFailed(r);
}

}  // namespace detail

bool Request::test() {
  if (!state_) throw Error(Result::InvalidUsage, "test() on an empty sharc::Request");
  detail::RequestState& r = *state_;
  // The engine's watch thread may finish r at any time: status, code and message are read
  // under the engine's lock, as it writes them.
  std::lock_guard<std::mutex> lock(r.comm->engine->mu);
  if (!detail::finished(r)) r.comm->engine->progressLocked();
  detail::throwIfFailed(r);
  return r.status == detail::RequestState::Status::Done;
}

void Request::wait(std::chrono::milliseconds timeout) {
  if (!state_) throw Error(Result::InvalidUsage, "wait() on an empty sharc::Request");
  detail::waitRequest(*state_, timeout);
}

bool Request::isCompleted() const noexcept {
  if (!state_) return false;
  std::lock_guard<std::mutex> lock(state_->comm->engine->mu);
  return detail::finished(*state_);
}

}  // namespace sharc

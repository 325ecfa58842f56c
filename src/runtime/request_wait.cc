// waitRequest: the blocking wait behind Request::wait and the runtime's own waits. It drives
// the engine's progress and decides how an idle waiter spins, yields or sleeps.
#include <sched.h>
#include <time.h>

#include "runtime/engine.hpp"
#include "runtime/request_state.hpp"

namespace sharc::detail {

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
      if (r.finished()) break;
      // (Under the lock: a finished request's schedule is gone.)
      if (bounded && (idle & 255) == 0 && Clock::now() > deadline)
        throw Error(Result::Timeout, r.schedule->describe() + ": wait timed out after " +
                                         std::to_string(timeout.count()) +
                                         " ms (the operation is still pending)");
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
      // the kernel's own work, such as packet processing (docs/topology.md, "Which ranks share a
      // node").
      const int sleepAfter = engine.oversubscribed ? 16 : 20000;
      if (idle > sleepAfter) {
        const timespec ts{0, 50000};
        nanosleep(&ts, nullptr);
      } else {
        sched_yield();
      }
    }
  }
  r.throwIfFailed();
}

}  // namespace sharc::detail

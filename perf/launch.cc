#include "launch.hpp"

#include <chrono>
#include <cstdio>

#include "launcher.hpp"

namespace sharc::perf {

int launchLocalRanks(int nranks, int timeoutSec, const std::function<int(int rank)>& body) {
  launcher::Options o;
  o.timeout = std::chrono::seconds(timeoutSec > 0 ? timeoutSec : 0);
  o.nonFatalExitCodes = {kExitCheckFailed};  // finished, with wrong results (rank 0 printed them)
  o.logName = "sharc-perf";
  o.timeoutSetting = "-T";
  const launcher::Result result = launcher::run(nranks, body, o);
  if (result.ok) return 0;
  int failures = 0;  // ranks that did not finish (crashed, stopped, never started)
  int wrongResults = 0;
  for (const launcher::RankResult& r : result.ranks) {
    if (r.exitedZero()) continue;
    ++(r.exitCode() == kExitCheckFailed ? wrongResults : failures);
  }
  if (failures || result.timedOut) {
    std::fprintf(stderr, "sharc-perf: FAILED (%d of %d ranks did not succeed%s)\n", failures,
                 nranks, result.timedOut ? ", timeout" : "");
  } else {
    std::fprintf(stderr, "sharc-perf: FAILED (wrong results, see #wrong)\n");
  }
  return 1;
}

}  // namespace sharc::perf

// -N: run several ranks of the benchmark on this host as forked child processes (the shared
// launcher, tools/launcher/launcher.hpp).
#pragma once

#include <functional>

namespace sharc::perf {

/// Exit status of a rank that finished the benchmark but found wrong results: the launcher
/// reports it but, unlike a crash, does not stop the other ranks for it.
inline constexpr int kExitCheckFailed = 3;

/// Forks `nranks` children; child r gets SHARC_ROOT=127.0.0.1:PORT, SHARC_RANK=r and
/// SHARC_WORLD_SIZE=nranks in its environment (torchrun's and Open MPI's rank variables
/// removed), runs body(r) and exits with its result. The parent waits for every child. When
/// one fails (an exit status other than 0 and kExitCheckFailed, or a signal) or `timeoutSec`
/// (> 0) passes, the others are terminated (SIGTERM, then SIGKILL). Children die with the
/// parent (PR_SET_PDEATHSIG).
/// Returns 0 when every child exited 0, else 1 (after printing which rank failed, and a
/// line containing "FAILED", to stderr).
int launchLocalRanks(int nranks, int timeoutSec, const std::function<int(int rank)>& body);

}  // namespace sharc::perf

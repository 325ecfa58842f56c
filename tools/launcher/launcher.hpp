// Runs N ranks of a job on this host as forked child processes: the one launcher behind the
// test harness (tests/harness/multiprocess.hpp) and sharc-perf's -N (perf/launch.hpp).
//
// Child r gets SHARC_ROOT=127.0.0.1:PORT (a free loopback port, rank 0 serving),
// SHARC_RANK=r and SHARC_WORLD_SIZE=n in its environment, with torchrun's and Open MPI's rank
// variables removed (an outer launcher's rank is not this rank), then Options::env and its own
// Options::rankEnv[r] on top. It runs body(r) and exits with its result; an exception from the
// body is a failure (exit status 1) whose message reaches the parent. Children die with the
// parent (PR_SET_PDEATHSIG).
//
// The parent waits for every child. When one fails (anything but exit status 0, or a status
// in Options::nonFatalExitCodes, from a rank not in Options::mayFail) or Options::timeout
// passes, the others are stopped: SIGTERM, then SIGKILL after Options::grace.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace sharc::launcher {

struct Options {
  /// Every rank still running after this is stopped (0: no limit).
  std::chrono::milliseconds timeout{0};
  /// Between the SIGTERM that stops a rank and the SIGKILL.
  std::chrono::milliseconds grace{3000};
  /// Extra environment for every rank (after SHARC_ROOT, SHARC_RANK, SHARC_WORLD_SIZE: it
  /// may override them).
  std::map<std::string, std::string> env;
  /// Extra environment of each rank (index = rank), after `env`.
  std::vector<std::map<std::string, std::string>> rankEnv;
  /// Ranks that are expected to fail (a rank told to die): their failure stops nobody.
  std::vector<int> mayFail;
  /// Exit statuses that are failures the other ranks need not be stopped for (the rank
  /// finished, with a wrong result). Result::ok() is still false.
  std::vector<int> nonFatalExitCodes;
  /// Stop the other ranks when one fails (see above); false: wait for each until the timeout.
  bool stopOnFailure = true;
  /// Prefix of the lines the launcher prints to stderr as things happen (a rank's message, a
  /// failure, the timeout), e.g. "sharc-perf"; empty: it prints nothing.
  std::string logName;
  /// Named in the timeout's line, e.g. "-T": what sets the timeout.
  std::string timeoutSetting;
};

struct RankResult {
  int status = -1;       ///< waitpid status; -1: never started (fork failed)
  bool stopped = false;  ///< still running when the launcher stopped the ranks (a signal)
  std::string message;   ///< what the body's exception said; empty if none
  bool exitedZero() const { return exitCode() == 0; }
  /// The exit status; -1 when the rank did not exit (a signal, or never started).
  int exitCode() const;
};

struct Result {
  std::vector<RankResult> ranks;
  bool timedOut = false;
  /// The rank whose failure stopped the others; -1 if none did.
  int firstFailure = -1;
  /// Every rank exited 0, or failed while in Options::mayFail, and no timeout.
  bool ok = false;
};

/// Forks `n` ranks running `body` (see above) and waits for them.
Result run(int n, const std::function<int(int rank)>& body, const Options& options = {});

/// A free TCP port on 127.0.0.1 (binds port 0 and releases it). Throws on failure.
int freeLoopbackPort();

/// "exited with status 1", "was killed by signal 9 (Killed)", ...
std::string describeStatus(int waitStatus);

}  // namespace sharc::launcher

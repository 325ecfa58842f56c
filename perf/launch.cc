#include "launch.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace sharc::perf {

int pickFreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    ::close(fd);
    throw std::runtime_error(std::string("binding a port on 127.0.0.1: ") + std::strerror(err));
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

namespace {

[[noreturn]] void runChild(int rank, int nranks, int port, pid_t parent,
                           const std::function<int(int)>& body) {
  // Die with the launcher so that a killed launcher never leaves ranks behind.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(1);
  const std::string root = "127.0.0.1:" + std::to_string(port);
  ::setenv("SHARC_ROOT", root.c_str(), 1);
  ::setenv("SHARC_RANK", std::to_string(rank).c_str(), 1);
  ::setenv("SHARC_WORLD_SIZE", std::to_string(nranks).c_str(), 1);
  for (const char* name :
       {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"})
    ::unsetenv(name);
  int rc = 1;
  try {
    rc = body(rank);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sharc-perf: rank %d: %s\n", rank, e.what());
  } catch (...) {
    std::fprintf(stderr, "sharc-perf: rank %d: unknown exception\n", rank);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  ::_exit(rc);
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const char* name = ::strsignal(WTERMSIG(status));
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + (name ? name : "?") +
           ")";
  }
  return "ended with status " + std::to_string(status);
}

}  // namespace

int launchLocalRanks(int nranks, int timeoutSec, const std::function<int(int rank)>& body) {
  const int port = pickFreeLoopbackPort();
  const pid_t self = ::getpid();
  std::fflush(nullptr);  // children must not inherit unwritten output
  std::vector<pid_t> pids(static_cast<size_t>(nranks), -1);
  std::vector<bool> done(pids.size(), false);
  int failures = 0;      // ranks that did not exit 0 (or could not be started)
  int wrongResults = 0;  // ranks that exited kExitCheckFailed
  bool timedOut = false;
  int running = 0;

  auto killAll = [&](int sig) {
    for (size_t r = 0; r < pids.size(); ++r)
      if (pids[r] > 0 && !done[r]) ::kill(pids[r], sig);
  };

  for (int r = 0; r < nranks; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) runChild(r, nranks, port, self, body);
    if (pid < 0) {
      std::fprintf(stderr, "sharc-perf: fork of rank %d failed: %s\n", r, std::strerror(errno));
      ++failures;
      break;
    }
    pids[static_cast<size_t>(r)] = pid;
    ++running;
  }

  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  std::optional<Clock::time_point> killDeadline;  // SIGKILL after SIGTERM grace
  if (failures) {
    killAll(SIGTERM);
    killDeadline = Clock::now() + std::chrono::seconds(3);
  }
  while (running > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno != EINTR) break;  // no children left
    if (pid > 0) {
      for (size_t r = 0; r < pids.size(); ++r) {
        if (pids[r] != pid) continue;
        done[r] = true;
        --running;
        const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (WIFEXITED(status) && WEXITSTATUS(status) == kExitCheckFailed) {
          ++wrongResults;  // finished, with wrong results (rank 0 printed the table)
        } else if (!ok) {
          // Ranks killed by us after a failure are not reported as separate failures.
          if (!killDeadline)
            std::fprintf(stderr, "sharc-perf: rank %zu (pid %d) %s; stopping the other ranks\n", r,
                         static_cast<int>(pid), describe(status).c_str());
          ++failures;
          if (!killDeadline) {
            killAll(SIGTERM);
            killDeadline = Clock::now() + std::chrono::seconds(3);
          }
        }
      }
      continue;
    }
    const auto now = Clock::now();
    if (!killDeadline && timeoutSec > 0 && now - start > std::chrono::seconds(timeoutSec)) {
      std::fprintf(stderr, "sharc-perf: timeout after %d s (-T); stopping the ranks\n", timeoutSec);
      timedOut = true;
      killAll(SIGTERM);
      killDeadline = now + std::chrono::seconds(3);
    }
    if (killDeadline && now > *killDeadline) {
      killAll(SIGKILL);
      killDeadline = now + std::chrono::hours(24);  // SIGKILL once; keep reaping
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (failures || timedOut) {
    std::fprintf(stderr, "sharc-perf: FAILED (%d of %d ranks did not succeed%s)\n", failures,
                 nranks, timedOut ? ", timeout" : "");
    return 1;
  }
  if (wrongResults) {
    std::fprintf(stderr, "sharc-perf: FAILED (wrong results, see #wrong)\n");
    return 1;
  }
  return 0;
}

}  // namespace sharc::perf

#include "multiprocess.hpp"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sharc/communicator.hpp>
#include <sstream>
#include <thread>

#include "core/config.hpp"

namespace sharc::testing {

int freeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

namespace {

[[noreturn]] void runChild(int rank, int n, const std::string& id, int pipeFd,
                           const std::function<void(const RankContext&)>& body,
                           const std::string* nodeId) {
  std::string failure;
  try {
    // The configuration is per process and read once: it must see this rank's node.
    if (nodeId && core::Config::get().nodeId != *nodeId)
      throw std::runtime_error("SHARC_NODE_ID '" + *nodeId +
                               "' not seen: core::Config was loaded before the fork");
    body(RankContext{rank, n, id});
    if (::testing::Test::HasFailure()) failure = "gtest assertion failed (see output above)";
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    failure = "unknown exception";
  }
  if (!failure.empty()) {
    const std::string line = "rank " + std::to_string(rank) + ": " + failure + "\n";
    (void)!write(pipeFd, line.data(), line.size());
  }
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(failure.empty() ? 0 : 1);
}

}  // namespace

std::vector<int> runRanks(int n, const std::function<void(const RankContext&)>& body,
                          const RunOptions& options) {
  std::string id;
  if (options.rendezvous == Rendezvous::UniqueIdFromParent) {
    const UniqueId uid = makeUniqueId();
    id.assign(uid.bytes.data(), uid.bytes.size());
  }
  const int port = freeLoopbackPort();
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      setenv("SHARC_ROOT", ("127.0.0.1:" + std::to_string(port)).c_str(), 1);
      setenv("SHARC_RANK", std::to_string(r).c_str(), 1);
      setenv("SHARC_WORLD_SIZE", std::to_string(n).c_str(), 1);
      for (const auto& [k, v] : options.env) setenv(k.c_str(), v.c_str(), 1);
      if (options.oneRankPerNode) setenv("SHARC_NODE_ID", ("node" + std::to_string(r)).c_str(), 1);
      if (static_cast<size_t>(r) < options.nodeIds.size())
        setenv("SHARC_NODE_ID", options.nodeIds[static_cast<size_t>(r)].c_str(), 1);
      const bool placed = static_cast<size_t>(r) < options.nodeIds.size();
      runChild(r, n, id, fds[1], body, placed ? &options.nodeIds[static_cast<size_t>(r)] : nullptr);
    }
    pids.push_back(pid);
  }
  close(fds[1]);

  std::vector<int> status(n, -1);
  int remaining = n;
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  while (remaining > 0) {
    for (int r = 0; r < n; ++r) {
      if (status[r] != -1) continue;
      int st = 0;
      if (waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        status[r] = st;
        --remaining;
      }
    }
    if (remaining == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < n; ++r)
        if (status[r] == -1) kill(pids[r], SIGKILL);
      ADD_FAILURE() << "ranks still running after " << options.timeout.count()
                    << " s: killed (a hang is a bug: every wait must have a timeout)";
      for (int r = 0; r < n; ++r)
        if (status[r] == -1) waitpid(pids[r], &status[r], 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::string messages;
  char buf[4096];
  ssize_t got;
  while ((got = read(fds[0], buf, sizeof(buf))) > 0) messages.append(buf, static_cast<size_t>(got));
  close(fds[0]);
  for (int r = 0; r < n; ++r) {
    const bool ok = WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0;
    const bool allowed =
        std::find(options.mayFail.begin(), options.mayFail.end(), r) != options.mayFail.end();
    if (!ok && !allowed)
      ADD_FAILURE() << "rank " << r << " of " << n << " failed (status " << status[r] << ")";
  }
  // Each message line starts with "rank R:"; only ranks allowed to fail may leave one.
  std::istringstream lines(messages);
  std::string line;
  while (std::getline(lines, line)) {
    const int r = std::atoi(line.c_str() + 5);
    const bool allowed =
        std::find(options.mayFail.begin(), options.mayFail.end(), r) != options.mayFail.end();
    if (allowed)
      std::printf("(allowed) %s\n", line.c_str());
    else
      ADD_FAILURE() << line;
  }
  return status;
}

}  // namespace sharc::testing

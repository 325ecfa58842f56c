#include "launcher.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace sharc::launcher {

int RankResult::exitCode() const {
  return status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int freeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
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

std::string describeStatus(int status) {
  if (status == -1) return "was not started";
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const char* name = ::strsignal(WTERMSIG(status));
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + (name ? name : "?") +
           ")";
  }
  return "ended with status " + std::to_string(status);
}

namespace {

using Clock = std::chrono::steady_clock;

// A rank's message travels to the parent as one record, written with one write() of at most
// PIPE_BUF bytes, so records of ranks writing at once never interleave.
struct RecordHeader {
  int32_t rank;
  uint32_t length;
};
constexpr size_t kMaxMessage = PIPE_BUF - sizeof(RecordHeader);

void sendMessage(int fd, int rank, const std::string& text) {
  const RecordHeader h{rank, static_cast<uint32_t>(std::min(text.size(), kMaxMessage))};
  char record[PIPE_BUF];
  std::memcpy(record, &h, sizeof h);
  std::memcpy(record + sizeof h, text.data(), h.length);
  (void)!::write(fd, record, sizeof h + h.length);
}

bool contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

[[noreturn]] void runChild(int rank, int n, int port, pid_t parent, int messageFd,
                           const std::function<int(int)>& body, const Options& o) {
  // Die with the launcher so that a killed launcher never leaves ranks behind.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(1);
  for (const char* name :
       {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"})
    ::unsetenv(name);
  ::setenv("SHARC_ROOT", ("127.0.0.1:" + std::to_string(port)).c_str(), 1);
  ::setenv("SHARC_RANK", std::to_string(rank).c_str(), 1);
  ::setenv("SHARC_WORLD_SIZE", std::to_string(n).c_str(), 1);
  for (const auto& [k, v] : o.env) ::setenv(k.c_str(), v.c_str(), 1);
  if (static_cast<size_t>(rank) < o.rankEnv.size())
    for (const auto& [k, v] : o.rankEnv[static_cast<size_t>(rank)])
      ::setenv(k.c_str(), v.c_str(), 1);
  int rc = 1;
  std::string failure;
  try {
    rc = body(rank);
  } catch (const std::exception& e) {
    failure = *e.what() ? e.what() : "exception with an empty message";
  } catch (...) {
    failure = "unknown exception";
  }
  if (!failure.empty()) sendMessage(messageFd, rank, failure);
  std::fflush(stdout);
  std::fflush(stderr);
  ::_exit(failure.empty() ? rc : 1);
}

// The parent's side: children, their messages, and the stopping of the ranks.
class Job {
 public:
  Job(int n, const Options& o)
      : o_(o), pids_(static_cast<size_t>(n), -1), reaped_(static_cast<size_t>(n), false) {
    result_.ranks.resize(static_cast<size_t>(n));
  }

  Result run(const std::function<int(int)>& body) {
    const int port = freeLoopbackPort();
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
      throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    messages_ = fds[0];
    const pid_t self = ::getpid();
    std::fflush(nullptr);  // children must not inherit unwritten output
    const int n = static_cast<int>(pids_.size());
    for (int r = 0; r < n; ++r) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::close(fds[0]);
        runChild(r, n, port, self, fds[1], body, o_);
      }
      if (pid < 0) {
        rank(r).message = std::string("fork failed: ") + std::strerror(errno);
        log("rank " + std::to_string(r) + ": " + rank(r).message);
        failed(r);
        break;
      }
      pids_[static_cast<size_t>(r)] = pid;
      ++running_;
    }
    ::close(fds[1]);
    ::fcntl(messages_, F_SETFL, O_NONBLOCK);
    wait();
    readMessages();
    ::close(messages_);
    bool ok = !result_.timedOut && result_.firstFailure == -1;
    for (int r = 0; r < n; ++r)
      ok = ok && (rank(r).exitedZero() || (contains(o_.mayFail, r) && rank(r).status != -1));
    result_.ok = ok;
    return std::move(result_);
  }

 private:
  RankResult& rank(int r) { return result_.ranks[static_cast<size_t>(r)]; }

  void log(const std::string& line) const {
    if (o_.logName.empty()) return;
    std::fprintf(stderr, "%s: %s\n", o_.logName.c_str(), line.c_str());
    std::fflush(stderr);
  }

  void wait() {
    const auto start = Clock::now();
    while (running_ > 0) {
      readMessages();
      for (size_t r = 0; r < pids_.size(); ++r) {
        if (pids_[r] <= 0 || reaped_[r]) continue;
        int status = 0;
        const pid_t got = ::waitpid(pids_[r], &status, WNOHANG);
        if (got == 0 || (got < 0 && errno == EINTR)) continue;
        --running_;
        reaped_[r] = true;
        if (got < 0) {  // ECHILD: someone else's waitpid took it
          result_.ranks[r].message = "its exit status was collected elsewhere";
          failed(static_cast<int>(r));
          continue;
        }
        result_.ranks[r].status = status;
        if (!result_.ranks[r].exitedZero()) exited(static_cast<int>(r), status);
      }
      if (running_ == 0) break;
      const auto now = Clock::now();
      if (!stopping_ && o_.timeout.count() > 0 && now - start > o_.timeout) {
        result_.timedOut = true;
        char seconds[32];
        std::snprintf(seconds, sizeof seconds, "%g s", o_.timeout.count() / 1000.0);
        log(std::string("timeout after ") + seconds +
            (o_.timeoutSetting.empty() ? "" : " (" + o_.timeoutSetting + ")") +
            "; stopping the ranks");
        stop();
      }
      if (stopping_ && !killed_ && now > killAt_) {
        signalRunning(SIGKILL);
        killed_ = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  // Rank r exited other than with status 0.
  void exited(int r, int status) {
    if (rank(r).stopped || contains(o_.mayFail, r)) return;
    if (contains(o_.nonFatalExitCodes, rank(r).exitCode())) return;
    const bool stopsOthers = o_.stopOnFailure && !stopping_ && running_ > 0;
    log("rank " + std::to_string(r) + " (pid " + std::to_string(pids_[static_cast<size_t>(r)]) +
        ") " + describeStatus(status) + (stopsOthers ? "; stopping the other ranks" : ""));
    failed(r);
  }

  void failed(int r) {
    if (result_.firstFailure == -1) result_.firstFailure = r;
    if (o_.stopOnFailure) stop();
  }

  void stop() {
    if (stopping_) return;
    stopping_ = true;
    for (size_t r = 0; r < pids_.size(); ++r)
      if (pids_[r] > 0 && !reaped_[r]) result_.ranks[r].stopped = true;
    signalRunning(SIGTERM);
    killAt_ = Clock::now() + o_.grace;
  }

  void signalRunning(int sig) {
    for (size_t r = 0; r < pids_.size(); ++r)
      if (pids_[r] > 0 && !reaped_[r]) ::kill(pids_[r], sig);
  }

  // Complete records from the pipe; a partial one waits for the rest.
  void readMessages() {
    char buf[PIPE_BUF];
    ssize_t got;
    while ((got = ::read(messages_, buf, sizeof buf)) > 0) pending_.append(buf, size_t(got));
    while (pending_.size() >= sizeof(RecordHeader)) {
      RecordHeader h;
      std::memcpy(&h, pending_.data(), sizeof h);
      if (pending_.size() < sizeof h + h.length) break;
      const std::string text = pending_.substr(sizeof h, h.length);
      pending_.erase(0, sizeof h + h.length);
      if (h.rank < 0 || static_cast<size_t>(h.rank) >= pids_.size()) continue;
      std::string& message = rank(h.rank).message;
      message += message.empty() ? text : "; " + text;
      log("rank " + std::to_string(h.rank) + ": " + text);
    }
  }

  const Options& o_;
  std::vector<pid_t> pids_;
  std::vector<bool> reaped_;
  Result result_;
  int running_ = 0;
  int messages_ = -1;
  std::string pending_;
  bool stopping_ = false;
  bool killed_ = false;
  Clock::time_point killAt_{};
};

}  // namespace

Result run(int n, const std::function<int(int rank)>& body, const Options& options) {
  if (n < 1) throw std::invalid_argument("launcher::run: at least one rank");
  return Job(n, options).run(body);
}

}  // namespace sharc::launcher

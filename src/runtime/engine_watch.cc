#include "runtime/engine_watch.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "core/config.hpp"
#include "core/log.hpp"
#include "runtime/communicator_impl.hpp"

namespace sharc::detail {
namespace {

constexpr auto kTick = std::chrono::milliseconds(100);
std::atomic<uint64_t> g_traceSignals{0};

void onTraceSignal(int) {
  g_traceSignals.fetch_add(1, std::memory_order_relaxed);  // async-signal-safe
}

void installSignalHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_handler = onTraceSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (sigaction(SIGUSR1, &sa, nullptr) != 0)
      SHARC_WARN("SHARC_TRACE_SIGNAL: cannot handle SIGUSR1: " << std::strerror(errno));
  });
}

void writeAll(int fd, const std::string& data) {
  timeval tv{2, 0};  // a reader that stops reading does not hold the thread for long
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  for (size_t done = 0; done < data.size();) {
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace

bool EngineWatch::wanted() {
  const core::Config& c = core::Config::get();
  return c.stallProbe.count() > 0 || c.traceSignal || !c.traceSocket.empty();
}

EngineWatch::EngineWatch(Engine& engine) : engine_(engine), owner_(getpid()) {
  const core::Config& c = core::Config::get();
  if (c.traceSignal) installSignalHandler();
  signalsSeen_ = g_traceSignals.load();
  if (!c.traceSocket.empty()) openSocket();
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "sharc-watch");  // named for ps, gdb and leak checks
    run();
  });
}

EngineWatch::~EngineWatch() {
  if (getpid() != owner_) {  // a forked child: the thread and the socket are the parent's
    thread_.detach();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(m_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (listenFd_ >= 0) {
    ::close(listenFd_);
    ::unlink(socketPath_.c_str());
  }
}

void EngineWatch::openSocket() {
  const std::string& dir = core::Config::get().traceSocket;
  mkdir(dir.c_str(), 0700);
  socketPath_ =
      dir + "/sharc-" + engine_.world.key + "-rank" + std::to_string(engine_.world.rank) + ".sock";
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socketPath_.size() >= sizeof(addr.sun_path)) {
    SHARC_WARN("SHARC_TRACE_SOCKET: path too long for a Unix socket: " << socketPath_);
    return;
  }
  std::memcpy(addr.sun_path, socketPath_.c_str(), socketPath_.size() + 1);
  ::unlink(socketPath_.c_str());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  // Owner-only: the record names hosts, pids and buffers' sizes.
  const mode_t old = umask(0077);
  const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  ::chmod(socketPath_.c_str(), 0600) == 0 && ::listen(fd, 16) == 0;
  umask(old);
  if (!ok) {
    SHARC_WARN("SHARC_TRACE_SOCKET: cannot listen on " << socketPath_ << ": "
                                                       << std::strerror(errno));
    if (fd >= 0) ::close(fd);
    return;
  }
  listenFd_ = fd;
  SHARC_INFO("rank " << engine_.world.rank << ": flight record served on " << socketPath_);
}

void EngineWatch::run() {
  std::unique_lock<std::mutex> lock(m_);
  while (!stop_) {
    cv_.wait_for(lock, kTick, [this] { return stop_; });
    if (stop_) break;
    lock.unlock();
    try {
      tick();
    } catch (const std::exception& e) {
      SHARC_WARN("rank " << engine_.world.rank << ": watch thread: " << e.what());
    }
    lock.lock();
  }
}

void EngineWatch::tick() {
  std::vector<int> clients;
  if (listenFd_ >= 0)
    for (int fd; (fd = ::accept4(listenFd_, nullptr, nullptr, SOCK_CLOEXEC)) >= 0;)
      clients.push_back(fd);
  const uint64_t signals = g_traceSignals.load(std::memory_order_relaxed);
  std::unique_lock<std::mutex> lock(engine_.mu, std::try_to_lock);
  // A call is making progress itself (and sends the stall probes): leave it alone, unless
  // the lock has been busy for half a second.
  if (!lock.owns_lock() && clients.empty() && signals == signalsSeen_ && ++busyTicks_ < 5) return;
  if (!lock.owns_lock()) lock.lock();
  busyTicks_ = 0;
  engine_.progressLocked();
  engine_.probeStallsIfDue();
  if (signals != signalsSeen_) {
    signalsSeen_ = signals;
    const std::string& dir = core::Config::get().traceDir;
    const std::string path = engine_.writeTrace(dir.empty() ? "." : dir, "signal", "");
    SHARC_WARN("rank " << engine_.world.rank << ": SIGUSR1: flight record written to " << path);
  }
  if (clients.empty()) return;
  const std::string json = engine_.traceJson("live", "");
  lock.unlock();
  for (int fd : clients) {
    writeAll(fd, json);
    ::close(fd);
  }
}

}  // namespace sharc::detail

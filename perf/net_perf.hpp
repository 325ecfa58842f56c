// sharc-net-perf: what the plugin side (net_perf.cc) and the raw libfabric side
// (net_perf_fabric.cc) share: the Link both are driven through, so that the very same
// bandwidth and latency loops time both; the error, deadline and control-channel helpers.
#pragma once

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace sharc::netperf {

/// Request slots of a Link: 0..kMaxWindow-1 carry the window, the last two the ack and the
/// ping-pong's second message. NCCL allows 32 requests in flight per comm (NCCL_NET_MAX_REQUESTS).
inline constexpr int kMaxWindow = 30;
inline constexpr int kSlots = kMaxWindow + 2;
inline constexpr int kTagData = 1;
inline constexpr int kTagAck = 2;

/// Every failure is this: the message names the call and what was expected.
class Failure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using Clock = std::chrono::steady_clock;

/// "60 s", "2.5 s": a limit as the messages print it.
inline std::string secondsText(double s) {
  std::string t = std::to_string(s);
  t.erase(t.find_last_not_of('0') + 1);
  if (t.back() == '.') t.pop_back();
  return t + " s";
}

/// A wait's time limit; check() is cheap enough for a polling loop.
class Deadline {
 public:
  explicit Deadline(double seconds) : seconds_(seconds) { restart(); }
  /// Starts the limit over (a wait that made progress).
  void restart() {
    end_ = Clock::now() +
           std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds_));
  }
  /// Throws Failure naming `what` once the limit has passed (checks the clock every 256 calls).
  void check(const char* what) {
    if ((++calls_ & 255) != 0) return;
    if (Clock::now() > end_)
      throw Failure(std::string(what) + ": not done within " + secondsText(seconds_) +
                    " (timeout, -T)");
  }

 private:
  Clock::time_point end_;
  double seconds_;
  unsigned calls_ = 0;
};

/// The control channel between the two ranks: a socketpair made before fork. Every receive
/// has the -T limit and fails on the peer's exit instead of hanging.
class Control {
 public:
  Control(int fd, double timeout) : fd_(fd), timeout_(timeout) {}
  void send(const void* data, size_t len) {
    const char* p = static_cast<const char*>(data);
    while (len > 0) {
      const ssize_t n = ::send(fd_, p, len, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        throw Failure(std::string("control channel: send returned ") + std::strerror(errno) +
                      ", expected the peer process alive");
      p += n, len -= static_cast<size_t>(n);
    }
  }
  void recv(void* data, size_t len, const char* what) {
    char* p = static_cast<char*>(data);
    while (len > 0) {
      pollfd pfd{fd_, POLLIN, 0};
      const int r = ::poll(&pfd, 1, static_cast<int>(timeout_ * 1000));
      if (r < 0 && errno == EINTR) continue;
      if (r == 0)
        throw Failure(std::string("control channel: nothing from the peer within ") +
                      secondsText(timeout_) + " while waiting for " + what + " (timeout, -T)");
      const ssize_t n = ::recv(fd_, p, len, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        throw Failure(std::string("control channel: peer closed it while waiting for ") + what +
                      ", expected the peer process alive");
      p += n, len -= static_cast<size_t>(n);
    }
  }
  void barrier(const char* what) {
    char c = 'b';
    send(&c, 1);
    recv(&c, 1, what);
  }
  std::string exchange(const std::string& mine, const char* what) {
    const uint32_t len = static_cast<uint32_t>(mine.size());
    send(&len, sizeof(len));
    send(mine.data(), mine.size());
    uint32_t peerLen = 0;
    recv(&peerLen, sizeof(peerLen), what);
    std::string peer(peerLen, '\0');
    recv(peer.data(), peerLen, what);
    return peer;
  }

 private:
  int fd_;
  double timeout_;
};

/// One rank's two-way connection to the peer through one API (the plugin, or raw libfabric).
/// Sends always go from the `tx` buffer given to attach(), receives into `rx`.
class Link {
 public:
  virtual ~Link() = default;
  /// One line on what is underneath (provider, domain, device).
  virtual std::string describe() const = 0;
  /// Registers the buffers every later send (tx) and receive (rx) lies in.
  virtual void attach(void* tx, size_t txBytes, void* rx, size_t rxBytes) = 0;
  /// Posts into request slot `slot` (free); false: no resources now, test others and retry.
  virtual bool isend(int slot, const void* buf, size_t size, int tag) = 0;
  virtual bool irecv(int slot, void* buf, size_t size, int tag) = 0;
  /// Polls slot `slot`'s request; true once it completed (the slot is free again), with
  /// `size` the bytes it moved.
  virtual bool test(int slot, size_t& size) = 0;
  /// Releases registrations and connections before the peer goes away (after a barrier).
  virtual void close() {}
};

// ---- small helpers ---------------------------------------------------------------------------

/// The bytes every message of `size` carries (-c 1): a function of position and size.
inline void fillPattern(unsigned char* p, size_t size) {
  for (size_t i = 0; i < size; ++i)
    p[i] = static_cast<unsigned char>((i * 2654435761u >> 13) ^ (i >> 16) ^ (size * 31));
}

/// The middle value (the mean of the middle two for an even count); 0 for none.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

/// Page-aligned, zeroed (so already faulted in) memory.
using Buffer = std::unique_ptr<unsigned char, decltype(&std::free)>;
inline Buffer allocBuffer(size_t bytes) {
  bytes = (bytes + 4095) / 4096 * 4096;
  auto* p = static_cast<unsigned char*>(std::aligned_alloc(4096, bytes));
  if (p == nullptr)
    throw Failure("aligned_alloc(" + std::to_string(bytes) + ") returned NULL, expected memory");
  std::memset(p, 0, bytes);  // fault the pages in before anything is timed
  return Buffer(p, &std::free);
}

/// The raw libfabric Link (net_perf_fabric.cc), opened on `provider`; its address is what
/// the peer passes to connect().
class RawLink : public Link {
 public:
  virtual std::string address() const = 0;
  virtual void connect(const std::string& peerAddress) = 0;
};
std::unique_ptr<RawLink> openRawLink(const std::string& provider);

}  // namespace sharc::netperf

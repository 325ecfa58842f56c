// Small RAII TCP helpers for the bootstrap: every wait is bounded by a deadline (poll), sockets
// are non-blocking and close-on-exec, and sends use MSG_NOSIGNAL so a dead peer never raises
// SIGPIPE.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sharc::bootstrap::net {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

/// Milliseconds left until `deadline` (0 when passed), clamped to what poll() accepts.
int remainingMs(Deadline deadline);
/// now + timeout, saturating instead of overflowing for huge timeouts.
Deadline deadlineAfter(std::chrono::milliseconds timeout);

/// Owns a file descriptor; closes it on destruction. Move-only.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) noexcept : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  explicit operator bool() const noexcept { return valid(); }
  int release() noexcept;
  void reset(int fd = -1) noexcept;

 private:
  int fd_ = -1;
};

/// A socket address of either family.
struct SockAddr {
  sockaddr_storage storage{};
  socklen_t length = 0;
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
  int family() const { return storage.ss_family; }
  /// Numeric address without the port ("10.0.0.1", "::1").
  std::string host() const;
  uint16_t port() const;
  /// "10.0.0.1:29500" or "[::1]:29500".
  std::string toString() const;
};

/// "host:port", bracketing IPv6 literals.
std::string joinHostPort(const std::string& host, uint16_t port);

/// Resolves `host` (numeric IPv4/IPv6 or a name; "" means the IPv4 wildcard when `passive`).
/// Returns the addresses, or an empty vector with `*error` set (and `*retryable` true when
/// the failure may be temporary, e.g. DNS not ready yet).
std::vector<SockAddr> resolve(const std::string& host, uint16_t port, bool passive,
                              std::string* error, bool* retryable = nullptr);

/// Creates a listening socket bound to host:port (port 0: any free port). Throws
/// sharc::Error(SystemError) naming the address on failure.
Fd listenOn(const std::string& host, uint16_t port, int backlog = 512);

/// The address a socket is bound to / connected to.
SockAddr localAddress(int fd);
SockAddr peerAddress(int fd);

/// Connects to host:port, retrying refused/unreachable/unresolvable attempts with backoff
/// until `deadline`. On failure returns an invalid Fd and sets `*error` to the last reason
/// ("Connection refused") and `*timedOut` to whether the deadline ended the attempts (false:
/// a non-retryable error such as an invalid address).
Fd connectWithRetry(const std::string& host, uint16_t port, Deadline deadline, std::string* error,
                    bool* timedOut);

/// Accepts one connection, waiting until `deadline`. Returns an invalid Fd on timeout or
/// error. `peer` receives the peer's "host:port" when not null.
Fd acceptUntil(int listenFd, Deadline deadline, std::string* peer = nullptr);

/// Non-blocking accept (the socket returned is non-blocking and close-on-exec). Returns an
/// invalid Fd when no connection is pending (errno EAGAIN) or on error (errno set).
Fd acceptNow(int listenFd);

enum class IoResult {
  Ok,       ///< all bytes transferred
  Timeout,  ///< the deadline passed first
  Closed,   ///< the peer closed the connection (EOF, EPIPE, ECONNRESET)
  Error,    ///< another socket error
};

/// Sends / receives exactly `length` bytes before `deadline`. `*err` receives errno on Error
/// or Closed (0 for a clean EOF).
IoResult sendAll(int fd, const void* data, size_t length, Deadline deadline, int* err = nullptr);
IoResult recvAll(int fd, void* data, size_t length, Deadline deadline, int* err = nullptr);

/// Disables Nagle's algorithm (bootstrap messages are small and latency-bound).
void setNoDelay(int fd);

/// strerror_r as a std::string.
std::string errnoString(int err);

}  // namespace sharc::bootstrap::net

namespace sharc::bootstrap {
/// localAdvertiseAddress() with an explicit SHARC_SOCKET_IFNAME value: a comma-separated list
/// of interface names or prefixes ("" = automatic). Throws InvalidArgument when a non-empty
/// list matches no interface that is up with an address. Defined in unique_id.cc.
std::string localAdvertiseAddress(const std::string& ifnames);
}  // namespace sharc::bootstrap

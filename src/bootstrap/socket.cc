#include "bootstrap/socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <sharc/error.hpp>
#include <thread>

namespace sharc::bootstrap::net {
namespace {

// strerror_r has a GNU and an XSI flavour; these overloads accept either return type.
[[maybe_unused]] std::string strerrorResult(int rc, const char* buf) {
  return rc == 0 ? std::string(buf) : std::string("unknown error");
}
[[maybe_unused]] std::string strerrorResult(const char* msg, const char*) {
  return std::string(msg);
}

bool retryableConnectError(int err) {
  switch (err) {
    case ECONNREFUSED:
    case ETIMEDOUT:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ENETDOWN:
    case ECONNRESET:
    case ECONNABORTED:
    case EADDRNOTAVAIL:  // ephemeral ports exhausted: transient
    case EAGAIN:
    case EINTR: return true;
    default: return false;
  }
}

// Waits for `events` on fd until `deadline`. Returns >0 ready, 0 timeout, <0 error (errno).
int pollOne(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, remainingMs(deadline));
    if (rc < 0 && errno == EINTR) continue;
    return rc;
  }
}

// One non-blocking connect attempt bounded by `deadline`. Returns the connected socket or an
// invalid Fd with *err set.
Fd connectOnce(const SockAddr& addr, Deadline deadline, int* err) {
  Fd fd(::socket(addr.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) {
    *err = errno;
    return Fd();
  }
  if (::connect(fd.get(), addr.get(), addr.length) != 0) {
    if (errno != EINPROGRESS && errno != EINTR) {
      *err = errno;
      return Fd();
    }
    const int rc = pollOne(fd.get(), POLLOUT, deadline);
    if (rc <= 0) {
      *err = rc == 0 ? ETIMEDOUT : errno;
      return Fd();
    }
    int soError = 0;
    socklen_t len = sizeof(soError);
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &soError, &len) != 0) soError = errno;
    if (soError != 0) {
      *err = soError;
      return Fd();
    }
  }
  setNoDelay(fd.get());
  return fd;
}

}  // namespace

int remainingMs(Deadline deadline) {
  const auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  // Round up so that a wait never ends just before the deadline and spins.
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<int64_t>(ms, std::numeric_limits<int>::max()));
}

Deadline deadlineAfter(std::chrono::milliseconds timeout) {
  const auto now = Clock::now();
  const auto maxLeft = Deadline::max() - now;
  if (timeout >= std::chrono::duration_cast<std::chrono::milliseconds>(maxLeft)) {
    return Deadline::max();
  }
  return now + timeout;
}

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

int Fd::release() noexcept {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void Fd::reset(int fd) noexcept {
  if (fd_ >= 0) ::close(fd_);  // not retried on EINTR: on Linux the fd is gone either way
  fd_ = fd;
}

std::string errnoString(int err) {
  char buf[256] = {0};
  return strerrorResult(strerror_r(err, buf, sizeof(buf)), buf);
}

std::string SockAddr::host() const {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (family() == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&storage);
    ::inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
  } else if (family() == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&storage);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf));
  } else {
    return "?";
  }
  return buf;
}

uint16_t SockAddr::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (family() == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  }
  return 0;
}

std::string SockAddr::toString() const {
  return joinHostPort(host(), port());
}

std::string joinHostPort(const std::string& host, uint16_t port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

std::vector<SockAddr> resolve(const std::string& host, uint16_t port, bool passive,
                              std::string* error, bool* retryable) {
  if (retryable != nullptr) *retryable = false;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  const char* node = host.empty() ? nullptr : host.c_str();
  if (node == nullptr) hints.ai_family = AF_INET;  // "" = every IPv4 address
  const std::string service = std::to_string(port);
  addrinfo* list = nullptr;
  const int rc = ::getaddrinfo(node, service.c_str(), &hints, &list);
  std::vector<SockAddr> out;
  if (rc != 0) {
    if (error != nullptr) {
      *error = rc == EAI_SYSTEM ? errnoString(errno) : std::string(::gai_strerror(rc));
    }
    if (retryable != nullptr) *retryable = rc == EAI_AGAIN || rc == EAI_NONAME;
    return out;
  }
  for (const addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
    if (ai->ai_addrlen > sizeof(sockaddr_storage)) continue;
    SockAddr addr;
    std::memcpy(&addr.storage, ai->ai_addr, ai->ai_addrlen);
    addr.length = static_cast<socklen_t>(ai->ai_addrlen);
    out.push_back(addr);
  }
  ::freeaddrinfo(list);
  if (out.empty() && error != nullptr) *error = "no IPv4 or IPv6 address";
  return out;
}

Fd listenOn(const std::string& host, uint16_t port, int backlog) {
  const std::string where = joinHostPort(host.empty() ? "0.0.0.0" : host, port);
  std::string error;
  const std::vector<SockAddr> addrs = resolve(host, port, /*passive=*/true, &error);
  if (addrs.empty()) {
    throw Error(Result::SystemError, "bootstrap: cannot resolve " + where + ": " + error);
  }
  int lastErr = 0;
  for (const SockAddr& addr : addrs) {
    Fd fd(::socket(addr.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) {
      lastErr = errno;
      continue;
    }
    // Lets a restarted job rebind a fixed port whose old connections are in TIME_WAIT.
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), addr.get(), addr.length) != 0 || ::listen(fd.get(), backlog) != 0) {
      lastErr = errno;
      continue;
    }
    return fd;
  }
  throw Error(Result::SystemError,
              "bootstrap: cannot listen on " + where + ": " + errnoString(lastErr));
}

SockAddr localAddress(int fd) {
  SockAddr addr;
  addr.length = sizeof(addr.storage);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr.storage), &addr.length) != 0) {
    addr = SockAddr();
  }
  return addr;
}

SockAddr peerAddress(int fd) {
  SockAddr addr;
  addr.length = sizeof(addr.storage);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr.storage), &addr.length) != 0) {
    addr = SockAddr();
  }
  return addr;
}

Fd connectWithRetry(const std::string& host, uint16_t port, Deadline deadline, std::string* error,
                    bool* timedOut) {
  auto backoff = std::chrono::milliseconds(10);
  std::string lastError = "not attempted";
  for (;;) {
    bool retryable = false;
    std::string resolveError;
    const std::vector<SockAddr> addrs =
        resolve(host, port, /*passive=*/false, &resolveError, &retryable);
    if (addrs.empty()) {
      lastError = "cannot resolve " + host + ": " + resolveError;
      if (!retryable) {
        *error = lastError;
        *timedOut = false;
        return Fd();
      }
    }
    for (const SockAddr& addr : addrs) {
      int err = 0;
      Fd fd = connectOnce(addr, deadline, &err);
      if (fd) return fd;
      lastError = errnoString(err);
      if (!retryableConnectError(err)) {
        *error = lastError;
        *timedOut = false;
        return Fd();
      }
    }
    if (Clock::now() + backoff >= deadline) {
      // Sleep out the rest so that the caller's "within N ms" is accurate, then give up.
      std::this_thread::sleep_until(deadline);
      *error = lastError;
      *timedOut = true;
      return Fd();
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
}

Fd acceptNow(int listenFd) {
  for (;;) {
    Fd fd(::accept4(listenFd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd && errno == EINTR) continue;
    if (fd) setNoDelay(fd.get());
    return fd;
  }
}

Fd acceptUntil(int listenFd, Deadline deadline, std::string* peer) {
  for (;;) {
    Fd fd = acceptNow(listenFd);
    if (fd) {
      if (peer != nullptr) *peer = peerAddress(fd.get()).toString();
      return fd;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ECONNABORTED) return Fd();
    if (pollOne(listenFd, POLLIN, deadline) <= 0) return Fd();
  }
}

IoResult sendAll(int fd, const void* data, size_t length, Deadline deadline, int* err) {
  const char* p = static_cast<const char*>(data);
  while (length > 0) {
    const ssize_t n = ::send(fd, p, length, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      length -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      if (err != nullptr) *err = errno;
      return (errno == EPIPE || errno == ECONNRESET) ? IoResult::Closed : IoResult::Error;
    }
    const int rc = pollOne(fd, POLLOUT, deadline);
    if (rc == 0) return IoResult::Timeout;
    if (rc < 0) {
      if (err != nullptr) *err = errno;
      return IoResult::Error;
    }
  }
  return IoResult::Ok;
}

IoResult recvAll(int fd, void* data, size_t length, Deadline deadline, int* err) {
  char* p = static_cast<char*>(data);
  while (length > 0) {
    const ssize_t n = ::recv(fd, p, length, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      length -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      if (err != nullptr) *err = 0;
      return IoResult::Closed;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      if (err != nullptr) *err = errno;
      return errno == ECONNRESET ? IoResult::Closed : IoResult::Error;
    }
    const int rc = pollOne(fd, POLLIN, deadline);
    if (rc == 0) return IoResult::Timeout;
    if (rc < 0) {
      if (err != nullptr) *err = errno;
      return IoResult::Error;
    }
  }
  return IoResult::Ok;
}

void setNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // best effort
}

}  // namespace sharc::bootstrap::net

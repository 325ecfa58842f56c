// The bootstrap root server (bootstrap/root_server.cc) reading what clients send: hellos and
// allGather blobs, over real loopback connections to a real server thread. Input layout:
//   byte 0: nranks the server is started with (bits 0-1; 0 = taken from the first hello)
//   byte 1: connections (bits 0-1, 1..4); bit 4+i: connection i starts with a valid hello
//           (the job token, rank i, the server's nranks or 2)
//   then per connection: u16 little-endian length, that many bytes to send.
// Every connection is then half-closed. Properties: the server closes every connection
// within 5 s of its client hanging up (no hang), what it sends parses as the protocol
// (an ack, consecutive rounds of nranks blobs, at most one abort notice, last), and its
// thread ends when the RootServer is destroyed.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <sharc/error.hpp>
#include <string>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "bootstrap/protocol.hpp"
#include "bootstrap/socket.hpp"
#include "fuzz_common.hpp"

namespace {

namespace proto = sharc::bootstrap::protocol;
using sharc::fuzz::broken;

// Checks a stream the server sent to one connection. A last frame cut short is accepted (the
// server drops queued output of a client that hung up).
void checkStream(const std::string& s, int fixedRanks) {
  size_t pos = 0;
  bool acked = false, ended = false;
  uint32_t ranks = 0, round = 0;
  auto u32 = [&](uint32_t& v) {
    if (s.size() - pos < 4) return false;
    v = proto::getU32(s.data() + pos);
    pos += 4;
    return true;
  };
  while (pos < s.size()) {
    if (ended) broken("the root sent bytes after an abort notice");
    uint32_t magic = 0, a = 0, b = 0;
    if (!u32(magic)) return;
    if (magic == proto::kAckMagic) {
      if (acked) broken("the root sent two acks");
      if (!u32(ranks)) return;
      if (ranks < 1 || ranks > static_cast<uint32_t>(proto::kMaxRanks) ||
          (fixedRanks != 0 && ranks != static_cast<uint32_t>(fixedRanks)))
        broken("the root acked a wrong nranks");
      acked = true;
    } else if (magic == proto::kRoundMagic) {
      if (!acked) broken("a round result before the ack");
      if (!u32(a) || !u32(b)) return;
      if (a != round++ || b != ranks) broken("a round result with a wrong round or nranks");
      for (uint32_t r = 0; r < b; ++r) {
        uint32_t len = 0;
        if (!u32(len)) return;
        if (len > sharc::bootstrap::Bootstrap::kMaxBlobBytes) broken("an oversized blob");
        if (s.size() - pos < len) return;
        pos += len;
      }
    } else if (magic == proto::kAbortMagic) {
      if (!u32(a)) return;
      if (a > proto::kMaxAbortText) broken("an oversized abort notice");
      pos += std::min<size_t>(a, s.size() - pos);
      ended = true;
    } else {
      broken("the root sent an unknown frame");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int fixedRanks = data[0] & 3;
  const int conns = 1 + (data[1] & 3);
  std::unique_ptr<sharc::bootstrap::RootServer> server = sharc::bootstrap::RootServer::start(
      "127.0.0.1", 0, sharc::fuzz::kRootToken, fixedRanks, std::chrono::milliseconds(3000));
  const sharc::bootstrap::RootAddress at = server->address();

  std::vector<sharc::bootstrap::net::Fd> fds;
  std::vector<std::string> sent(static_cast<size_t>(conns));
  size_t pos = 2;
  for (int i = 0; i < conns; ++i) {
    std::string& out = sent[static_cast<size_t>(i)];
    if (data[1] & (0x10 << i)) {
      proto::Hello h;
      h.token = sharc::fuzz::kRootToken;
      h.rank = i;
      h.nranks = fixedRanks != 0 ? fixedRanks : 2;
      out = h.encode();
    }
    if (size - pos >= 2) {
      const size_t len = std::min<size_t>(data[pos] | (data[pos + 1] << 8), size - pos - 2);
      out.append(reinterpret_cast<const char*>(data + pos + 2), len);
      pos += 2 + len;
    }
    std::string error;
    bool timedOut = false;
    fds.push_back(sharc::bootstrap::net::connectWithRetry(
        at.host, at.port, std::chrono::steady_clock::now() + std::chrono::seconds(5), &error,
        &timedOut));
    if (!fds.back()) broken("cannot connect to the root server");
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (size_t i = 0; i < fds.size(); ++i) {
    // Best effort: the server may close a connection before reading all of it.
    sharc::bootstrap::net::sendAll(fds[i].get(), sent[i].data(), sent[i].size(), deadline);
    ::shutdown(fds[i].get(), SHUT_WR);
  }

  // Read every connection until the server closes it.
  std::vector<std::string> got(fds.size());
  std::vector<bool> open(fds.size(), true);
  for (size_t left = fds.size(); left > 0;) {
    std::vector<pollfd> p;
    std::vector<size_t> which;
    for (size_t i = 0; i < fds.size(); ++i)
      if (open[i]) {
        p.push_back(pollfd{fds[i].get(), POLLIN, 0});
        which.push_back(i);
      }
    const int rc = ::poll(p.data(), p.size(), sharc::bootstrap::net::remainingMs(deadline));
    if (rc == 0) broken("the root server kept a connection open 5 s after its client hung up");
    for (size_t k = 0; rc > 0 && k < p.size(); ++k) {
      if (p[k].revents == 0) continue;
      char buf[65536];
      const ssize_t n = ::recv(p[k].fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        got[which[k]].append(buf, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        open[which[k]] = false;
        --left;
      }
    }
  }
  for (size_t i = 0; i < got.size(); ++i) checkStream(got[i], fixedRanks);
  for (auto& fd : fds) {
    // Both sides have closed: drop the connection without a TIME_WAIT entry per execution.
    const linger l{1, 0};
    ::setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &l, sizeof l);
  }
  fds.clear();
  server.reset();
  return 0;
}

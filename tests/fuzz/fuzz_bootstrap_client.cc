// The bootstrap client (bootstrap/tcp_bootstrap.cc) reading what a root server sends: the
// handshake reply, allGather round results and abort notices. The input's first byte picks
// nranks (1..4), the rank and the number of rounds; the rest is the root's byte stream,
// written into a socket pair that is then closed, so the client never waits for more.
// Properties: every call returns all nranks blobs or throws sharc::Error naming the root
// address (never a timeout: the root has hung up), and nothing crashes or leaks.
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <sharc/error.hpp>
#include <string>

#include "bootstrap/bootstrap.hpp"
#include "fuzz_common.hpp"

namespace {

using sharc::fuzz::broken;

void checkError(const sharc::Error& e, const std::string& root) {
  if (e.code() == sharc::Result::Timeout) broken("the client timed out on a closed stream");
  if (std::strstr(e.what(), root.c_str()) == nullptr) broken("an error does not name the root");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int nranks = 1 + (data[0] & 3);
  const int rank = (data[0] >> 2) % nranks;
  const int rounds = 1 + ((data[0] >> 4) & 3);
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) broken("socketpair");
  const int rootEnd = fds[0];
  // The stream fits the socket buffer (inputs are a few KiB): write it all, then hang up.
  size_t off = 1;
  while (off < size) {
    const ssize_t n = ::send(rootEnd, data + off, size - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  ::shutdown(rootEnd, SHUT_WR);

  const sharc::bootstrap::RootAddress root{"127.0.0.1", 1, sharc::fuzz::kRootToken};
  const std::string where = root.toString();
  const auto timeout = std::chrono::milliseconds(5000);
  try {
    std::unique_ptr<sharc::bootstrap::Bootstrap> boot = sharc::bootstrap::joinRoot(
        fds[1], root, rank, nranks, timeout, std::chrono::steady_clock::now() + timeout);
    for (int r = 0; r < rounds; ++r) {
      try {
        const auto blobs = boot->allGather(std::string(static_cast<size_t>(r + 1), 'x'));
        if (blobs.size() != static_cast<size_t>(nranks)) broken("a round without nranks blobs");
        for (const std::string& b : blobs)
          if (b.size() > sharc::bootstrap::Bootstrap::kMaxBlobBytes) broken("oversized blob");
      } catch (const sharc::Error& e) {
        checkError(e, where);
      }
    }
  } catch (const sharc::Error& e) {
    checkError(e, where);
  }
  ::close(rootEnd);
  return 0;
}

#include "cma.hpp"

#include <sys/prctl.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

namespace sharc::transport {
namespace {
// The value is arbitrary; a peer that reads it back proves CMA works between the two.
const volatile uint64_t kProbeWord = 0x5348415243434d41ull;  // "SHARCCMA"
}  // namespace

void cmaAllowPeers() {
#ifdef PR_SET_PTRACER
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
#endif
}

uint64_t cmaProbeAddress() {
  return reinterpret_cast<uint64_t>(&kProbeWord);
}

bool cmaProbe(pid_t pid, uint64_t address) {
  uint64_t value = 0;
  return cmaRead(pid, address, &value, sizeof(value)).empty() && value == kProbeWord;
}

std::string cmaRead(pid_t pid, uint64_t remoteAddress, void* local, size_t bytes) {
  auto* dst = static_cast<char*>(local);
  while (bytes > 0) {
    iovec l{dst, bytes};
    iovec r{reinterpret_cast<void*>(remoteAddress), bytes};
    const ssize_t got = process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return std::string("process_vm_readv from pid ") + std::to_string(pid) + ": " +
             std::strerror(errno);
    }
    if (got == 0) return "process_vm_readv from pid " + std::to_string(pid) + ": read 0 bytes";
    dst += got;
    remoteAddress += static_cast<uint64_t>(got);
    bytes -= static_cast<size_t>(got);
  }
  return "";
}

std::string cmaWrite(pid_t pid, uint64_t remoteAddress, const void* local, size_t bytes) {
  const auto* src = static_cast<const char*>(local);
  while (bytes > 0) {
    iovec l{const_cast<char*>(src), bytes};
    iovec r{reinterpret_cast<void*>(remoteAddress), bytes};
    const ssize_t put = process_vm_writev(pid, &l, 1, &r, 1, 0);
    if (put < 0) {
      if (errno == EINTR) continue;
      return std::string("process_vm_writev to pid ") + std::to_string(pid) + ": " +
             std::strerror(errno);
    }
    if (put == 0) return "process_vm_writev to pid " + std::to_string(pid) + ": wrote 0 bytes";
    src += put;
    remoteAddress += static_cast<uint64_t>(put);
    bytes -= static_cast<size_t>(put);
  }
  return "";
}

}  // namespace sharc::transport

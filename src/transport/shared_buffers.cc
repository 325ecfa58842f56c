#include "shared_buffers.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <sharc/error.hpp>
#include <tuple>

#include "core/log.hpp"

namespace sharc::transport {
namespace {

struct Region {
  size_t size;
  int fd;
  uint64_t id;
};

struct Mapping {
  uint64_t id;
  std::byte* base;
  size_t size;
};

std::mutex mu;
std::map<uintptr_t, Region> regions;                    // this process's, by base address
std::map<std::pair<pid_t, int>, Mapping> peerMappings;  // peers', by (pid, fd)

std::string memfdName(uint64_t id) {
  char name[32];
  std::snprintf(name, sizeof name, "sharc-%016llx", static_cast<unsigned long long>(id));
  return name;
}

}  // namespace

void* allocShared(size_t bytes) {
  if (bytes == 0) bytes = 1;
  std::random_device rd;
  const uint64_t id = (uint64_t{rd()} << 32) ^ rd();
  const int fd = memfd_create(memfdName(id).c_str(), MFD_CLOEXEC);
  if (fd < 0)
    throw Error(Result::SystemError,
                std::string("allocShared: memfd_create failed: ") + std::strerror(errno));
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    close(fd);
    throw Error(Result::SystemError, "allocShared: cannot size " + std::to_string(bytes) +
                                         " bytes: " + std::strerror(err));
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    close(fd);
    throw Error(Result::SystemError, "allocShared: cannot map " + std::to_string(bytes) +
                                         " bytes: " + std::strerror(err));
  }
  std::lock_guard<std::mutex> lock(mu);
  regions[reinterpret_cast<uintptr_t>(p)] = Region{bytes, fd, id};
  return p;
}

bool freeShared(void* p) noexcept {
  if (p == nullptr) return true;
  std::lock_guard<std::mutex> lock(mu);
  const auto it = regions.find(reinterpret_cast<uintptr_t>(p));
  if (it == regions.end()) return false;
  munmap(p, it->second.size);
  close(it->second.fd);
  regions.erase(it);
  return true;
}

void describeShared(RemoteBuffer& b) noexcept {
  std::lock_guard<std::mutex> lock(mu);
  auto it = regions.upper_bound(static_cast<uintptr_t>(b.address));
  if (it == regions.begin()) return;
  --it;
  const uintptr_t base = it->first;
  if (b.address < base || b.address + b.length > base + it->second.size) return;
  b.regionBase = base;
  b.regionSize = it->second.size;
  b.regionFd = static_cast<uint64_t>(it->second.fd) + 1;
  b.regionId = it->second.id;
}

std::byte* mapPeerShared(pid_t pid, const RemoteBuffer& b) noexcept {
  if (b.regionFd == 0) return nullptr;
  // The description travelled in a message: use it only when the buffer lies inside the
  // region it names (else the offset below would point outside the mapping; found by
  // tests/fuzz/fuzz_shared_buffers.cc).
  if (b.regionFd - 1 > static_cast<uint64_t>(INT_MAX) || b.regionSize == 0 ||
      b.address < b.regionBase || b.length > b.regionSize ||
      b.address - b.regionBase > b.regionSize - b.length)
    return nullptr;
  const int fd = static_cast<int>(b.regionFd - 1);
  const uint64_t offset = b.address - b.regionBase;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(pid, fd);
  auto it = peerMappings.find(key);
  if (it != peerMappings.end() && it->second.id == b.regionId && it->second.size == b.regionSize)
    return it->second.base + offset;
  if (it != peerMappings.end()) {  // the fd now names another allocation
    munmap(it->second.base, it->second.size);
    peerMappings.erase(it);
  }
  // The descriptor travelled in a message: check that the peer's fd still is that allocation.
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  char target[256] = {};
  const ssize_t n = readlink(path.c_str(), target, sizeof target - 1);
  if (n <= 0 || std::strstr(target, memfdName(b.regionId).c_str()) == nullptr) return nullptr;
  const int mine = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (mine < 0) {
    SHARC_INFO("shared buffers: cannot open " << path << ": " << std::strerror(errno)
                                              << "; cross-memory attach instead");
    return nullptr;
  }
  // Pages of a mapping beyond the end of the memfd raise SIGBUS when touched.
  struct stat st {};
  if (fstat(mine, &st) != 0 || static_cast<uint64_t>(st.st_size) < b.regionSize) {
    close(mine);
    return nullptr;
  }
  void* p = mmap(nullptr, b.regionSize, PROT_READ | PROT_WRITE, MAP_SHARED, mine, 0);
  close(mine);
  if (p == MAP_FAILED) return nullptr;
  auto* base = static_cast<std::byte*>(p);
  peerMappings[key] = Mapping{b.regionId, base, b.regionSize};
  return base + offset;
}

}  // namespace sharc::transport

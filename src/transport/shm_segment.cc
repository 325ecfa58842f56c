#include "shm_segment.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <sharc/error.hpp>
#include <utility>

#include "core/log.hpp"

namespace sharc::transport {
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& name, int err) {
  throw Error(Result::SystemError,
              "shared memory: " + what + " /dev/shm/" + name + ": " + std::strerror(err) +
                  (err == ENOSPC || err == ENOMEM ? " (is /dev/shm large enough? SHARC_SHM=0 turns "
                                                    "the shared-memory transport off)"
                                                  : ""));
}

void* mapFd(int fd, size_t bytes, const std::string& name) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  if (p == MAP_FAILED) {
    close(fd);
    fail("mmap", name, err);
  }
  return p;
}

}  // namespace

ShmSegment ShmSegment::create(size_t bytes) {
  sweepStale();
  std::random_device rd;
  const uint64_t nonce = (uint64_t{rd()} << 32) ^ rd();
  char name[64];
  std::snprintf(name, sizeof(name), "%s%d-%016llx", kPrefix, static_cast<int>(getpid()),
                static_cast<unsigned long long>(nonce));
  const int fd = shm_open((std::string("/") + name).c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) fail("shm_open", name, errno);
  ShmSegment s;
  s.name_ = name;
  s.owner_ = true;
  // Sized but not allocated: each rank reserves the parts it reads (reserve()), so their
  // pages come from its own NUMA node.
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    close(fd);
    s.unlink();
    fail("size " + std::to_string(bytes) + " bytes of", name, err);
  }
  s.data_ = mapFd(fd, bytes, name);
  s.fd_ = fd;
  s.size_ = bytes;
  return s;
}

ShmSegment ShmSegment::open(const std::string& name, size_t bytes) {
  if (name.rfind(kPrefix, 0) != 0 || name.find('/') != std::string::npos)
    throw Error(Result::InternalError, "shared memory: malformed segment name '" + name + "'");
  const int fd = shm_open(("/" + name).c_str(), O_RDWR, 0);
  if (fd < 0) fail("shm_open", name, errno);
  ShmSegment s;
  s.name_ = name;
  s.data_ = mapFd(fd, bytes, name);
  s.fd_ = fd;
  s.size_ = bytes;
  return s;
}

ShmSegment::ShmSegment(ShmSegment&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      name_(std::move(o.name_)),
      owner_(std::exchange(o.owner_, false)),
      fd_(std::exchange(o.fd_, -1)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& o) noexcept {
  if (this != &o) {
    this->~ShmSegment();
    new (this) ShmSegment(std::move(o));
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  unlink();
  if (data_ != nullptr) munmap(data_, size_);
  data_ = nullptr;
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

void ShmSegment::reserve(size_t offset, size_t bytes) {
  // posix_fallocate allocates the pages now, so a full /dev/shm is an error here and not a
  // SIGBUS in the middle of a collective; tmpfs takes them from the caller's NUMA node.
  const int err =
      fd_ < 0 ? EBADF : posix_fallocate(fd_, static_cast<off_t>(offset), static_cast<off_t>(bytes));
  if (err != 0) fail("allocate " + std::to_string(bytes) + " bytes of", name_, err);
}

void ShmSegment::unlink() noexcept {
  if (!owner_) return;
  owner_ = false;
  shm_unlink(("/" + name_).c_str());
}

int ShmSegment::sweepStale() {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return 0;
  int removed = 0;
  const size_t prefix = std::strlen(kPrefix);
  while (const dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    if (name.compare(0, prefix, kPrefix) != 0) continue;
    const pid_t pid = static_cast<pid_t>(std::atol(name.c_str() + prefix));
    if (pid <= 0 || kill(pid, 0) == 0 || errno != ESRCH) continue;
    if (shm_unlink(("/" + name).c_str()) == 0) {
      ++removed;
      SHARC_INFO("removed stale shared-memory segment /dev/shm/" << name << " (process " << pid
                                                                 << " has exited)");
    }
  }
  closedir(dir);
  return removed;
}

}  // namespace sharc::transport

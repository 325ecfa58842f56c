// A POSIX shared-memory segment (/dev/shm) mapped by the ranks of one node. The creator
// unlinks the name as soon as every rank has mapped it, so a process that dies afterwards,
// however it dies, leaves nothing behind; segments named by a creator that died before that
// point are swept by the next creation on the host.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

namespace sharc::transport {

class ShmSegment {
 public:
  /// Creates a new segment of `bytes` (zero-filled, no memory reserved yet: see reserve())
  /// with a fresh name; throws sharc::Error naming the system error.
  static ShmSegment create(size_t bytes);
  /// Maps the segment `name` created by another process; throws sharc::Error.
  static ShmSegment open(const std::string& name, size_t bytes);

  ShmSegment() = default;
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  /// Unmaps, and removes the name if this process created it and has not removed it yet.
  ~ShmSegment();

  /// Allocates the pages of [offset, offset + bytes) now, on this process's NUMA node; throws
  /// sharc::Error naming the system error (e.g. /dev/shm full) instead of a later SIGBUS.
  void reserve(size_t offset, size_t bytes);
  /// Removes the name (the mappings stay valid). Idempotent.
  void unlink() noexcept;
  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

  /// Names start with this, followed by the creator's pid: "sharc-<pid>-<random>".
  static constexpr const char* kPrefix = "sharc-";
  /// Removes segments in /dev/shm whose creator process no longer exists; returns how many.
  static int sweepStale();

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
  std::string name_;
  bool owner_ = false;  // created here and not yet unlinked
  int fd_ = -1;         // kept for reserve()
};

}  // namespace sharc::transport

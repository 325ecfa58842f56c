// Memory from a device queue (device scratch, or host staging for links without FI_HMEM),
// kept between calls: allocation (cudaMalloc, cudaHostAlloc) is costly, and a registration
// with the provider stays valid while the memory does.
#pragma once

#include <cstddef>
#include <functional>
#include <mutex>
#include <vector>

#include "core/device_queue.hpp"

namespace sharc::algo {

/// Free memory of one kind from one queue, best fit first; used by the schedules of one
/// engine (thread-safe: a schedule may give its memory back on the thread that drops it).
class QueuePool {
 public:
  using Allocate = std::function<core::QueueMemory(size_t)>;
  /// `allocate` makes new memory (DeviceQueue::allocateDevice or allocateStaging);
  /// `maxFree`: most free pieces kept (the oldest is freed beyond it; 0: keep every piece).
  explicit QueuePool(Allocate allocate, size_t maxFree = 0)
      : allocate_(std::move(allocate)), maxFree_(maxFree) {}
  QueuePool(const QueuePool&) = delete;
  QueuePool& operator=(const QueuePool&) = delete;

  /// A piece of at least `bytes` bytes (contents undefined). Throws sharc::Error.
  core::QueueMemory acquire(size_t bytes);
  /// Gives a piece back; it must no longer be in use by any queued operation or transfer.
  void release(core::QueueMemory memory);
  /// Frees every free piece.
  void trim();
  /// Gives every free piece up without freeing it (operations that failed to finish may
  /// still write them).
  void abandon();
  /// Pieces allocated and not freed (in use or free), for leak checks.
  size_t live() const;

 private:
  Allocate allocate_;
  size_t maxFree_;
  mutable std::mutex mu_;
  std::vector<core::QueueMemory> free_;
  size_t live_ = 0;
};

}  // namespace sharc::algo

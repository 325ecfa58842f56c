// The CUDA device queue: cudaMemcpyAsync (cudaMemcpyDefault: the driver infers the direction
// from unified addressing) on a private non-blocking stream of one device; fences are events
// recorded on it (pooled), staging memory is pinned (gpu::PinnedBuffer). Internal to sharc;
// only compiled with CUDA (SHARC_HAVE_CUDA).
#pragma once

#include <cuda_runtime_api.h>

#include <deque>
#include <utility>
#include <vector>

#include "core/device_queue.hpp"
#include "gpu/cuda_resources.hpp"

namespace sharc::gpu {

using core::DeviceQueue;
using core::QueueMemory;

class CudaDeviceQueue final : public DeviceQueue {
 public:
  /// An engine on device ordinal `device` (its stream and events live there). Throws
  /// sharc::Error when CUDA fails.
  explicit CudaDeviceQueue(int device);
  /// Waits for the copies still queued (a failure is logged), then releases the stream.
  ~CudaDeviceQueue() override;

  QueueMemory allocateStaging(size_t bytes) override;
  QueueMemory allocateDevice(size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void copy2d(void* dst, size_t dstPitch, const void* src, size_t srcPitch, size_t width,
              size_t rows) override;
  /// sharc's reduction kernel (kernels::reduce) on the queue's stream.
  void reduce(void* dst, const void* a, const void* b, size_t count, DataType type,
              RedOp op) override;
  void divide(void* data, size_t count, DataType type, uint64_t divisor) override;
  Ticket fence() override;
  bool done(Ticket ticket) override;
  void wait(Ticket ticket, std::chrono::milliseconds timeout) override;
  Allocation allocationOf(const void* p) override;
  bool deviceIsHost() const noexcept override { return false; }
  int cudaDevice() const noexcept override { return device_; }
  const char* name() const noexcept override { return "cuda"; }

  int device() const noexcept { return device_; }
  /// The private stream the copies run on (so that other streams can wait for its events).
  cudaStream_t stream() const noexcept { return stream_.get(); }

 private:
  /// Retires finished fences from the front of pending_; true when `ticket` has finished.
  bool retire(Ticket ticket);

  int device_;
  Stream stream_;
  Ticket issued_ = 0;                             ///< last ticket handed out
  Ticket completed_ = 0;                          ///< every ticket up to this one has finished
  std::deque<std::pair<Ticket, Event>> pending_;  ///< recorded fences, oldest first
  std::vector<Event> spare_;                      ///< finished events, for reuse
};

}  // namespace sharc::gpu

// The device operations sharc's data paths need (copy, reduce, divide, fences, device and
// staging memory, allocation ids) behind one interface with two implementations:
// gpu::CudaDeviceQueue (a private CUDA stream, cudaMemcpyAsync, sharc's reduction kernels and
// events) and gpu::HostDeviceQueue (a worker thread over host memory that computes the same
// results), so that every schedule's device path runs, and is tested, without a GPU. Internal
// to sharc; always compiled.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <sharc/error.hpp>
#include <sharc/types.hpp>
#include <string>
#include <utility>

namespace sharc::core {

/// Memory from a DeviceQueue, host staging (pinned for CUDA) or device memory: owns its
/// allocation and frees it on destruction. Move-only.
class QueueMemory {
 public:
  /// What keeps the allocation alive; destroying it frees the memory.
  struct Owner {
    virtual ~Owner() = default;
  };

  QueueMemory() = default;
  QueueMemory(void* data, size_t bytes, std::unique_ptr<Owner> owner) noexcept
      : data_(data), bytes_(bytes), owner_(std::move(owner)) {}
  QueueMemory(QueueMemory&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        bytes_(std::exchange(o.bytes_, 0)),
        owner_(std::move(o.owner_)) {}
  QueueMemory& operator=(QueueMemory&& o) noexcept {
    if (this != &o) {
      owner_ = std::move(o.owner_);
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }

  void* data() const noexcept { return data_; }
  size_t bytes() const noexcept { return bytes_; }
  explicit operator bool() const noexcept { return data_ != nullptr; }

  /// Gives the memory up without freeing it: for staging that an unfinished operation (a
  /// collective that failed to complete) may still write.
  void leak() noexcept {
    (void)owner_.release();
    data_ = nullptr;
    bytes_ = 0;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  std::unique_ptr<Owner> owner_;
};

/// `bytes` (at least 1) rounded up to a multiple of `align`, the size a queue allocates;
/// throws sharc::Error(InvalidArgument) naming `what` when that overflows.
inline size_t queueAllocationSize(size_t bytes, size_t align, const char* what) {
  const size_t rounded = ((bytes == 0 ? 1 : bytes) + align - 1) / align * align;
  if (rounded < bytes)
    throw Error(Result::InvalidArgument,
                std::string(what) + " of " + std::to_string(bytes) + " bytes overflows");
  return rounded;
}

/// Asynchronous device operations, run one after another in the order enqueued (each starts
/// once the previous one has finished, like operations on one CUDA stream), and fences that
/// report when the operations before them have finished. Used by one thread at a time.
class DeviceQueue {
 public:
  /// Names a fence; tickets increase with each fence() of a queue, and a finished ticket
  /// implies every smaller one has finished.
  using Ticket = uint64_t;

  virtual ~DeviceQueue() = default;
  DeviceQueue() = default;
  DeviceQueue(const DeviceQueue&) = delete;
  DeviceQueue& operator=(const DeviceQueue&) = delete;

  /// Host staging memory of at least `bytes` bytes (page-aligned; pinned where that matters),
  /// usable as either end of copy() and by the host and the NIC. Throws sharc::Error.
  virtual QueueMemory allocateStaging(size_t bytes) = 0;
  /// Device memory of at least `bytes` bytes (256-byte aligned), the queue's own scratch:
  /// only the queue's operations and the NIC (through a registration) touch it. Throws
  /// sharc::Error.
  virtual QueueMemory allocateDevice(size_t bytes) = 0;
  /// Enqueues a copy of `bytes` bytes from `src` to `dst`, in either direction (device to
  /// staging, staging to device, or any pair the queue can address); returns at once. Both
  /// ranges must stay valid and untouched by others until a later fence has finished.
  /// `bytes` 0 enqueues nothing. Throws sharc::Error when the copy cannot be enqueued.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  /// Enqueues `rows` copies of `width` bytes, row i from src + i * srcPitch to
  /// dst + i * dstPitch, as copy() does one. This default enqueues each row; a queue with a
  /// strided copy (CUDA's cudaMemcpy2DAsync) overrides it with one operation.
  virtual void copy2d(void* dst, size_t dstPitch, const void* src, size_t srcPitch, size_t width,
                      size_t rows) {
    for (size_t i = 0; i < rows; ++i)
      copy(static_cast<std::byte*>(dst) + i * dstPitch,
           static_cast<const std::byte*>(src) + i * srcPitch, width);
  }
  /// Enqueues dst = a op b over `count` elements of `type` (Avg sums: divide() finishes it);
  /// dst may be a or b exactly. Throws sharc::Error when it cannot be enqueued.
  virtual void reduce(void* dst, const void* a, const void* b, size_t count, DataType type,
                      RedOp op) = 0;
  /// Enqueues data /= divisor over `count` elements (core::finishAverage's rules).
  virtual void divide(void* data, size_t count, DataType type, uint64_t divisor) = 0;
  /// A marker after every operation enqueued so far.
  virtual Ticket fence() = 0;
  /// True when every operation enqueued before fence `ticket` has finished; does not block.
  /// Throws sharc::Error when an operation failed.
  virtual bool done(Ticket ticket) = 0;
  /// Blocks until done(ticket); throws sharc::Error(Timeout) once `timeout` has passed (the
  /// operations stay queued), or the error of a failed operation.
  virtual void wait(Ticket ticket, std::chrono::milliseconds timeout) = 0;
  /// One allocation of device memory.
  struct Allocation {
    const void* base = nullptr;
    size_t bytes = 0;
    /// Changes when the memory is freed and the address allocated again (CUDA's
    /// CU_POINTER_ATTRIBUTE_BUFFER_ID; the host queue numbers its allocateDevice()); 0: not
    /// device memory the queue knows (host memory).
    uint64_t id = 0;
  };
  /// The allocation holding `p` (id 0 when none).
  virtual Allocation allocationOf(const void* p) = 0;
  /// Whether the queue's device memory is host memory (the host queue): registered with a
  /// provider as system memory rather than as CUDA memory.
  virtual bool deviceIsHost() const noexcept = 0;
  /// The CUDA device ordinal of the queue's memory (-1 for the host queue).
  virtual int cudaDevice() const noexcept = 0;
  /// "host", "cuda".
  virtual const char* name() const noexcept = 0;
};

}  // namespace sharc::core

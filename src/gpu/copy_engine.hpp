// The copy engine behind staged collectives (staged_collective.hpp): host staging memory and
// asynchronous copies between it and memory the host may not touch (CUDA device memory).
// Two implementations: CudaCopyEngine (cudaMemcpyAsync on a private stream; CUDA builds
// only) and HostCopyEngine (memcpy on a worker thread), which lets the staging pipeline be
// tested without a GPU. Internal to sharc; always compiled.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

namespace sharc::gpu {

/// Host staging memory from a CopyEngine (pinned for CUDA): owns its allocation and frees it
/// on destruction. Move-only.
class HostStaging {
 public:
  /// What keeps the allocation alive; destroying it frees the memory.
  struct Owner {
    virtual ~Owner() = default;
  };

  HostStaging() = default;
  HostStaging(void* data, size_t bytes, std::unique_ptr<Owner> owner) noexcept
      : data_(data), bytes_(bytes), owner_(std::move(owner)) {}
  HostStaging(HostStaging&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        bytes_(std::exchange(o.bytes_, 0)),
        owner_(std::move(o.owner_)) {}
  HostStaging& operator=(HostStaging&& o) noexcept {
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

/// Asynchronous copies, run one after another in the order enqueued (each starts once the
/// previous one has finished, like operations on one CUDA stream), and fences that report when
/// the copies before them have finished. Used by one thread at a time.
class CopyEngine {
 public:
  /// Names a fence; tickets increase with each fence() of an engine, and a finished ticket
  /// implies every smaller one has finished.
  using Ticket = uint64_t;

  virtual ~CopyEngine() = default;
  CopyEngine() = default;
  CopyEngine(const CopyEngine&) = delete;
  CopyEngine& operator=(const CopyEngine&) = delete;

  /// Host staging memory of at least `bytes` bytes (page-aligned; pinned where that matters),
  /// usable as either end of copy() and by the host communicator. Throws sharc::Error.
  virtual HostStaging allocateStaging(size_t bytes) = 0;
  /// Enqueues a copy of `bytes` bytes from `src` to `dst`, in either direction (device to
  /// staging, staging to device, or any pair the engine can address); returns at once. Both
  /// ranges must stay valid and untouched by others until a later fence has finished.
  /// `bytes` 0 enqueues nothing. Throws sharc::Error when the copy cannot be enqueued.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  /// A marker after every copy enqueued so far.
  virtual Ticket fence() = 0;
  /// True when every copy enqueued before fence `ticket` has finished; does not block.
  /// Throws sharc::Error when a copy failed.
  virtual bool done(Ticket ticket) = 0;
  /// Blocks until done(ticket); throws sharc::Error(Timeout) once `timeout` has passed (the
  /// copies stay queued), or the error of a failed copy.
  virtual void wait(Ticket ticket, std::chrono::milliseconds timeout) = 0;
  /// "host", "cuda".
  virtual const char* name() const noexcept = 0;
};

}  // namespace sharc::gpu

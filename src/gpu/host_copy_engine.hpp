// The copy engine over host memory: a worker thread runs the copies with memcpy in FIFO order,
// staging memory is plain page-aligned allocation. It stands in for CudaCopyEngine wherever
// the "device" memory is host memory: in tests without a GPU, and in builds without CUDA.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "gpu/copy_engine.hpp"

namespace sharc::gpu {

class HostCopyEngine final : public CopyEngine {
 public:
  /// `delayPerCopy` is slept before each non-empty copy: a slow engine for tests, so that
  /// copies and the network overlap measurably (0: none).
  explicit HostCopyEngine(std::chrono::microseconds delayPerCopy = std::chrono::microseconds(0));
  /// Finishes the copies still queued, then stops the worker.
  ~HostCopyEngine() override;

  HostStaging allocateStaging(size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  Ticket fence() override;
  bool done(Ticket ticket) override;
  void wait(Ticket ticket, std::chrono::milliseconds timeout) override;
  const char* name() const noexcept override { return "host"; }

  /// For tests: while paused the worker starts no copy (the one running finishes).
  void pause();
  void resume();
  /// Copies run so far (for tests).
  uint64_t copiesRun() const noexcept { return copiesRun_.load(std::memory_order_relaxed); }

 private:
  struct Item {
    void* dst = nullptr;
    const void* src = nullptr;
    size_t bytes = 0;
    Ticket fence = 0;  ///< non-zero: a fence marker, no copy
  };
  void run();

  const std::chrono::microseconds delay_;
  std::mutex mu_;
  std::condition_variable work_;      ///< the worker waits here for items (or resume/stop)
  std::condition_variable finished_;  ///< waiters wait here for fences
  std::deque<Item> queue_;
  bool paused_ = false;
  bool stop_ = false;
  Ticket issued_ = 0;                 ///< last ticket handed out (caller's thread, under mu_)
  std::atomic<Ticket> completed_{0};  ///< last fence the worker passed
  std::atomic<uint64_t> copiesRun_{0};
  std::thread worker_;  ///< last: starts after the members it uses exist
};

}  // namespace sharc::gpu

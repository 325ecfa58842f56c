// The device queue over host memory: a worker thread runs copies, reductions and divisions in
// FIFO order, asynchronously to the caller (so they finish in an order of their own against
// the network's completions); staging and "device" memory are page-aligned host allocations,
// the latter numbered so that bufferId() changes when an address is freed and reused. It
// stands in for CudaDeviceQueue wherever the "device" memory is host memory: in tests without
// a GPU, in builds without CUDA, and under SHARC_DEVICE_QUEUE=host.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "core/device_queue.hpp"

namespace sharc::gpu {

using core::DeviceQueue;
using core::QueueMemory;

class HostDeviceQueue final : public DeviceQueue {
 public:
  /// `delayPerOp` is slept before each non-empty operation: a slow queue for tests, so that
  /// the queue and the network overlap measurably (0: none).
  explicit HostDeviceQueue(std::chrono::microseconds delayPerOp = std::chrono::microseconds(0));
  /// Finishes the operations still queued, then stops the worker.
  ~HostDeviceQueue() override;

  QueueMemory allocateStaging(size_t bytes) override;
  QueueMemory allocateDevice(size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void reduce(void* dst, const void* a, const void* b, size_t count, DataType type,
              RedOp op) override;
  void divide(void* data, size_t count, DataType type, uint64_t divisor) override;
  Ticket fence() override;
  bool done(Ticket ticket) override;
  void wait(Ticket ticket, std::chrono::milliseconds timeout) override;
  Allocation allocationOf(const void* p) override;
  bool deviceIsHost() const noexcept override { return true; }
  int cudaDevice() const noexcept override { return -1; }
  const char* name() const noexcept override { return "host"; }

  /// For tests: while paused the worker starts no operation (the one running finishes).
  void pause();
  void resume();
  /// Operations (copies, reductions, divisions) run so far (for tests).
  uint64_t opsRun() const noexcept { return opsRun_.load(std::memory_order_relaxed); }
  /// Device allocations alive now (for leak checks in tests).
  size_t deviceAllocations() const;

  /// allocateDevice()'s allocations by address, with their ids (shared with their owners,
  /// which may outlive the queue).
  struct Allocations {
    mutable std::mutex mu;
    std::map<uintptr_t, std::pair<uintptr_t, uint64_t>> byStart;  ///< start -> (end, id)
    uint64_t nextId = 1;
  };

 private:
  enum class ItemKind : uint8_t { Copy, Reduce, Divide, Fence };
  struct Item {
    ItemKind kind = ItemKind::Copy;
    void* dst = nullptr;
    const void* src = nullptr;
    const void* src2 = nullptr;
    size_t size = 0;  ///< bytes (Copy) or elements (Reduce, Divide)
    DataType type = DataType::Uint8;
    RedOp op = RedOp::Sum;
    uint64_t divisor = 0;
    Ticket fence = 0;  ///< Fence: its ticket
  };
  void enqueue(const Item& item);
  void run();

  const std::chrono::microseconds delay_;
  std::shared_ptr<Allocations> allocations_ = std::make_shared<Allocations>();
  std::mutex mu_;
  std::condition_variable work_;      ///< the worker waits here for items (or resume/stop)
  std::condition_variable finished_;  ///< waiters wait here for fences
  std::deque<Item> queue_;
  bool paused_ = false;
  bool stop_ = false;
  Ticket issued_ = 0;                 ///< last ticket handed out (caller's thread, under mu_)
  std::atomic<Ticket> completed_{0};  ///< last fence the worker passed
  std::atomic<uint64_t> opsRun_{0};
  std::thread worker_;  ///< last: starts after the members it uses exist
};

}  // namespace sharc::gpu

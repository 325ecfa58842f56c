// The device queue over host memory (host_device_queue.hpp).
#include "gpu/host_device_queue.hpp"

#include <pthread.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <sharc/error.hpp>
#include <string>

#include "core/reduce.hpp"

namespace sharc::gpu {
namespace {

constexpr size_t kPage = 4096;

struct AlignedOwner : QueueMemory::Owner {
  explicit AlignedOwner(void* p) : p(p) {}
  ~AlignedOwner() override { std::free(p); }
  void* p;
};

// Device memory: forgets its id before the memory goes back to the allocator.
struct DeviceOwner final : AlignedOwner {
  DeviceOwner(void* p, std::shared_ptr<HostDeviceQueue::Allocations> a)
      : AlignedOwner(p), allocations(std::move(a)) {}
  ~DeviceOwner() override {
    std::lock_guard<std::mutex> lock(allocations->mu);
    allocations->byStart.erase(reinterpret_cast<uintptr_t>(p));
  }
  std::shared_ptr<HostDeviceQueue::Allocations> allocations;
};

void* allocatePages(size_t bytes, size_t& rounded, const char* what) {
  rounded = core::queueAllocationSize(bytes, kPage, what);
  void* p = std::aligned_alloc(kPage, rounded);
  if (p == nullptr)
    throw Error(Result::SystemError,
                std::string(what) + ": cannot allocate " + std::to_string(rounded) + " bytes");
  return p;
}

}  // namespace

HostDeviceQueue::HostDeviceQueue(std::chrono::microseconds delayPerOp)
    : delay_(delayPerOp), worker_([this] {
        pthread_setname_np(pthread_self(), "sharc-hostq");  // named for ps, gdb and leak checks
        run();
      }) {}

HostDeviceQueue::~HostDeviceQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    paused_ = false;
  }
  work_.notify_all();
  worker_.join();
}

QueueMemory HostDeviceQueue::allocateStaging(size_t bytes) {
  size_t rounded = 0;
  void* p = allocatePages(bytes, rounded, "host staging");
  return QueueMemory(p, rounded, std::make_unique<AlignedOwner>(p));
}

QueueMemory HostDeviceQueue::allocateDevice(size_t bytes) {
  size_t rounded = 0;
  void* p = allocatePages(bytes, rounded, "host queue device memory");
  {
    std::lock_guard<std::mutex> lock(allocations_->mu);
    const auto start = reinterpret_cast<uintptr_t>(p);
    allocations_->byStart[start] = {start + rounded, allocations_->nextId++};
  }
  return QueueMemory(p, rounded, std::make_unique<DeviceOwner>(p, allocations_));
}

DeviceQueue::Allocation HostDeviceQueue::allocationOf(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(allocations_->mu);
  auto it = allocations_->byStart.upper_bound(a);
  if (it == allocations_->byStart.begin()) return {};
  --it;
  if (a >= it->second.first) return {};
  return {reinterpret_cast<const void*>(it->first), it->second.first - it->first,
          it->second.second};
}

size_t HostDeviceQueue::deviceAllocations() const {
  std::lock_guard<std::mutex> lock(allocations_->mu);
  return allocations_->byStart.size();
}

void HostDeviceQueue::enqueue(const Item& item) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(item);
  }
  work_.notify_one();
}

void HostDeviceQueue::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (dst == nullptr || src == nullptr)
    throw Error(Result::InvalidArgument,
                "host device queue: null pointer in a copy of " + std::to_string(bytes) + " bytes");
  enqueue({.kind = ItemKind::Copy, .dst = dst, .src = src, .size = bytes});
}

void HostDeviceQueue::reduce(void* dst, const void* a, const void* b, size_t count, DataType type,
                             RedOp op) {
  if (!isValid(type) || !isValid(op))
    throw Error(Result::InvalidArgument, "host device queue: reduce of an invalid type or op");
  if (count == 0) return;
  if (dst == nullptr || a == nullptr || b == nullptr)
    throw Error(Result::InvalidArgument, "host device queue: null pointer in a reduce of " +
                                             std::to_string(count) + " elements");
  enqueue({.kind = ItemKind::Reduce,
           .dst = dst,
           .src = a,
           .src2 = b,
           .size = count,
           .type = type,
           .op = op});
}

void HostDeviceQueue::divide(void* data, size_t count, DataType type, uint64_t divisor) {
  if (!isValid(type))
    throw Error(Result::InvalidArgument, "host device queue: divide of an invalid type");
  if (count == 0 || divisor <= 1) return;
  if (data == nullptr)
    throw Error(Result::InvalidArgument, "host device queue: null pointer in a divide");
  enqueue({.kind = ItemKind::Divide, .dst = data, .size = count, .type = type, .divisor = divisor});
}

DeviceQueue::Ticket HostDeviceQueue::fence() {
  Ticket t;
  {
    std::lock_guard<std::mutex> lock(mu_);
    t = ++issued_;
    queue_.push_back({.kind = ItemKind::Fence, .fence = t});
  }
  work_.notify_one();
  return t;
}

bool HostDeviceQueue::done(Ticket ticket) {
  return completed_.load(std::memory_order_acquire) >= ticket;
}

void HostDeviceQueue::wait(Ticket ticket, std::chrono::milliseconds timeout) {
  if (done(ticket)) return;
  std::unique_lock<std::mutex> lock(mu_);
  const auto ready = [&] { return completed_.load(std::memory_order_acquire) >= ticket; };
  const bool ok = timeout == std::chrono::milliseconds::max()
                      ? (finished_.wait(lock, ready), true)
                      : finished_.wait_for(lock, timeout, ready);
  if (!ok)
    throw Error(Result::Timeout, "host device queue: fence " + std::to_string(ticket) +
                                     " not reached after " + std::to_string(timeout.count()) +
                                     " ms (" + std::to_string(queue_.size()) + " items queued)");
}

void HostDeviceQueue::pause() {
  std::lock_guard<std::mutex> lock(mu_);
  paused_ = true;
}

void HostDeviceQueue::resume() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = false;
  }
  work_.notify_all();
}

void HostDeviceQueue::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_.wait(lock, [&] { return (!queue_.empty() && !paused_) || (stop_ && queue_.empty()); });
    if (queue_.empty()) return;  // stopping, and everything queued has run
    const Item item = queue_.front();
    queue_.pop_front();
    if (item.kind == ItemKind::Fence) {
      completed_.store(item.fence, std::memory_order_release);
      finished_.notify_all();
      continue;
    }
    lock.unlock();
    if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
    switch (item.kind) {
      case ItemKind::Copy:
        if (item.dst != item.src) std::memmove(item.dst, item.src, item.size);
        break;
      case ItemKind::Reduce:
        core::reduce(item.dst, item.src, item.src2, item.size, item.type, item.op);
        break;
      case ItemKind::Divide:
        core::finishAverage(item.dst, item.size, item.type, item.divisor);
        break;
      case ItemKind::Fence: break;
    }
    opsRun_.fetch_add(1, std::memory_order_relaxed);
    lock.lock();
  }
}

}  // namespace sharc::gpu

// The copy engine over host memory (host_copy_engine.hpp).
#include "gpu/host_copy_engine.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <sharc/error.hpp>
#include <string>

namespace sharc::gpu {
namespace {

constexpr size_t kPage = 4096;

struct AlignedOwner final : HostStaging::Owner {
  explicit AlignedOwner(void* p) : p(p) {}
  ~AlignedOwner() override { std::free(p); }
  void* p;
};

}  // namespace

HostCopyEngine::HostCopyEngine(std::chrono::microseconds delayPerCopy)
    : delay_(delayPerCopy), worker_([this] { run(); }) {}

HostCopyEngine::~HostCopyEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    paused_ = false;
  }
  work_.notify_all();
  worker_.join();
}

HostStaging HostCopyEngine::allocateStaging(size_t bytes) {
  const size_t rounded = (std::max<size_t>(bytes, 1) + kPage - 1) / kPage * kPage;
  if (rounded < bytes)
    throw Error(Result::InvalidArgument,
                "host staging of " + std::to_string(bytes) + " bytes overflows");
  void* p = std::aligned_alloc(kPage, rounded);
  if (p == nullptr)
    throw Error(Result::SystemError,
                "host staging: cannot allocate " + std::to_string(rounded) + " bytes");
  return HostStaging(p, rounded, std::make_unique<AlignedOwner>(p));
}

void HostCopyEngine::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (dst == nullptr || src == nullptr)
    throw Error(Result::InvalidArgument,
                "host copy engine: null pointer in a copy of " + std::to_string(bytes) + " bytes");
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Item{dst, src, bytes, 0});
  }
  work_.notify_one();
}

CopyEngine::Ticket HostCopyEngine::fence() {
  Ticket t;
  {
    std::lock_guard<std::mutex> lock(mu_);
    t = ++issued_;
    queue_.push_back(Item{nullptr, nullptr, 0, t});
  }
  work_.notify_one();
  return t;
}

bool HostCopyEngine::done(Ticket ticket) {
  return completed_.load(std::memory_order_acquire) >= ticket;
}

void HostCopyEngine::wait(Ticket ticket, std::chrono::milliseconds timeout) {
  if (done(ticket)) return;
  std::unique_lock<std::mutex> lock(mu_);
  const auto ready = [&] { return completed_.load(std::memory_order_acquire) >= ticket; };
  const bool ok = timeout == std::chrono::milliseconds::max()
                      ? (finished_.wait(lock, ready), true)
                      : finished_.wait_for(lock, timeout, ready);
  if (!ok)
    throw Error(Result::Timeout, "host copy engine: fence " + std::to_string(ticket) +
                                     " not reached after " + std::to_string(timeout.count()) +
                                     " ms (" + std::to_string(queue_.size()) + " items queued)");
}

void HostCopyEngine::pause() {
  std::lock_guard<std::mutex> lock(mu_);
  paused_ = true;
}

void HostCopyEngine::resume() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = false;
  }
  work_.notify_all();
}

void HostCopyEngine::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_.wait(lock, [&] { return (!queue_.empty() && !paused_) || (stop_ && queue_.empty()); });
    if (queue_.empty()) return;  // stopping, and everything queued has run
    const Item item = queue_.front();
    queue_.pop_front();
    if (item.fence != 0) {
      completed_.store(item.fence, std::memory_order_release);
      finished_.notify_all();
      continue;
    }
    lock.unlock();
    if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
    std::memcpy(item.dst, item.src, item.bytes);
    copiesRun_.fetch_add(1, std::memory_order_relaxed);
    lock.lock();
  }
}

}  // namespace sharc::gpu

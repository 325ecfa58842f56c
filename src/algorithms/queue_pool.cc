// Memory from a device queue kept between calls (queue_pool.hpp).
#include "algorithms/queue_pool.hpp"

namespace sharc::algo {

core::QueueMemory QueuePool::acquire(size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    size_t best = free_.size();
    for (size_t i = 0; i < free_.size(); ++i)
      if (free_[i].bytes() >= bytes &&
          (best == free_.size() || free_[i].bytes() < free_[best].bytes()))
        best = i;
    if (best != free_.size()) {
      core::QueueMemory m = std::move(free_[best]);
      free_.erase(free_.begin() + static_cast<long>(best));
      return m;
    }
  }
  core::QueueMemory m = allocate_(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  ++live_;
  return m;
}

void QueuePool::release(core::QueueMemory memory) {
  if (!memory) return;
  core::QueueMemory evicted;
  std::lock_guard<std::mutex> lock(mu_);
  if (maxFree_ != 0 && free_.size() >= maxFree_) {
    evicted = std::move(free_.front());
    free_.erase(free_.begin());
    --live_;
  }
  free_.push_back(std::move(memory));
}

void QueuePool::trim() {
  std::vector<core::QueueMemory> gone;
  std::lock_guard<std::mutex> lock(mu_);
  live_ -= free_.size();
  gone.swap(free_);
}

void QueuePool::abandon() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& m : free_) m.leak();
  live_ -= free_.size();
  free_.clear();
}

size_t QueuePool::live() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_;
}

}  // namespace sharc::algo

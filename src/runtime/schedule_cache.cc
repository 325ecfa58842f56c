#include "runtime/schedule_cache.hpp"

#include <algorithm>

#include "core/hash.hpp"

namespace sharc::detail {

size_t ScheduleCache::Hash::operator()(const ScheduleShape& s) const {
  uint64_t h = core::fnv1a64Word(static_cast<uint64_t>(s.kind));
  for (const uint64_t x :
       {static_cast<uint64_t>(s.type), static_cast<uint64_t>(s.op), uint64_t{s.count},
        static_cast<uint64_t>(s.root), static_cast<uint64_t>(s.algorithm), uint64_t{s.chunkBytes},
        uint64_t{s.inPlace}, static_cast<uint64_t>(s.device), uint64_t{s.directLinks}})
    h = core::fnv1a64Word(x, h);
  return static_cast<size_t>(h);
}

std::shared_ptr<algo::Schedule> ScheduleCache::take(const ScheduleShape& shape) {
  if (!enabled_) return nullptr;
  auto it = kept_.find(shape);
  if (it == kept_.end()) return nullptr;
  auto& list = it->second;
  for (size_t i = 0; i < list.size(); ++i) {
    // Only the cache holds it: no request can still read it or the provider still write it.
    if (list[i].use_count() != 1) continue;
    if (list[i]->state() == algo::Schedule::State::Done) return list[i];
    ops_ -= list[i]->opCount();  // failed: never run again
    list.erase(list.begin() + static_cast<long>(i--));
  }
  return nullptr;
}

void ScheduleCache::keep(const ScheduleShape& shape,
                         const std::shared_ptr<algo::Schedule>& schedule) {
  if (!enabled_) return;
  auto it = kept_.find(shape);
  if (it == kept_.end()) {
    const bool repeated = std::find(seen_.begin(), seen_.end(), shape) != seen_.end();
    if (!repeated) {
      seen_[seenNext_++ % kSeen] = shape;
      return;
    }
  } else if (it->second.size() >= kPerShape) {
    return;
  }
  const size_t ops = schedule->opCount();
  if (ops > kMaxOps || !schedule->prepareReuse()) return;
  if (it == kept_.end()) {
    while (!keptOrder_.empty() && (keptOrder_.size() >= kMaxShapes || ops_ + ops > kMaxOps))
      evictOldest();
    keptOrder_.push_back(shape);
    it = kept_.emplace(shape, std::vector<std::shared_ptr<algo::Schedule>>{}).first;
  } else {
    while (ops_ + ops > kMaxOps && keptOrder_.front() != shape) evictOldest();
    if (ops_ + ops > kMaxOps) return;
  }
  it->second.push_back(schedule);
  ops_ += ops;
}

void ScheduleCache::evictOldest() {
  auto it = kept_.find(keptOrder_.front());
  for (const auto& s : it->second) ops_ -= s->opCount();
  kept_.erase(it);
  keptOrder_.pop_front();
}

}  // namespace sharc::detail

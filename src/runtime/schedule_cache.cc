#include "runtime/schedule_cache.hpp"

#include "core/hash.hpp"

namespace sharc::detail {

size_t ScheduleCache::Hash::operator()(const ScheduleShape& s) const {
  uint64_t h = core::fnv1a64Word(static_cast<uint64_t>(s.kind));
  for (const uint64_t x :
       {static_cast<uint64_t>(s.type), static_cast<uint64_t>(s.op), uint64_t{s.count},
        static_cast<uint64_t>(s.root), static_cast<uint64_t>(s.algorithm), uint64_t{s.chunkBytes},
        uint64_t{s.inPlace}})
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
    if (list[i]->state() == algo::Schedule::State::Done) {
      ++reused_;
      return list[i];
    }
    ops_ -= list[i]->opCount();  // failed: never run again
    list.erase(list.begin() + static_cast<long>(i--));
  }
  return nullptr;
}

void ScheduleCache::keep(const ScheduleShape& shape,
                         const std::shared_ptr<algo::Schedule>& schedule) {
  if (!enabled_ || !schedule->prepareReuse()) return;
  auto& list = kept_[shape];
  if (list.size() >= kPerShape) return;
  if (ops_ + schedule->opCount() > kMaxOps) {
    kept_.clear();
    ops_ = 0;
    if (schedule->opCount() > kMaxOps) return;
  }
  kept_[shape].push_back(schedule);
  ops_ += schedule->opCount();
}

}  // namespace sharc::detail

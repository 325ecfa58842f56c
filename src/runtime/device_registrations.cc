// Registrations of device memory with the endpoint (device_registrations.hpp).
#include "runtime/device_registrations.hpp"

#include "core/log.hpp"

namespace sharc::detail {

DeviceRegistrations::DeviceRegistrations(transport::Endpoint& endpoint, core::DeviceQueue& queue,
                                         size_t capacity)
    : endpoint_(endpoint), queue_(queue), capacity_(capacity == 0 ? 1 : capacity) {}

DeviceRegistrations::~DeviceRegistrations() {
  while (!byBase_.empty()) release(byBase_.begin());
}

void DeviceRegistrations::release(std::map<uintptr_t, Entry>::iterator it) {
  endpoint_.releaseMemory(reinterpret_cast<const void*>(it->first), it->second.bytes);
  lru_.erase(it->second.lru);
  byBase_.erase(it);
}

std::string DeviceRegistrations::ensure(const void* p) {
  const core::DeviceQueue::Allocation a = queue_.allocationOf(p);
  if (a.id == 0) return {};
  const auto base = reinterpret_cast<uintptr_t>(a.base);
  auto it = byBase_.find(base);
  if (it != byBase_.end() && it->second.id == a.id && it->second.bytes == a.bytes) {
    ++stats_.hits;
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    return {};
  }
  // Whatever overlaps the allocation belonged to memory freed since: release it.
  auto first = byBase_.lower_bound(base);
  if (first != byBase_.begin()) {
    auto prev = std::prev(first);
    if (prev->first + prev->second.bytes > base) first = prev;
  }
  while (first != byBase_.end() && first->first < base + a.bytes) {
    auto next = std::next(first);
    release(first);
    ++stats_.replaced;
    first = next;
  }
  while (byBase_.size() >= capacity_) {
    release(byBase_.find(lru_.back()));
    ++stats_.evicted;
  }
  transport::MemoryRegistration m;
  m.buf = a.base;
  m.len = a.bytes;
  m.kind = queue_.deviceIsHost() ? transport::MemoryRegistration::Kind::Host
                                 : transport::MemoryRegistration::Kind::Cuda;
  m.cudaDevice = queue_.cudaDevice();
  uint64_t key = 0;
  if (!endpoint_.registerMemory(m, key))
    return "registering " + std::to_string(a.bytes) + " bytes of " + queue_.name() +
           " device memory with " + endpoint_.providerName() + " failed: " + endpoint_.lastError();
  lru_.push_front(base);
  byBase_.emplace(base, Entry{a.bytes, a.id, lru_.begin()});
  ++stats_.registered;
  SHARC_TRACE("device path: registered " << a.bytes << " bytes at " << a.base << " (allocation "
                                         << a.id << ") with " << endpoint_.providerName());
  return {};
}

void DeviceRegistrations::forget(const void* base) {
  auto it = byBase_.find(reinterpret_cast<uintptr_t>(base));
  if (it != byBase_.end()) release(it);
}

DeviceRegistrations::Stats DeviceRegistrations::stats() const {
  Stats s = stats_;
  s.entries = byBase_.size();
  return s;
}

}  // namespace sharc::detail

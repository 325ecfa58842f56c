#include "mr_cache.hpp"

#include <rdma/fi_domain.h>
#include <unistd.h>

namespace sharc::transport {

namespace {
uintptr_t pageSize() {
  static const uintptr_t size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  return size;
}
}  // namespace

MrCache::MrCache(fid_domain* domain, size_t capacity)
    : domain_(domain), capacity_(capacity == 0 ? 1 : capacity) {}

bool MrCache::descriptor(const void* buf, size_t len, void*& desc, std::string& error) {
  const uintptr_t lo = reinterpret_cast<uintptr_t>(buf);
  const uintptr_t hi = lo + (len == 0 ? 1 : len);
  // The entry with the greatest start <= lo is the only one that can contain [lo, hi).
  auto it = byStart_.upper_bound(lo);
  if (it != byStart_.begin()) {
    --it;
    if (it->second.end >= hi) {
      ++hits_;
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      desc = fi_mr_desc(it->second.mr.get());
      return true;
    }
  }
  ++misses_;
  const uintptr_t start = lo & ~(pageSize() - 1);
  const uintptr_t end = (hi + pageSize() - 1) & ~(pageSize() - 1);
  invalidate(reinterpret_cast<const void*>(start), end - start);
  fid_mr* raw = nullptr;
  const int rc = fi_mr_reg(domain_, reinterpret_cast<void*>(start), end - start, FI_SEND | FI_RECV,
                           0, nextKey_++, 0, &raw, nullptr);
  if (rc != 0) {
    error = fiErrorMessage("fi_mr_reg", rc);
    return false;
  }
  while (byStart_.size() >= capacity_) evictOne();
  lru_.push_front(start);
  Entry& e = byStart_[start];
  e.start = start;
  e.end = end;
  e.mr.reset(raw);
  e.lru = lru_.begin();
  desc = fi_mr_desc(raw);
  return true;
}

void MrCache::invalidate(const void* buf, size_t len) {
  const uintptr_t lo = reinterpret_cast<uintptr_t>(buf);
  const uintptr_t hi = lo + len;
  auto it = byStart_.upper_bound(lo);
  if (it != byStart_.begin()) --it;
  while (it != byStart_.end() && it->first < hi) {
    if (it->second.end > lo) {
      lru_.erase(it->second.lru);
      it = byStart_.erase(it);
    } else {
      ++it;
    }
  }
}

void MrCache::evictOne() {
  const uintptr_t victim = lru_.back();
  lru_.pop_back();
  byStart_.erase(victim);
}

}  // namespace sharc::transport

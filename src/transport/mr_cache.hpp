// Memory-registration cache: providers that need registered local buffers (FI_MR_LOCAL, e.g.
// efa, verbs) get each page range registered once and reused while it stays in the cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>

#include "fabric.hpp"

namespace sharc::transport {

class MrCache {
 public:
  /// `capacity`: most registrations kept; the least recently used is released beyond it.
  MrCache(fid_domain* domain, size_t capacity = 256);
  MrCache(const MrCache&) = delete;
  MrCache& operator=(const MrCache&) = delete;

  /// Sets `desc` to the descriptor for [buf, buf+len), registering the covering pages on a
  /// miss. Returns false and sets `error` when registration fails (hot path: no exceptions).
  /// Ranges are page-rounded; a new range replaces any cached one it overlaps.
  bool descriptor(const void* buf, size_t len, void*& desc, std::string& error);
  /// Forgets every registration overlapping [buf, buf+len) (call before freeing memory the
  /// cache may know; sharc does this for its own scratch buffers).
  void invalidate(const void* buf, size_t len);

  size_t entries() const { return byStart_.size(); }
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }

 private:
  struct Entry {
    uintptr_t start;
    uintptr_t end;
    FiPtr<fid_mr> mr;
    std::list<uintptr_t>::iterator lru;
  };
  void evictOne();

  fid_domain* domain_;
  size_t capacity_;
  std::map<uintptr_t, Entry> byStart_;  // keyed by start; ranges never overlap
  std::list<uintptr_t> lru_;            // front = most recently used
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
  uint64_t nextKey_ = 1;  // distinct requested keys (providers without FI_MR_PROV_KEY need them)
};

}  // namespace sharc::transport

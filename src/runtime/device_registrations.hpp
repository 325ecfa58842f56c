// The device path's registrations of device memory with the endpoint (fi_mr_regattr with
// FI_HMEM), one per allocation, cached: an allocation freed and reallocated at the same
// address has a new allocation id (DeviceQueue::allocationOf), so its stale registration is
// released and replaced, never reused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <string>

#include "core/device_queue.hpp"
#include "transport/endpoint.hpp"

namespace sharc::detail {

/// Registrations of one queue's device memory on one endpoint. Used under the engine lock.
class DeviceRegistrations {
 public:
  /// `capacity`: most allocations kept registered; the least recently used is released
  /// beyond it.
  DeviceRegistrations(transport::Endpoint& endpoint, core::DeviceQueue& queue,
                      size_t capacity = 1024);
  /// Releases every registration (before the memory or the endpoint goes).
  ~DeviceRegistrations();
  DeviceRegistrations(const DeviceRegistrations&) = delete;
  DeviceRegistrations& operator=(const DeviceRegistrations&) = delete;

  /// Makes sure the allocation holding `p` is registered, if `p` is device memory of the
  /// queue (host memory needs nothing here). Returns "" or why registration failed.
  std::string ensure(const void* p);
  /// Releases the registration of the allocation at `base`, if any (before it is freed).
  void forget(const void* base);

  struct Stats {
    uint64_t registered = 0;  ///< registrations made
    uint64_t hits = 0;        ///< ensure() calls answered from the cache
    uint64_t replaced = 0;    ///< stale registrations released (the id or range changed)
    uint64_t evicted = 0;     ///< released beyond the capacity
    size_t entries = 0;       ///< registered now
  };
  Stats stats() const;

 private:
  struct Entry {
    size_t bytes;
    uint64_t id;
    std::list<uintptr_t>::iterator lru;
  };
  void release(std::map<uintptr_t, Entry>::iterator it);

  transport::Endpoint& endpoint_;
  core::DeviceQueue& queue_;
  size_t capacity_;
  std::map<uintptr_t, Entry> byBase_;  // ranges never overlap
  std::list<uintptr_t> lru_;           // front: most recently used
  Stats stats_;
};

}  // namespace sharc::detail

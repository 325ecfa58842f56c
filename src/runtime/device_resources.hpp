// What the engine keeps for the device path per device queue (docs/gpu.md): the queue, its
// device scratch and host staging, and the registrations of device memory with the endpoint.
#pragma once

#include <memory>

#include "algorithms/queue_pool.hpp"
#include "core/device_queue.hpp"
#include "runtime/device_registrations.hpp"
#include "transport/endpoint.hpp"

namespace sharc::detail {

class DeviceResources {
 public:
  DeviceResources(std::unique_ptr<core::DeviceQueue> queue, transport::Endpoint& endpoint);
  /// Waits (bounded) for the operations still queued, then frees everything.
  ~DeviceResources();
  DeviceResources(const DeviceResources&) = delete;
  DeviceResources& operator=(const DeviceResources&) = delete;

  core::DeviceQueue& queue() { return *queue_; }
  /// Device scratch, kept for the engine's lifetime (a registration stays valid with it).
  algo::QueuePool scratch;
  /// Host staging for the links that cannot carry device memory.
  algo::QueuePool staging;
  /// Null once releaseRegistrations() ran.
  DeviceRegistrations* registrations() { return registrations_.get(); }
  /// Releases every registration (before the endpoint closes).
  void releaseRegistrations() { registrations_.reset(); }

 private:
  std::unique_ptr<core::DeviceQueue> queue_;
  std::unique_ptr<DeviceRegistrations> registrations_;
};

}  // namespace sharc::detail

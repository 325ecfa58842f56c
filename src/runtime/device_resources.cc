// The engine's device-path resources (device_resources.hpp).
#include "runtime/device_resources.hpp"

#include "core/log.hpp"

namespace sharc::detail {
namespace {
// Staging pieces kept free between calls (beyond them the oldest is freed).
constexpr size_t kFreeStaging = 64;
}  // namespace

DeviceResources::DeviceResources(std::unique_ptr<core::DeviceQueue> queue,
                                 transport::Endpoint& endpoint)
    : scratch([q = queue.get()](size_t bytes) { return q->allocateDevice(bytes); }),
      staging([q = queue.get()](size_t bytes) { return q->allocateStaging(bytes); }, kFreeStaging),
      queue_(std::move(queue)),
      registrations_(std::make_unique<DeviceRegistrations>(endpoint, *queue_)) {}

DeviceResources::~DeviceResources() {
  registrations_.reset();
  try {
    queue_->wait(queue_->fence(), std::chrono::seconds(10));
  } catch (const std::exception& e) {
    SHARC_WARN("device path: the " << queue_->name() << " queue did not drain (" << e.what()
                                   << "); its scratch and staging are left allocated");
    scratch.abandon();  // operations may still write them: leak rather than free
    staging.abandon();
  }
  scratch.trim();
  staging.trim();
}

}  // namespace sharc::detail

// The public Communicator's lifetime (constructor, destructor, destroy). The runtime makes
// these objects (world, split, subgroup), so their lifetime lives beside it: the runtime then
// needs nothing from sharc_api, which depends on it, and links without a cycle.
#include <sharc/communicator.hpp>

#include "runtime/communicator_impl.hpp"

namespace sharc {

Communicator::Communicator(std::unique_ptr<detail::CommunicatorImpl> impl)
    : impl_(std::move(impl)) {}

Communicator::~Communicator() {
  destroy();
}

void Communicator::destroy(std::chrono::milliseconds closingWait) noexcept {
  if (impl_) impl_->destroy(closingWait);
}

}  // namespace sharc

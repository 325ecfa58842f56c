// The one path by which every communicator is built: from a bootstrap that connects its ranks.
#pragma once

#include <memory>
#include <sharc/communicator.hpp>

#include "bootstrap/bootstrap.hpp"

namespace sharc::detail {

/// Creates the world communicator of `bootstrap`'s job (collective over its ranks): picks
/// the provider, opens the endpoint and exchanges fabric addresses through the bootstrap.
std::shared_ptr<Communicator> createCommunicator(std::unique_ptr<bootstrap::Bootstrap> bootstrap,
                                                 const CommOptions& options);

}  // namespace sharc::detail

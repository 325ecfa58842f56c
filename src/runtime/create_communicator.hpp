// The one path by which every world communicator is built: from a bootstrap that connects its
// ranks (root server, MPI or a caller's exchange).
#pragma once

#include <memory>
#include <sharc/communicator.hpp>

#include "bootstrap/bootstrap.hpp"

namespace sharc::detail {

/// Creates the world communicator of `bootstrap`'s job (collective over its ranks) in four
/// bootstrap rounds: hello (who shares a node), addresses (provider, shared-memory segment,
/// fabric address), readiness (single-copy and shared-memory paths) and a closing barrier.
std::shared_ptr<Communicator> createCommunicator(std::unique_ptr<bootstrap::Bootstrap> bootstrap,
                                                 const CommOptions& options);

}  // namespace sharc::detail

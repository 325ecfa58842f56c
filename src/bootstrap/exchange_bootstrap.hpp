// The bootstrap over a caller's exchange function (Communicator::createFromExchange): for
// frameworks, such as torch's c10d, that own the rendezvous.
#pragma once

#include <memory>
#include <sharc/communicator.hpp>

#include "bootstrap/bootstrap.hpp"

namespace sharc::bootstrap {

/// A bootstrap whose rounds are calls of `exchange`, which must return every rank's blob,
/// indexed by rank; a wrong count or this rank's blob changed throws InvalidUsage.
std::unique_ptr<Bootstrap> exchangeBootstrap(int rank, int size, ExchangeFn exchange);

}  // namespace sharc::bootstrap

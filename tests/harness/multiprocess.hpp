// Runs a test body as N real processes (fork, through the shared launcher in
// tools/launcher/launcher.hpp), one per rank, and reports every rank's failure to the parent's
// gtest. Ranks rendezvous through the environment (SHARC_ROOT on a free loopback port, rank 0
// serving) or through a UniqueId made by the parent.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <sharc/communicator.hpp>
#include <string>
#include <vector>

#include "launcher.hpp"

namespace sharc::testing {

enum class Rendezvous { Environment, UniqueIdFromParent };

struct RunOptions {
  /// The parent stops every rank after this (SIGTERM, SIGKILL 3 s later); a rank that fails
  /// (and is not in mayFail) stops the others at once.
  std::chrono::seconds timeout{180};
  std::map<std::string, std::string> env;  ///< extra environment for the ranks
  Rendezvous rendezvous = Rendezvous::Environment;
  /// Ranks that are expected to exit with a failure (e.g. a rank told to die); others must pass.
  std::vector<int> mayFail;
  /// Gives every rank its own SHARC_NODE_ID, so the job looks like one rank per host (the
  /// network algorithms, no shared-memory shortcuts).
  bool oneRankPerNode = false;
  /// SHARC_NODE_ID of each rank (index = rank; overrides oneRankPerNode): lays the ranks out
  /// on emulated nodes. core::Config reads the environment once per process, so a rank whose
  /// configuration was already loaded before the fork fails instead of silently running on
  /// the parent's layout.
  std::vector<std::string> nodeIds;
};

/// What the body receives: its rank, the world size and, for UniqueIdFromParent, the id bytes.
struct RankContext {
  int rank;
  int size;
  std::string uniqueId;  ///< 128 bytes, or empty
};

/// Forks `n` ranks running `body`; an exception or gtest failure in a rank fails the test with
/// the rank's message. Returns the wait status of each rank (-1: never started).
std::vector<int> runRanks(int n, const std::function<void(const RankContext&)>& body,
                          const RunOptions& options = {});

/// A rendezvous over an existing communicator (sizes, then the padded blobs, by AllGather):
/// for Communicator::createFromExchange, so that a test's communicators get endpoints and
/// threads of their own without a root server that outlives them.
ExchangeFn exchangeOver(Communicator& world);

/// A free TCP port on 127.0.0.1 (bound then released).
using launcher::freeLoopbackPort;

}  // namespace sharc::testing

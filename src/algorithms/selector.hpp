// SHARC_ALGO ("ring", "recursive_doubling", "bruck", "direct", "direct_read", "direct_write",
// "hierarchical", or per collective: "allgather:ring,reducescatter:bruck,allreduce:rd") and
// the one-call shortcut to the tuner (tuner.hpp), which picks each call's algorithm.
#pragma once

#include <optional>
#include <string>

#include "algorithms.hpp"
#include "tag.hpp"

namespace sharc::algo {

/// A parsed SHARC_ALGO value.
struct AlgorithmOverride {
  std::optional<Algorithm> allGather, reduceScatter, allReduce;
  /// Parses the forms above ("" = no override); throws sharc::Error(InvalidArgument) naming
  /// SHARC_ALGO, the bad item and the accepted names.
  static AlgorithmOverride parse(const std::string& text);
};

/// Where the ranks of a communicator are.
enum class Locality {
  Network,           ///< some ranks on other hosts
  OneHost,           ///< all on this host (shared-memory provider)
  OneHostSingleCopy  ///< all on this host and able to read each other's memory (CMA)
};
/// The algorithm for one call: the tuner's choice (plan() in tuner.hpp) with its default
/// parameters, one rank per node (Network) or all on one node, no message-size limit.
/// `bytesPerRank` is count * element size (per-rank block for AllGather/ReduceScatter, the whole
/// vector for AllReduce). Deterministic: every rank of a call gets the same answer from the same
/// arguments.
Algorithm selectAlgorithm(CollKind kind, size_t bytesPerRank, int nranks,
                          const AlgorithmOverride& override, Locality locality = Locality::Network);

}  // namespace sharc::algo

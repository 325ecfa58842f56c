// Which node (host) each rank of a communicator runs on: what the hierarchical algorithms
// and the tuner build on. Nodes are numbered in order of their lowest rank, so every rank
// derives the same map from the same keys.
#pragma once

#include <cstdint>
#include <vector>

namespace sharc::algo {

struct NodeMap {
  std::vector<int> nodeOf;                ///< rank -> node index
  std::vector<int> localRank;             ///< rank -> its index among its node's ranks
  std::vector<std::vector<int>> ranksOf;  ///< node -> its ranks, ascending

  /// Builds the map from any per-rank key that is equal exactly for ranks of one node.
  static NodeMap fromKeys(const std::vector<uint64_t>& keyOfRank);
  /// The map of a sub-communicator whose rank i is rank members[i] here.
  NodeMap subset(const std::vector<int>& members) const;

  int nodes() const { return static_cast<int>(ranksOf.size()); }
  int size() const { return static_cast<int>(nodeOf.size()); }
  /// Every node holds the same number of ranks.
  bool uniform() const;
  /// Most ranks on one node.
  int maxLocal() const;
};

}  // namespace sharc::algo

// The hierarchical schedule's geometry as the cost model needs it (hierarchical.cc,
// hierarchical_pattern.hpp): the ranks grouped by what they carry. Internal to tuner.cc.
#pragma once

#include <algorithm>
#include <map>
#include <vector>

#include "hierarchical_pattern.hpp"
#include "node_map.hpp"

namespace sharc::algo::model {

/// Ranks that carry the same work in the hierarchical schedules: those of nodes of `local`
/// ranks that proxy `held` blocks of other nodes (hierHeldBlocks less their own).
struct HierClass {
  int local = 1;  ///< ranks on its node (L_k)
  int held = 0;   ///< foreign blocks it proxies (h)
};

/// On node k (L_k ranks), local index i proxies the ranks of every other node m whose local
/// index is i mod L_k: #{j < L_m : j = i mod L_k} = ceil((L_m - i) / L_k) of them. Even nodes:
/// one class, h = N-1. Costs the distinct node sizes squared times L, not n times N (the
/// planner asks about thousands of ranks).
inline std::vector<HierClass> hierClasses(const NodeMap& map) {
  std::map<int, int> nodesOfSize;
  for (const auto& ranks : map.ranksOf) ++nodesOfSize[static_cast<int>(ranks.size())];
  std::vector<HierClass> out;
  for (const auto& [a, count] : nodesOfSize) {
    for (int i = 0; i < a; ++i) {
      int held = 0;
      for (const auto& [b, nodes] : nodesOfSize) {
        const int others = b == a ? nodes - 1 : nodes;
        held += b > i ? others * ((b - i + a - 1) / a) : 0;
      }
      const HierClass c{a, held};
      if (std::none_of(out.begin(), out.end(),
                       [&](const HierClass& o) { return o.local == a && o.held == held; }))
        out.push_back(c);
    }
  }
  return out;
}

/// The most blocks one rank's own NICs carry across nodes in either phase: local index 0 of
/// the smallest node proxies ceil(L_m / L_k) ranks of each node m. Even nodes: N-1.
inline int hierBlocksAcross(const std::vector<HierClass>& classes, int nodes) {
  int most = nodes - 1;
  for (const HierClass& c : classes) most = std::max(most, c.held);
  return most;
}

/// The blocks the busiest node's link carries each way over both phases of hierarchical
/// AllReduce: node k sends L_k(N-1) own blocks in the AllGather and the partials of the
/// other n - L_k ranks in the ReduceScatter (and receives as many): max over k of
/// L_k(N-1) + n - L_k. Even nodes: 2L(N-1), the two phases' sum; 3+1: 4, not 2 x 3.
inline int hierBothPhasesBlocks(const NodeMap& map) {
  const int n = map.size(), N = map.nodes();
  int most = 0;
  for (const auto& ranks : map.ranksOf) {
    const int L = static_cast<int>(ranks.size());
    most = std::max(most, L * (N - 1) + n - L);
  }
  return most;
}

/// Whether two ranks of different nodes send to each other in hierarchical's inter-node
/// phase (AllGather: a rank to its proxy on every other node; ReduceScatter the reverse): over
/// tcp, where the engine takes the rotated proxy rule (communicator.cc), pairs talk one way on
/// even nodes of two, but not on uneven ones (3+1: the lone rank and its proxy on the big node)
/// nor on some even layouts of more nodes. n x N proxy lookups; the tuner asks it only on
/// half-duplex fabrics (the host's tcp), never for sharc-plan's EFA clusters.
inline bool hierTwoWayPairs(const NodeMap& map) {
  for (int s = 0; s < map.size(); ++s) {
    const int home = map.nodeOf[static_cast<size_t>(s)];
    for (int m = 0; m < map.nodes(); ++m) {
      if (m == home) continue;
      const int t = hierProxy(map, m, s, 1);
      if (hierProxy(map, home, t, 1) == s) return true;
    }
  }
  return false;
}

}  // namespace sharc::algo::model

#include "hierarchical_pattern.hpp"

#include <algorithm>

namespace sharc::algo {

int hierProxy(const NodeMap& map, int node, int q, int rotate) {
  const std::vector<int>& ranks = map.ranksOf[static_cast<size_t>(node)];
  const int local =
      map.localRank[static_cast<size_t>(q)] + rotate * map.nodeOf[static_cast<size_t>(q)];
  return ranks[static_cast<size_t>(local) % ranks.size()];
}

std::vector<int> hierHeldBlocks(const NodeMap& map, int r, int rotate) {
  const int node = map.nodeOf[static_cast<size_t>(r)];
  std::vector<int> held;
  for (int q = 0; q < map.size(); ++q)
    if (q == r ||
        (map.nodeOf[static_cast<size_t>(q)] != node && hierProxy(map, node, q, rotate) == r))
      held.push_back(q);
  return held;
}

int hierMaxHeld(const NodeMap& map) {
  // Local index 0 of a node proxies the most: ceil(L_m / L_k) ranks of every other node m.
  int most = 1;
  for (int k = 0; k < map.nodes(); ++k) {
    const size_t lk = map.ranksOf[static_cast<size_t>(k)].size();
    size_t held = 1;
    for (int m = 0; m < map.nodes(); ++m)
      if (m != k) held += (map.ranksOf[static_cast<size_t>(m)].size() + lk - 1) / lk;
    most = std::max(most, static_cast<int>(held));
  }
  return most;
}

int hierHeldIndex(const std::vector<int>& held, int q) {
  const auto it = std::lower_bound(held.begin(), held.end(), q);
  return it != held.end() && *it == q ? static_cast<int>(it - held.begin()) : -1;
}

int hierIntraSource(const NodeMap& map, int t, int q, int rotate) {
  if (q == t) return -1;
  const int node = map.nodeOf[static_cast<size_t>(t)];
  if (map.nodeOf[static_cast<size_t>(q)] == node) return q;
  const int proxy = hierProxy(map, node, q, rotate);
  return proxy == t ? -1 : proxy;
}

bool hierApplies(const NodeMap& map) {
  return map.nodes() > 1 && map.maxLocal() > 1;
}

}  // namespace sharc::algo

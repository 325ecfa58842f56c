#include "node_map.hpp"

#include <algorithm>
#include <map>

namespace sharc::algo {

NodeMap NodeMap::fromKeys(const std::vector<uint64_t>& keyOfRank) {
  NodeMap m;
  std::map<uint64_t, int> index;
  for (size_t r = 0; r < keyOfRank.size(); ++r) {
    const auto [it, added] = index.emplace(keyOfRank[r], static_cast<int>(m.ranksOf.size()));
    if (added) m.ranksOf.emplace_back();
    m.nodeOf.push_back(it->second);
    m.localRank.push_back(static_cast<int>(m.ranksOf[it->second].size()));
    m.ranksOf[it->second].push_back(static_cast<int>(r));
  }
  return m;
}

NodeMap NodeMap::subset(const std::vector<int>& members) const {
  std::vector<uint64_t> keys;
  keys.reserve(members.size());
  for (int m : members) keys.push_back(static_cast<uint64_t>(nodeOf.at(static_cast<size_t>(m))));
  return fromKeys(keys);
}

bool NodeMap::uniform() const {
  return std::all_of(ranksOf.begin(), ranksOf.end(),
                     [&](const std::vector<int>& r) { return r.size() == ranksOf[0].size(); });
}

int NodeMap::maxLocal() const {
  size_t most = 0;
  for (const auto& r : ranksOf) most = std::max(most, r.size());
  return static_cast<int>(most);
}

}  // namespace sharc::algo

// The rank math of the two-level collectives (hierarchical_pattern.hpp), checked by simulating
// the messages hierarchical.cc builds from it on equal, uneven and interleaved layouts.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "algorithms/hierarchical_pattern.hpp"

namespace sharc::algo {
namespace {

NodeMap layout(const std::vector<uint64_t>& nodeOfRank) {
  return NodeMap::fromKeys(nodeOfRank);
}

const std::vector<std::vector<uint64_t>> kLayouts = {{0, 0, 1, 1},
                                                     {0, 0, 0, 1, 1, 1},
                                                     {0, 0, 1, 1, 2, 2},
                                                     {0, 0, 0, 1, 1},
                                                     {0, 1, 0, 1},
                                                     {0, 1, 1, 1},
                                                     {0, 0, 0, 0, 1, 2, 2},
                                                     {5, 5, 3, 9, 3, 5, 9, 9},
                                                     {0, 1, 2, 0, 1, 2},
                                                     {0, 0, 0, 0, 0, 1, 1},
                                                     {0, 1}};

TEST(HierarchicalPattern, ProxyIsTheSameRailOnEqualNodes) {
  const NodeMap m = layout({0, 0, 0, 1, 1, 1});
  for (int q = 0; q < 6; ++q) {
    EXPECT_EQ(hierProxy(m, 0, q), q % 3);
    EXPECT_EQ(hierProxy(m, 1, q), 3 + q % 3);
  }
  const NodeMap abab = layout({0, 1, 0, 1});  // node 0 = {0, 2}, node 1 = {1, 3}
  EXPECT_EQ(hierProxy(abab, 1, 0), 1);
  EXPECT_EQ(hierProxy(abab, 1, 2), 3);
  EXPECT_EQ(hierProxy(abab, 0, 3), 2);
}

TEST(HierarchicalPattern, UnevenNodesWrapLocalIndices) {
  const NodeMap m = layout({0, 0, 0, 1, 1});  // 3 + 2
  EXPECT_EQ(hierProxy(m, 1, 0), 3);
  EXPECT_EQ(hierProxy(m, 1, 1), 4);
  EXPECT_EQ(hierProxy(m, 1, 2), 3);  // local index 2 mod 2
  EXPECT_EQ(hierHeldBlocks(m, 3), (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(hierHeldBlocks(m, 4), (std::vector<int>{1, 4}));
  EXPECT_EQ(hierHeldBlocks(m, 0), (std::vector<int>{0, 3}));
  EXPECT_EQ(hierHeldBlocks(m, 2), (std::vector<int>{2}));
  EXPECT_EQ(hierMaxHeld(m), 3);
  EXPECT_TRUE(hierApplies(m));
  EXPECT_FALSE(hierApplies(layout({0, 0, 0})));
  EXPECT_FALSE(hierApplies(layout({0, 1, 2})));
}

TEST(HierarchicalPattern, MaxHeldIsTheLargestHeldList) {
  for (const auto& keys : kLayouts) {
    const NodeMap m = layout(keys);
    size_t most = 0;
    for (int r = 0; r < m.size(); ++r) most = std::max(most, hierHeldBlocks(m, r).size());
    EXPECT_EQ(hierMaxHeld(m), static_cast<int>(most));
  }
}

// (from, to, slot step) -> block: every message of one phase; a repeated key is a tag clash.
using Messages = std::map<std::tuple<int, int, int>, int>;

void add(Messages& msgs, int from, int to, int step, int block) {
  EXPECT_TRUE(msgs.emplace(std::make_tuple(from, to, step), block).second)
      << "two messages " << from << " -> " << to << " at step " << step;
}

// AllGather: every rank ends with every block exactly once, each slot step below maxHeld.
TEST(HierarchicalPattern, AllGatherDeliversEveryBlockOnce) {
  for (int rot : {0, 1})
    for (const auto& keys : kLayouts) {
      const NodeMap m = layout(keys);
      const int n = m.size();
      Messages msgs;
      std::vector<std::multiset<int>> got(n);
      for (int q = 0; q < n; ++q) {
        got[q].insert(q);
        for (int node = 0; node < m.nodes(); ++node) {
          if (node == m.nodeOf[q]) continue;
          const int proxy = hierProxy(m, node, q, rot);
          add(msgs, q, proxy, 0, q);  // inter-node pairs carry one block
          got[proxy].insert(q);
        }
      }
      for (int r = 0; r < n; ++r) {
        const std::vector<int> held = hierHeldBlocks(m, r, rot);
        for (int t : m.ranksOf[m.nodeOf[r]]) {
          if (t == r) continue;
          for (int q : held) {
            const int step = hierHeldIndex(held, q);
            EXPECT_LT(step, hierMaxHeld(m));
            add(msgs, r, t, step, q);
            got[t].insert(q);
            EXPECT_EQ(hierIntraSource(m, t, q, rot), r);  // the receiver expects it from r
          }
        }
      }
      for (int t = 0; t < n; ++t) {
        for (int q = 0; q < n; ++q)
          EXPECT_EQ(got[t].count(q), 1u) << "rank " << t << " block " << q;
        int expected = 0;  // receives from node peers that hierIntraSource names
        for (int q = 0; q < n; ++q) expected += hierIntraSource(m, t, q, rot) >= 0;
        int intra = 0;
        for (const auto& [key, block] : msgs)
          intra += std::get<1>(key) == t && m.nodeOf[std::get<0>(key)] == m.nodeOf[t];
        EXPECT_EQ(intra, expected);
      }
    }
}

// ReduceScatter: block q's result gathers every rank's contribution exactly once.
TEST(HierarchicalPattern, ReduceScatterReducesEveryContributionOnce) {
  for (int rot : {0, 1})
    for (const auto& keys : kLayouts) {
      const NodeMap m = layout(keys);
      const int n = m.size();
      Messages msgs;
      // partial[holder][q]: ranks whose contribution to block q the holder has reduced.
      std::vector<std::map<int, std::multiset<int>>> partial(n);
      for (int r = 0; r < n; ++r) {
        for (int q = 0; q < n; ++q) {
          const int node = m.nodeOf[r];
          const int holder = m.nodeOf[q] == node ? q : hierProxy(m, node, q, rot);
          if (holder != r)
            add(msgs, r, holder, hierHeldIndex(hierHeldBlocks(m, holder, rot), q), q);
          partial[holder][q].insert(r);
        }
      }
      for (int q = 0; q < n; ++q) {
        std::multiset<int> total = partial[q][q];
        for (int node = 0; node < m.nodes(); ++node) {
          if (node == m.nodeOf[q]) continue;
          const int proxy = hierProxy(m, node, q, rot);
          add(msgs, proxy, q, 0, q);
          // The proxy holds exactly its node's contributions to q.
          EXPECT_EQ(partial[proxy][q].size(), m.ranksOf[node].size());
          total.insert(partial[proxy][q].begin(), partial[proxy][q].end());
        }
        for (int r = 0; r < n; ++r) EXPECT_EQ(total.count(r), 1u) << "block " << q << " rank " << r;
      }
    }
}

// The rotated rule: between two equal nodes every pair of ranks talks one way only (tcp's
// turns: cost_model.hpp), and every rank still proxies exactly one rank of the other node.
TEST(HierarchicalPattern, RotatedProxiesPairRanksOneWay) {
  for (const auto& keys :
       {std::vector<uint64_t>{0, 0, 1, 1}, std::vector<uint64_t>{0, 0, 0, 0, 1, 1, 1, 1},
        std::vector<uint64_t>{0, 1, 0, 1}}) {
    const NodeMap m = layout(keys);
    std::set<std::pair<int, int>> pairs;
    for (int q = 0; q < m.size(); ++q)
      for (int node = 0; node < m.nodes(); ++node)
        if (node != m.nodeOf[q]) pairs.emplace(q, hierProxy(m, node, q, 1));
    for (const auto& [from, to] : pairs)
      EXPECT_FALSE(pairs.count({to, from})) << from << "<->" << to;
    for (int r = 0; r < m.size(); ++r) EXPECT_EQ(hierHeldBlocks(m, r, 1).size(), 2u);
  }
}

}  // namespace
}  // namespace sharc::algo

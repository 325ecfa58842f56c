// The pure rank/offset math of every algorithm, checked by simulating the data movement.
#include <gtest/gtest.h>

#include <set>
#include <utility>
#include <vector>

#include "algorithms/algorithms.hpp"
#include "algorithms/patterns.hpp"

namespace sharc::algo {
namespace {

TEST(Patterns, EvenBlocksTileTheRange) {
  for (size_t count : {0, 1, 7, 64, 1001}) {
    for (int parts = 1; parts <= 9; ++parts) {
      size_t next = 0;
      for (int i = 0; i < parts; ++i) {
        const Range b = evenBlock(count, parts, i);
        EXPECT_EQ(b.offset, next);
        EXPECT_LE(b.count, count / parts + 1);
        EXPECT_GE(b.count, count / parts);
        next += b.count;
      }
      EXPECT_EQ(next, count);
    }
  }
}

TEST(Patterns, PowerOfTwoHelpers) {
  EXPECT_TRUE(isPowerOfTwo(1));
  EXPECT_TRUE(isPowerOfTwo(8));
  EXPECT_FALSE(isPowerOfTwo(6));
  EXPECT_FALSE(isPowerOfTwo(0));
  EXPECT_EQ(floorPowerOfTwo(7), 4);
  EXPECT_EQ(floorPowerOfTwo(8), 8);
  EXPECT_EQ(ceilLog2(1), 0);
  EXPECT_EQ(ceilLog2(5), 3);
  EXPECT_EQ(mod(-1, 5), 4);
}

TEST(Patterns, RingAllGatherDeliversEveryBlockOnce) {
  for (int n = 1; n <= 17; ++n) {
    for (int r = 0; r < n; ++r) {
      std::set<int> got{r};
      for (int s = 0; s + 1 < n; ++s) {
        const int prev = mod(r - 1, n);
        // What this rank receives is what its predecessor sends at the same step...
        EXPECT_EQ(ringAllGatherRecvBlock(r, n, s), ringAllGatherSendBlock(prev, n, s));
        // ...and what it sends it already holds.
        EXPECT_TRUE(got.count(ringAllGatherSendBlock(r, n, s)));
        EXPECT_TRUE(got.insert(ringAllGatherRecvBlock(r, n, s)).second);
      }
      EXPECT_EQ(static_cast<int>(got.size()), n);
    }
  }
}

TEST(Patterns, RingReduceScatterAccumulatesEveryRank) {
  for (int n = 2; n <= 17; ++n) {
    // partial[r][b]: ranks whose contribution to block b the partial at rank r holds.
    std::vector<std::vector<std::set<int>>> partial(n, std::vector<std::set<int>>(n));
    for (int r = 0; r < n; ++r)
      for (int b = 0; b < n; ++b) partial[r][b] = {r};
    for (int s = 0; s + 1 < n; ++s) {
      auto next = partial;
      for (int r = 0; r < n; ++r) {
        const int prev = mod(r - 1, n);
        const int b = ringReduceScatterRecvBlock(r, n, s);
        ASSERT_EQ(b, ringReduceScatterSendBlock(prev, n, s));
        for (int c : partial[prev][b]) next[r][b].insert(c);
      }
      partial = next;
    }
    for (int r = 0; r < n; ++r) EXPECT_EQ(static_cast<int>(partial[r][r].size()), n) << n;
  }
}

TEST(Patterns, RecursiveDoublingAndHalving) {
  for (int n : {1, 2, 4, 8, 16, 32}) {
    const int steps = ceilLog2(n);
    for (int r = 0; r < n; ++r) {
      for (int s = 0; s < steps; ++s) {
        const int p = recursiveDoublingPartner(r, s);
        const Range mine = recursiveDoublingHeld(r, s), theirs = recursiveDoublingHeld(p, s);
        EXPECT_EQ(mine.count, theirs.count);
        EXPECT_EQ(std::min(mine.offset, theirs.offset) + 2 * mine.count,
                  std::max(mine.offset, theirs.offset) + mine.count);
        const HalvingStep h = recursiveHalvingStep(r, n, s);
        const HalvingStep hp = recursiveHalvingStep(h.partner, n, s);
        EXPECT_EQ(h.send.offset, hp.keep.offset);
        EXPECT_EQ(h.keep.offset, hp.send.offset);
        EXPECT_LE(h.keep.offset, static_cast<size_t>(r));
        EXPECT_GT(h.keep.offset + h.keep.count, static_cast<size_t>(r));
      }
      if (steps > 0) {
        const HalvingStep last = recursiveHalvingStep(r, n, steps - 1);
        EXPECT_EQ(last.keep.offset, static_cast<size_t>(r));
        EXPECT_EQ(last.keep.count, 1u);
      }
    }
  }
}

TEST(Patterns, BruckAllGatherGathersEverything) {
  for (int n = 1; n <= 17; ++n) {
    // held[r][i]: the block rank r holds at rotated position i (-1 = nothing yet).
    std::vector<std::vector<int>> held(n, std::vector<int>(n, -1));
    for (int r = 0; r < n; ++r) held[r][0] = r;
    for (int s = 0; (1 << s) < n; ++s) {
      auto next = held;
      for (int r = 0; r < n; ++r) {
        const BruckStep b = bruckAllGatherStep(r, n, s);
        const BruckStep from = bruckAllGatherStep(b.recvPeer, n, s);
        ASSERT_EQ(from.sendPeer, r);
        for (int i = 0; i < b.blocks; ++i) {
          ASSERT_NE(held[b.recvPeer][i], -1);
          next[r][b.distance + i] = held[b.recvPeer][i];
        }
      }
      held = next;
    }
    for (int r = 0; r < n; ++r)
      for (int i = 0; i < n; ++i) EXPECT_EQ(held[r][i], mod(r + i, n)) << n << " " << r;
  }
}

TEST(Patterns, ReverseBruckReduceScatterReducesEverything) {
  for (int n = 1; n <= 17; ++n) {
    // part[r][i]: contributors to block (r + i) mod n held at rank r, rotated position i.
    std::vector<std::vector<std::set<int>>> part(n, std::vector<std::set<int>>(n));
    for (int r = 0; r < n; ++r)
      for (int i = 0; i < n; ++i) part[r][i] = {r};
    for (int s = 0; s < reverseBruckSteps(n); ++s) {
      auto next = part;
      for (int r = 0; r < n; ++r) {
        const ReverseBruckStep b = reverseBruckStep(r, n, s);
        const ReverseBruckStep from = reverseBruckStep(b.recvPeer, n, s);
        ASSERT_EQ(from.sendPeer, r);
        ASSERT_EQ(b.blocks, b.length - b.distance);
        ASSERT_LE(b.blocks, b.distance);
        for (int i = 0; i < b.blocks; ++i) {
          // The sender's rotated block distance + i is this rank's block i.
          ASSERT_EQ(mod(b.recvPeer + b.distance + i, n), mod(r + i, n));
          for (int c : part[b.recvPeer][b.distance + i]) next[r][i].insert(c);
        }
      }
      part = next;
    }
    for (int r = 0; r < n; ++r) EXPECT_EQ(static_cast<int>(part[r][0].size()), n) << n;
  }
}

// A reversed Bruck step's message goes in ranges that tile it, each split at half the last
// distance while both parts hold kReverseBruckMinPart: what the next step sends on first.
TEST(Patterns, ReverseBruckOrderSendsOnwardBlocksFirst) {
  using Order = std::vector<std::pair<int, int>>;
  EXPECT_EQ(
      reverseBruckOrder(512, 512, 32 * 1024),
      (Order{
          {256, 512}, {128, 256}, {64, 128}, {32, 64}, {16, 32}, {8, 16}, {4, 8}, {2, 4}, {0, 2}}));
  EXPECT_EQ(reverseBruckOrder(512, 512, 4 * 1024),
            (Order{{256, 512}, {128, 256}, {64, 128}, {32, 64}, {16, 32}, {0, 16}}));
  EXPECT_EQ(reverseBruckOrder(1, 1, 1 << 20), (Order{{0, 1}}));
  EXPECT_EQ(reverseBruckOrder(3, 4, 1 << 20), (Order{{2, 3}, {1, 2}, {0, 1}}));
  for (int n : {2, 3, 5, 8, 13, 64, 100, 1024})
    for (double block : {1024.0, 32768.0, 1048576.0})
      for (int s = 0; s < reverseBruckSteps(n); ++s) {
        const ReverseBruckStep b = reverseBruckStep(0, n, s);
        const Order order = reverseBruckOrder(b.blocks, b.distance, block);
        int end = b.blocks;
        for (size_t i = 0; i < order.size(); ++i) {
          EXPECT_EQ(order[i].second, end) << n << " " << s;
          EXPECT_LT(order[i].first, order[i].second) << n << " " << s;
          const bool last = i + 1 == order.size();
          EXPECT_EQ(order[i].first == 0, last) << n << " " << s;
          if (!last) {
            EXPECT_GE((order[i].second - order[i].first) * block, kReverseBruckMinPart);
            EXPECT_GE(order[i].first * block, kReverseBruckMinPart);
            EXPECT_LE(order[i].first, b.distance / 2);
          }
          end = order[i].first;
        }
      }
}

TEST(Patterns, BinomialTreeSpansAllRanks) {
  for (int n = 1; n <= 17; ++n) {
    for (int root = 0; root < n; ++root) {
      std::vector<int> parentSeen(n, -2);
      for (int r = 0; r < n; ++r) {
        int children[32];
        const int k = binomialChildren(r, n, root, children, 32);
        for (int i = 0; i < k; ++i) {
          EXPECT_EQ(binomialParent(children[i], n, root), r);
          parentSeen[children[i]] = r;
        }
      }
      for (int r = 0; r < n; ++r) {
        if (r == root)
          EXPECT_EQ(binomialParent(r, n, root), -1);
        else
          EXPECT_EQ(parentSeen[r], binomialParent(r, n, root));
      }
    }
  }
}

TEST(Patterns, DisseminationPairsMatch) {
  for (int n = 1; n <= 9; ++n)
    for (int r = 0; r < n; ++r)
      for (int s = 0; (1 << s) < n; ++s)
        EXPECT_EQ(disseminationRecvPeer(disseminationSendPeer(r, n, s), n, s), r);
}

}  // namespace
}  // namespace sharc::algo

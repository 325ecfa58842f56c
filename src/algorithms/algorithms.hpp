// Builders that turn a collective call into a Schedule, one per named algorithm.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/algorithm.hpp"
#include "schedule.hpp"

namespace sharc::algo {

/// Buffers and sizes of one call (count is per rank for AllGather/ReduceScatter).
struct CollArgs {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  int root = 0;
  size_t chunkBytes = 1 << 20;  ///< pipelining granularity (already capped by the provider)
};

/// What every builder starts from: `const auto [n, r, elem, block, send, recv] = Frame(s, a);`
/// (ranks, this rank, element size, bytes per count-sized block, typed buffers).
struct Frame {
  Frame(const Schedule& s, const CollArgs& a)
      : n(s.context().size),
        r(s.context().rank),
        elem(dataTypeSize(s.context().type)),
        block(a.count * elem),
        send(static_cast<const std::byte*>(a.send)),
        recv(static_cast<std::byte*>(a.recv)) {}
  int n, r;
  size_t elem, block;
  const std::byte* send;
  std::byte* recv;
};

/// Number of chunks each block is cut into: enough for `chunkBytes` pieces, at least 1, and
/// few enough that steps * chunks slots fit the tag.
size_t chunksFor(size_t blockBytes, size_t chunkBytes, size_t steps);

void buildAllGather(Schedule& s, Algorithm a, const CollArgs& args);
void buildReduceScatter(Schedule& s, Algorithm a, const CollArgs& args);
void buildAllReduce(Schedule& s, Algorithm a, const CollArgs& args);
void buildBroadcast(Schedule& s, const CollArgs& args);
/// One-host single-copy forms (need ScheduleContext::pids; see direct_read.cc).
void buildDirectWriteAllGather(Schedule& s, const CollArgs& args);
void buildDirectReadReduceScatter(Schedule& s, const CollArgs& args);
void buildDirectReadAllReduce(Schedule& s, const CollArgs& args);
void buildBarrier(Schedule& s);
/// Two-level forms for jobs spanning nodes (hierarchical.cc; needs ScheduleContext::nodes).
/// Each returns false, building nothing, where two levels do not apply (one node, or one rank
/// per node): the caller then builds the ring.
bool buildHierarchicalAllGather(Schedule& s, const CollArgs& args);
bool buildHierarchicalReduceScatter(Schedule& s, const CollArgs& args);
bool buildHierarchicalAllReduce(Schedule& s, const CollArgs& args);
/// The most scratch hierarchical_bruck's AllGather keeps for its node peers' pieces: where
/// pieces hold several blocks and (L-1) N blocks fit, a piece goes to each node peer whole
/// and the peer places its blocks with strided copies; else one message per block.
inline constexpr size_t kBruckLaneScratchMax = size_t{1} << 30;
/// Whether hierarchical_bruck moves whole pieces between node peers (AllGather) or runs of
/// positions (ReduceScatter): pieces of more than two blocks, and (L-1) N blocks of scratch
/// within kBruckLaneScratchMax. The builders and the cost model decide by this one rule.
inline bool bruckWholePieces(double pieceBytes, double blockBytes, double nodePeers, double nodes) {
  return pieceBytes > 2 * blockBytes &&
         nodePeers * nodes * blockBytes <= static_cast<double>(kBruckLaneScratchMax);
}
/// How many units of hierarchical_bruck's ReduceScatter local phase (a run of positions and a
/// piece of their blocks) may post and gather before the oldest of them is reduced. The
/// builder and the cost model's lead use this one value.
inline constexpr size_t kBruckUnitsAhead = 3;
/// The smallest part hierarchical_bruck's ReduceScatter cuts a reversed Bruck step's message
/// into: a message under 64 KiB stripes over fewer than four rails (transport/stripe_rule.hpp),
/// the rails of a p5 rank, and crawls where it is the last one left.
inline constexpr double kReverseBruckMinPart = 64.0 * 1024;
/// Where hierarchical_bruck's ReduceScatter splits a reversed Bruck step's message of `blocks`
/// blocks at distance `distance`: the blocks [half, blocks) that the next step sends on go
/// first, then [0, half), itself split the same way at distance half, so that each step can
/// start early in the one before and a step's last bytes are those with the fewest hops left.
/// Only where both parts hold kReverseBruckMinPart. Returns half, or 0 for no split. The
/// builder and the cost model decide by this one rule.
inline int reverseBruckSplit(int blocks, int distance, double blockBytes) {
  const int half = distance / 2;
  if (half == 0 || half >= blocks) return 0;
  const bool parts = half * blockBytes >= kReverseBruckMinPart &&
                     (blocks - half) * blockBytes >= kReverseBruckMinPart;
  return parts ? half : 0;
}
/// The order in which hierarchical_bruck's ReduceScatter sends a reversed Bruck step's message
/// of `blocks` blocks at distance `distance`: ranges [first, last) of its blocks, split again
/// and again by reverseBruckSplit ([d/2, blocks), [d/4, d/2), ..., then the rest from 0).
inline std::vector<std::pair<int, int>> reverseBruckOrder(int blocks, int distance,
                                                          double blockBytes) {
  std::vector<std::pair<int, int>> order;
  int end = blocks;
  for (int half = reverseBruckSplit(end, distance, blockBytes); half > 0;
       half = reverseBruckSplit(end, half, blockBytes)) {
    order.push_back({half, end});
    end = half;
  }
  order.push_back({0, end});
  return order;
}
/// The same with a Bruck across nodes (hierarchical_bruck.cc): false, building nothing, where
/// the nodes differ in size (or as above); the caller then builds the hierarchical form.
bool buildHierarchicalBruckAllGather(Schedule& s, const CollArgs& args);
bool buildHierarchicalBruckReduceScatter(Schedule& s, const CollArgs& args);

}  // namespace sharc::algo

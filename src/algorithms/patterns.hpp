// Collective patterns: pure rank/offset arithmetic, no I/O. Schedules (all_gather.cc, ...)
// turn these into posted operations; tests/unit/test_patterns.cc checks them exhaustively.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sharc::algo {

/// A contiguous range of elements.
struct Range {
  size_t offset = 0;
  size_t count = 0;
};

/// Block `index` of `count` elements split into `parts` near-equal blocks (the first
/// count % parts blocks hold one element more).
Range evenBlock(size_t count, int parts, int index);

/// (a mod n) for possibly negative a, in [0, n).
inline int mod(long long a, int n) {
  const long long r = a % n;
  return static_cast<int>(r < 0 ? r + n : r);
}

bool isPowerOfTwo(int n);
/// Largest power of two <= n (n >= 1).
int floorPowerOfTwo(int n);
/// Number of bits needed: ceil(log2(n)) for n >= 1.
int ceilLog2(int n);

// ---- ring ------------------------------------------------------------------------------
/// Ring AllGather and ReduceScatter: every step, rank sends to rank+1 and receives from rank-1.
int ringSendPeer(int rank, int n);
int ringRecvPeer(int rank, int n);
/// AllGather ring, step s in [0, n-1): rank sends block (rank - s) to rank+1 and receives
/// block (rank - s - 1) from rank-1.
int ringAllGatherSendBlock(int rank, int n, int step);
int ringAllGatherRecvBlock(int rank, int n, int step);
/// ReduceScatter ring, step s in [0, n-1): rank sends the partial of block (rank - s - 1) and
/// receives the partial of block (rank - s - 2); after the last step it owns block `rank`.
int ringReduceScatterSendBlock(int rank, int n, int step);
int ringReduceScatterRecvBlock(int rank, int n, int step);

// ---- recursive doubling / halving (n a power of two) -------------------------------------
/// Partner at step k: rank ^ 2^k.
int recursiveDoublingPartner(int rank, int step);
/// AllGather recursive doubling: before step k the rank holds blocks [first, first + 2^k).
Range recursiveDoublingHeld(int rank, int step);
/// ReduceScatter recursive halving over n ranks, step k in [0, log2 n): distance n / 2^(k+1);
/// the rank keeps `keep` and sends `send` (both block ranges) to rank ^ distance.
struct HalvingStep {
  int partner;
  Range keep;
  Range send;
};
HalvingStep recursiveHalvingStep(int rank, int n, int step);

// ---- Bruck (any n) ------------------------------------------------------------------------
/// AllGather Bruck, step k: distance d = 2^k; the rank sends its rotated blocks [0, cnt) to
/// rank - d and receives cnt blocks from rank + d into rotated position d, cnt = min(d, n-d).
struct BruckStep {
  int sendPeer;
  int recvPeer;
  int distance;
  int blocks;
};
BruckStep bruckAllGatherStep(int rank, int n, int step);
/// ReduceScatter by reversed Bruck, steps k = 0.. over distances d = floorPow2(n-1) down to
/// 1: with `length` rotated blocks left (n at first), the rank sends rotated blocks
/// [d, length) to rank + d, receives (length - d) blocks from rank - d and reduces them into
/// rotated [0, length - d); then length = d. Rotated block i holds block (rank + i) mod n.
struct ReverseBruckStep {
  int sendPeer;
  int recvPeer;
  int distance;
  int length;  ///< rotated blocks live before this step
  int blocks;  ///< blocks sent and received: length - distance
};
int reverseBruckSteps(int n);
ReverseBruckStep reverseBruckStep(int rank, int n, int step);

// ---- trees and barriers -------------------------------------------------------------------
/// Binomial tree rooted at `root`: parent of `rank` (-1 for the root) and its children in the
/// order they are sent to (largest subtree first).
int binomialParent(int rank, int n, int root);
int binomialChildren(int rank, int n, int root, int* children, int maxChildren);
/// Dissemination barrier step k: send to rank + 2^k, receive from rank - 2^k.
int disseminationSendPeer(int rank, int n, int step);
int disseminationRecvPeer(int rank, int n, int step);

}  // namespace sharc::algo

#include "patterns.hpp"

namespace sharc::algo {

Range evenBlock(size_t count, int parts, int index) {
  const size_t p = static_cast<size_t>(parts);
  const size_t i = static_cast<size_t>(index);
  const size_t base = count / p;
  const size_t extra = count % p;
  return Range{i * base + (i < extra ? i : extra), base + (i < extra ? 1 : 0)};
}

bool isPowerOfTwo(int n) {
  return n > 0 && (n & (n - 1)) == 0;
}

int floorPowerOfTwo(int n) {
  int p = 1;
  while (p <= n / 2) p *= 2;
  return p;
}

int ceilLog2(int n) {
  int k = 0;
  while ((1LL << k) < n) ++k;
  return k;
}

int ringSendPeer(int rank, int n) {
  return mod(rank + 1, n);
}
int ringRecvPeer(int rank, int n) {
  return mod(rank - 1, n);
}

int ringAllGatherSendBlock(int rank, int n, int step) {
  return mod(rank - step, n);
}
int ringAllGatherRecvBlock(int rank, int n, int step) {
  return mod(rank - step - 1, n);
}
int ringReduceScatterSendBlock(int rank, int n, int step) {
  return mod(rank - step - 1, n);
}
int ringReduceScatterRecvBlock(int rank, int n, int step) {
  return mod(rank - step - 2, n);
}

int recursiveDoublingPartner(int rank, int step) {
  return rank ^ (1 << step);
}

Range recursiveDoublingHeld(int rank, int step) {
  const size_t width = size_t{1} << step;
  return Range{static_cast<size_t>(rank) & ~(width - 1), width};
}

HalvingStep recursiveHalvingStep(int rank, int n, int step) {
  // Before step k the rank's range is the aligned group of n / 2^k blocks containing it.
  const size_t group = static_cast<size_t>(n) >> step;
  const size_t half = group / 2;
  const size_t lo = static_cast<size_t>(rank) & ~(group - 1);
  const bool upper = (static_cast<size_t>(rank) & half) != 0;
  HalvingStep s;
  s.partner = rank ^ static_cast<int>(half);
  s.keep = Range{upper ? lo + half : lo, half};
  s.send = Range{upper ? lo : lo + half, half};
  return s;
}

BruckStep bruckAllGatherStep(int rank, int n, int step) {
  const int d = 1 << step;
  return BruckStep{mod(rank - d, n), mod(rank + d, n), d, d < n - d ? d : n - d};
}

int reverseBruckSteps(int n) {
  return n <= 1 ? 0 : ceilLog2(n);
}

ReverseBruckStep reverseBruckStep(int rank, int n, int step) {
  // Distances run from the largest power of two below n down to 1; lengths go n, d0, d1, ...
  const int d0 = floorPowerOfTwo(n - 1);
  const int d = d0 >> step;
  const int length = step == 0 ? n : d * 2;
  return ReverseBruckStep{mod(rank + d, n), mod(rank - d, n), d, length, length - d};
}

int binomialParent(int rank, int n, int root) {
  const int v = mod(rank - root, n);
  if (v == 0) return -1;
  int mask = 1;
  while ((v & mask) == 0) mask <<= 1;
  return mod(v - mask + root, n);
}

int binomialChildren(int rank, int n, int root, int* children, int maxChildren) {
  const int v = mod(rank - root, n);
  // Children are v + m for every power of two m below v's lowest set bit (all bits for 0).
  int top = 1;
  if (v == 0) {
    while (top < n) top <<= 1;
  } else {
    while ((v & top) == 0) top <<= 1;
  }
  int count = 0;
  for (int m = top >> 1; m >= 1; m >>= 1) {
    if (v + m < n && count < maxChildren) children[count++] = mod(v + m + root, n);
  }
  return count;
}

int disseminationSendPeer(int rank, int n, int step) {
  return mod(rank + (1 << step), n);
}
int disseminationRecvPeer(int rank, int n, int step) {
  return mod(rank - (1 << step), n);
}

}  // namespace sharc::algo

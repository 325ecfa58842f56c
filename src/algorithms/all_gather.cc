// AllGather schedules: pipelined ring, recursive doubling (2^k ranks) and Bruck (any n).
#include <algorithm>
#include <vector>

#include "algorithms.hpp"
#include "patterns.hpp"

namespace sharc::algo {

size_t chunksFor(size_t blockBytes, size_t chunkBytes, size_t steps) {
  size_t chunks = chunkBytes == 0 ? 1 : (blockBytes + chunkBytes - 1) / chunkBytes;
  const size_t maxChunks = std::max<size_t>(1, tag::kMaxSlots / std::max<size_t>(1, steps));
  return std::clamp<size_t>(chunks, 1, maxChunks);
}

namespace {

void ringAllGather(Schedule& s, const CollArgs& a) {
  const auto [n, r, elem, block, send, recv] = Frame(s, a);
  if (a.send != recv + r * block) s.copy(recv + r * block, a.send, block);
  if (n == 1) return;
  const size_t chunks = chunksFor(block, a.chunkBytes, n - 1);
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  // prevRecv[c] is the receive that delivered the chunk the next step forwards.
  std::vector<Schedule::OpId> prevRecv(chunks);
  for (int step = 0; step < n - 1; ++step) {
    const int sb = ringAllGatherSendBlock(r, n, step), rb = ringAllGatherRecvBlock(r, n, step);
    for (size_t ch = 0; ch < chunks; ++ch) {
      const Range piece = evenBlock(block, static_cast<int>(chunks), static_cast<int>(ch));
      const auto slot = static_cast<uint32_t>(step * chunks + ch);
      const Schedule::OpId rv = s.recv(prev, slot, recv + rb * block + piece.offset, piece.count);
      // Step 0 sends straight from the send buffer, so it need not wait for the local copy.
      const void* src = step == 0 ? static_cast<const std::byte*>(a.send) + piece.offset
                                  : recv + sb * block + piece.offset;
      const Schedule::OpId sd = s.send(next, slot, src, piece.count);
      if (step > 0) s.after(sd, prevRecv[ch]);
      prevRecv[ch] = rv;
    }
  }
}

void recursiveDoublingAllGather(Schedule& s, const CollArgs& a) {
  const auto [n, r, elem, block, send, recv] = Frame(s, a);
  const Schedule::OpId own = s.copy(recv + r * block, a.send, block);
  std::vector<Schedule::OpId> recvs;
  for (int step = 0; (1 << step) < n; ++step) {
    const int partner = recursiveDoublingPartner(r, step);
    const Range mine = recursiveDoublingHeld(r, step);
    const Range theirs = recursiveDoublingHeld(partner, step);
    const Schedule::OpId sd = s.send(partner, static_cast<uint32_t>(step),
                                     recv + mine.offset * block, mine.count * block);
    s.after(sd, own);
    for (auto rv : recvs) s.after(sd, rv);
    recvs.push_back(s.recv(partner, static_cast<uint32_t>(step), recv + theirs.offset * block,
                           theirs.count * block));
  }
}

void bruckAllGather(Schedule& s, const CollArgs& a) {
  const auto [n, r, elem, block, send, recv] = Frame(s, a);
  // Work in rotated order: work[i] holds block (r + i) mod n.
  std::byte* work = s.scratch(block * n);
  const Schedule::OpId own = s.copy(work, a.send, block);
  std::vector<Schedule::OpId> transfers;
  std::vector<Schedule::OpId> recvs;
  for (int step = 0; (1 << step) < n; ++step) {
    const BruckStep b = bruckAllGatherStep(r, n, step);
    const size_t bytes = static_cast<size_t>(b.blocks) * block;
    const Schedule::OpId sd = s.send(b.sendPeer, static_cast<uint32_t>(step), work, bytes);
    s.after(sd, own);
    for (auto rv : recvs) s.after(sd, rv);
    const Schedule::OpId rv =
        s.recv(b.recvPeer, static_cast<uint32_t>(step), work + b.distance * block, bytes);
    recvs.push_back(rv);
    transfers.push_back(sd);
    transfers.push_back(rv);
  }
  // Un-rotate: work[0 .. n-r) -> recv[r ..], work[n-r .. n) -> recv[0 .. r).
  const size_t head = static_cast<size_t>(n - r) * block;
  const Schedule::OpId c1 = s.copy(recv + r * block, work, head);
  const Schedule::OpId c2 = s.copy(recv, work + head, static_cast<size_t>(r) * block);
  s.after(c1, own);
  s.after(c2, own);
  for (auto t : transfers) {
    s.after(c1, t);  // sends may still read the (possibly aliased) send buffer
    s.after(c2, t);
  }
}

// Every rank sends its block to every other rank at once: no chain of dependent steps, which
// suits shared memory (single-copy transfers, several ranks per core) and small worlds.
void directAllGather(Schedule& s, const CollArgs& a) {
  const auto [n, r, elem, block, send, recv] = Frame(s, a);
  const size_t chunks = chunksFor(block, a.chunkBytes, 1);
  for (int k = 1; k < n; ++k) {
    // Staggered peers: at offset k, receive from r - k and send to r + k.
    const int from = mod(r - k, n), to = mod(r + k, n);
    for (size_t ch = 0; ch < chunks; ++ch) {
      const Range p = evenBlock(block, static_cast<int>(chunks), static_cast<int>(ch));
      const auto slot = static_cast<uint32_t>(ch);
      s.recv(from, slot, recv + from * block + p.offset, p.count);
      s.send(to, slot, static_cast<const std::byte*>(a.send) + p.offset, p.count);
    }
  }
  // Out of place the local copy overlaps the transfers (it is posted after them, so it runs
  // while peers copy); in place there is nothing to copy.
  if (a.send != recv + r * block) s.copy(recv + r * block, a.send, block);
}

}  // namespace

void buildAllGather(Schedule& s, Algorithm a, const CollArgs& args) {
  if (args.count == 0) return;
  switch (a) {
    case Algorithm::RecursiveDoubling:
      if (isPowerOfTwo(s.context().size)) return recursiveDoublingAllGather(s, args);
      return bruckAllGather(s, args);
    case Algorithm::Bruck: return bruckAllGather(s, args);
    case Algorithm::Direct: return directAllGather(s, args);
    case Algorithm::DirectRead:  // AllGather's single-copy form writes (see direct_read.cc)
    case Algorithm::DirectWrite:
      if (s.context().pids) return buildDirectWriteAllGather(s, args);
      return directAllGather(s, args);
    case Algorithm::HierarchicalBruck:
      if (buildHierarchicalBruckAllGather(s, args)) return;
      [[fallthrough]];
    case Algorithm::Hierarchical:
      if (buildHierarchicalAllGather(s, args)) return;
      return ringAllGather(s, args);
    default: return ringAllGather(s, args);
  }
}

}  // namespace sharc::algo

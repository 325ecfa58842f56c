// ReduceScatter schedules: pipelined ring, recursive halving (2^k ranks) and reversed Bruck.
#include <vector>

#include "algorithms.hpp"
#include "patterns.hpp"

namespace sharc::algo {
namespace {

void ringReduceScatter(Schedule& s, const CollArgs& a) {
  const auto [n, r, elem, block, send, recv] = Frame(s, a);
  if (n == 1) {
    const Schedule::OpId cp = s.copy(recv, send, block);
    s.after(s.divide(recv, a.count), cp);  // Avg over one rank divides by 1
    return;
  }
  const size_t chunks = chunksFor(block, a.chunkBytes, n - 1);
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  // Partials alternate between two scratch blocks: step s receives into tmp[s % 2].
  std::byte* tmp[2] = {s.scratch(block), n > 2 ? s.scratch(block) : nullptr};
  std::vector<Schedule::OpId> lastReduce(chunks), lastSend(chunks), prevSend(chunks);
  for (int step = 0; step < n - 1; ++step) {
    const int sb = ringReduceScatterSendBlock(r, n, step);
    const int rb = ringReduceScatterRecvBlock(r, n, step);
    const bool last = step == n - 2;
    for (size_t ch = 0; ch < chunks; ++ch) {
      const Range piece = evenBlock(a.count, static_cast<int>(chunks), static_cast<int>(ch));
      const size_t off = piece.offset * elem, bytes = piece.count * elem;
      const auto slot = static_cast<uint32_t>(step * chunks + ch);
      const void* src = step == 0 ? send + sb * block + off : tmp[(step - 1) % 2] + off;
      const Schedule::OpId sd = s.send(next, slot, src, bytes);
      if (step > 0) s.after(sd, lastReduce[ch]);
      std::byte* into = tmp[step % 2] + off;
      const Schedule::OpId rv = s.recv(prev, slot, into, bytes);
      // tmp[step % 2] was last read by the send of step - 1.
      if (step >= 2) s.after(rv, prevSend[ch]);
      void* dst = last ? recv + off : into;
      const Schedule::OpId rd = s.reduce(dst, into, send + rb * block + off, piece.count);
      s.after(rd, rv);
      if (last) s.after(s.divide(dst, piece.count), rd);
      prevSend[ch] = sd;
      lastReduce[ch] = rd;
    }
  }
}

void recursiveHalvingReduceScatter(Schedule& s, const CollArgs& a) {
  const auto [n, r, elem, block, send, recv] = Frame(s, a);
  // work holds the running partials (indexed like the send buffer); each step receives into
  // its own region of tmp so every receive can be posted at once.
  std::byte* work = s.scratch(block * n);
  std::byte* tmp = s.scratch(block * n);
  size_t tmpOffset = 0;
  Schedule::OpId prevReduce = 0;
  const int steps = ceilLog2(n);
  for (int step = 0; step < steps; ++step) {
    const HalvingStep h = recursiveHalvingStep(r, n, step);
    const std::byte* from = step == 0 ? send : work;
    const Schedule::OpId sd = s.send(h.partner, static_cast<uint32_t>(step),
                                     from + h.send.offset * block, h.send.count * block);
    if (step > 0) s.after(sd, prevReduce);
    std::byte* into = tmp + tmpOffset;
    tmpOffset += h.keep.count * block;
    const Schedule::OpId rv =
        s.recv(h.partner, static_cast<uint32_t>(step), into, h.keep.count * block);
    const bool last = step == steps - 1;
    void* dst = last ? static_cast<void*>(recv) : work + h.keep.offset * block;
    const Schedule::OpId rd =
        s.reduce(dst, from + h.keep.offset * block, into, h.keep.count * a.count);
    s.after(rd, rv);
    if (step > 0) s.after(rd, prevReduce);
    // In place, recv aliases send block r: earlier sends must be done reading it.
    if (last) s.after(rd, sd);
    prevReduce = rd;
  }
  s.after(s.divide(recv, a.count), prevReduce);
}

void reverseBruckReduceScatter(Schedule& s, const CollArgs& a) {
  const auto [n, r, elem, block, send, recv] = Frame(s, a);
  // Rotated copy: work[i] = send block (r + i) mod n.
  std::byte* work = s.scratch(block * n);
  const size_t head = static_cast<size_t>(n - r) * block;
  const Schedule::OpId c1 = s.copy(work, send + r * block, head);
  const Schedule::OpId c2 = s.copy(work + head, send, static_cast<size_t>(r) * block);
  std::byte* tmp = s.scratch(block * n);
  size_t tmpOffset = 0;
  Schedule::OpId prevReduce = c2;
  const int steps = reverseBruckSteps(n);
  for (int step = 0; step < steps; ++step) {
    const ReverseBruckStep b = reverseBruckStep(r, n, step);
    const size_t bytes = static_cast<size_t>(b.blocks) * block;
    const Schedule::OpId sd =
        s.send(b.sendPeer, static_cast<uint32_t>(step), work + b.distance * block, bytes);
    s.after(sd, c1);
    s.after(sd, prevReduce);
    std::byte* into = tmp + tmpOffset;
    tmpOffset += bytes;
    const Schedule::OpId rv = s.recv(b.recvPeer, static_cast<uint32_t>(step), into, bytes);
    const bool last = step == steps - 1;
    void* dst = last ? static_cast<void*>(recv) : work;
    const Schedule::OpId rd = s.reduce(dst, work, into, static_cast<size_t>(b.blocks) * a.count);
    s.after(rd, rv);
    s.after(rd, prevReduce);
    s.after(rd, c1);
    prevReduce = rd;
  }
  if (steps == 0) prevReduce = s.copy(recv, work, block);
  s.after(prevReduce, c1);
  s.after(s.divide(recv, a.count), prevReduce);
}

}  // namespace

void buildReduceScatter(Schedule& s, Algorithm a, const CollArgs& args) {
  if (args.count == 0) return;
  if (s.context().size == 1) return ringReduceScatter(s, args);  // a copy (and Avg's divide)
  switch (a) {
    case Algorithm::RecursiveDoubling:
      if (isPowerOfTwo(s.context().size)) return recursiveHalvingReduceScatter(s, args);
      return reverseBruckReduceScatter(s, args);
    case Algorithm::Bruck: return reverseBruckReduceScatter(s, args);
    case Algorithm::DirectRead:
      if (s.context().pids) return buildDirectReadReduceScatter(s, args);
      return ringReduceScatter(s, args);
    case Algorithm::HierarchicalBruck:
      if (buildHierarchicalBruckReduceScatter(s, args)) return;
      [[fallthrough]];
    case Algorithm::Hierarchical:
      if (buildHierarchicalReduceScatter(s, args)) return;
      return ringReduceScatter(s, args);
    default: return ringReduceScatter(s, args);
  }
}

}  // namespace sharc::algo

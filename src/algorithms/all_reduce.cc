// AllReduce schedules: ring ReduceScatter + ring AllGather for large messages, recursive
// doubling (with a fold of the ranks beyond the largest power of two) for small ones.
#include <vector>

#include "algorithms.hpp"
#include "patterns.hpp"

namespace sharc::algo {
namespace {

void ringAllReduce(Schedule& s, const CollArgs& a) {
  const auto [n, r, elem, block, send, recv] = Frame(s, a);
  if (n == 1) {
    const Schedule::OpId cp = s.copy(recv, send, a.count * elem);
    s.after(s.divide(recv, a.count), cp);
    return;
  }
  // Blocks may differ by one element; every rank cuts every block into the same chunk count.
  const Range largest = evenBlock(a.count, n, 0);
  const size_t chunks = chunksFor(largest.count * elem, a.chunkBytes, 2 * (n - 1));
  // Captured by copy: clang 14 cannot capture structured bindings by reference.
  auto piece = [&a, chunks, n = n, elem = elem](int blk, size_t ch) {
    const Range b = evenBlock(a.count, n, blk);
    const Range p = evenBlock(b.count, static_cast<int>(chunks), static_cast<int>(ch));
    return Range{(b.offset + p.offset) * elem, p.count};  // byte offset, element count
  };
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  // Each chunk index owns a fixed slice of the scratch blocks: blocks differ in size, so
  // their chunks start at different offsets, and slices must not overlap across chunks.
  const size_t stride = (largest.count + chunks - 1) / chunks * elem;
  std::byte* tmp[2] = {s.scratch(stride * chunks), n > 2 ? s.scratch(stride * chunks) : nullptr};
  // reader[blk][ch]: the reduce-scatter operation that last reads this rank's own copy of the
  // chunk; with send == recv, the all-gather must not overwrite it earlier.
  std::vector<std::vector<Schedule::OpId>> reader(n, std::vector<Schedule::OpId>(chunks));
  std::vector<Schedule::OpId> lastReduce(chunks), prevSend(chunks), owned(chunks);
  for (int step = 0; step < n - 1; ++step) {
    const int sb = ringReduceScatterSendBlock(r, n, step);
    const int rb = ringReduceScatterRecvBlock(r, n, step);
    const bool last = step == n - 2;
    for (size_t ch = 0; ch < chunks; ++ch) {
      const Range ps = piece(sb, ch), pr = piece(rb, ch);
      const auto slot = static_cast<uint32_t>(step * chunks + ch);
      const size_t tmpOff = ch * stride;
      const void* src = step == 0 ? send + ps.offset : tmp[(step - 1) % 2] + tmpOff;
      const Schedule::OpId sd = s.send(next, slot, src, ps.count * elem);
      if (step > 0) s.after(sd, lastReduce[ch]);
      if (step == 0) reader[sb][ch] = sd;
      std::byte* into = tmp[step % 2] + tmpOff;
      const Schedule::OpId rv = s.recv(prev, slot, into, pr.count * elem);
      if (step >= 2) s.after(rv, prevSend[ch]);
      void* dst = last ? recv + pr.offset : static_cast<void*>(into);
      const Schedule::OpId rd = s.reduce(dst, into, send + pr.offset, pr.count);
      s.after(rd, rv);
      reader[rb][ch] = rd;
      if (last) {
        owned[ch] = s.divide(dst, pr.count);
        s.after(owned[ch], rd);
      }
      prevSend[ch] = sd;
      lastReduce[ch] = rd;
    }
  }
  // All-gather of the reduced blocks, slots continuing after the reduce-scatter's.
  const auto base = static_cast<uint32_t>((n - 1) * chunks);
  std::vector<Schedule::OpId> prevRecv(chunks);
  for (int step = 0; step < n - 1; ++step) {
    const int sb = ringAllGatherSendBlock(r, n, step), rb = ringAllGatherRecvBlock(r, n, step);
    for (size_t ch = 0; ch < chunks; ++ch) {
      const Range ps = piece(sb, ch), pr = piece(rb, ch);
      const auto slot = base + static_cast<uint32_t>(step * chunks + ch);
      const Schedule::OpId rv = s.recv(prev, slot, recv + pr.offset, pr.count * elem);
      s.after(rv, reader[rb][ch]);
      const Schedule::OpId sd = s.send(next, slot, recv + ps.offset, ps.count * elem);
      s.after(sd, step == 0 ? owned[ch] : prevRecv[ch]);
      prevRecv[ch] = rv;
    }
  }
}

void recursiveDoublingAllReduce(Schedule& s, const CollArgs& a) {
  const auto [n, r, elem, block, send, recv] = Frame(s, a);
  const size_t bytes = block;
  const int p = floorPowerOfTwo(n);
  const int extra = n - p;
  Schedule::OpId ready = s.copy(recv, a.send, bytes);
  uint32_t slot = 0;
  const uint32_t foldSlot = slot++;
  if (r >= p) {
    // Folded rank: hand the data to r - p, get the result back at the end.
    const Schedule::OpId sd = s.send(r - p, foldSlot, recv, bytes);
    s.after(sd, ready);
    const Schedule::OpId rv = s.recv(r - p, 1000, recv, bytes);
    s.after(rv, sd);
    return;
  }
  if (r < extra) {
    std::byte* tmp = s.scratch(bytes);
    const Schedule::OpId rv = s.recv(r + p, foldSlot, tmp, bytes);
    const Schedule::OpId rd = s.reduce(recv, recv, tmp, a.count);
    s.after(rd, rv);
    s.after(rd, ready);
    ready = rd;
  }
  std::byte* tmp = s.scratch(bytes * static_cast<size_t>(ceilLog2(p) + 1));
  for (int step = 0; (1 << step) < p; ++step) {
    const int partner = recursiveDoublingPartner(r, step);
    const Schedule::OpId sd = s.send(partner, slot, recv, bytes);
    s.after(sd, ready);
    std::byte* into = tmp + static_cast<size_t>(step) * bytes;
    const Schedule::OpId rv = s.recv(partner, slot, into, bytes);
    const Schedule::OpId rd = s.reduce(recv, recv, into, a.count);
    s.after(rd, rv);
    s.after(rd, sd);  // the send reads recv, which the reduce overwrites
    s.after(rd, ready);
    ready = rd;
    ++slot;
  }
  const Schedule::OpId dv = s.divide(recv, a.count);
  s.after(dv, ready);
  if (r < extra) s.after(s.send(r + p, 1000, recv, bytes), dv);
}

}  // namespace

void buildAllReduce(Schedule& s, Algorithm a, const CollArgs& args) {
  if (args.count == 0) return;
  if (a == Algorithm::DirectRead && s.context().pids && s.context().size > 1)
    return buildDirectReadAllReduce(s, args);
  if (a == Algorithm::RecursiveDoubling || a == Algorithm::Bruck)
    return recursiveDoublingAllReduce(s, args);
  if ((a == Algorithm::Hierarchical || a == Algorithm::HierarchicalBruck) &&
      buildHierarchicalAllReduce(s, args))
    return;
  return ringAllReduce(s, args);
}

}  // namespace sharc::algo

// Two-level (hierarchical, rail-aligned) AllGather, ReduceScatter and AllReduce for jobs whose
// nodes hold several ranks each; hierarchical_pattern.hpp has the proxy rule and rank math.
//
// AllGather: every rank sends its block, chunk by chunk, straight to its proxy on every other
// node, into the proxy's receive buffer at the block's place; every rank forwards each chunk it
// holds (its own, and each one it received as proxy) to every peer of its node as soon as it
// has it, so the intra-node phase overlaps the inter-node one. The inter-node part is direct
// rather than a ring along the rail: both carry the same bytes on every NIC (optimal for the
// node links), direct works unchanged for nodes of different sizes and has no chain of
// dependent steps (N-1 hops of a ring add latency and store-and-forward per chunk).
// ReduceScatter mirrors it: the ranks of a node send their contributions to a foreign block to
// its proxy there, which reduces them with its own and sends the node's partial to the block's
// owner; the owner reduces its node peers' contributions and the partials of the other nodes.
// Reductions run in a fixed order (own, node peers by rank, other nodes by index), whatever
// the order of arrival, so results are deterministic; Avg divides once at the end.
// AllReduce is that ReduceScatter over near-equal blocks of the vector (evenBlock) followed by
// that AllGather, the second phase's slots after the first's.
#include <vector>

#include "algorithms.hpp"
#include "hierarchical_pattern.hpp"
#include "patterns.hpp"

namespace sharc::algo {
namespace {

using OpId = Schedule::OpId;

// Geometry of one call shared by both phases: who is where, which blocks each rank of this
// node holds, and how blocks are cut into chunks (the same on every rank).
struct Plan {
  Plan(const Schedule& s, size_t count, bool uneven, size_t chunkBytes, int phases)
      : map(*s.context().nodes),
        n(s.context().size),
        r(s.context().rank),
        node(map.nodeOf[static_cast<size_t>(r)]),
        elem(dataTypeSize(s.context().type)),
        count(count),
        uneven(uneven),
        rotate(s.context().hierRotate ? 1 : 0),
        maxHeld(hierMaxHeld(map)) {
    for (int t : map.ranksOf[static_cast<size_t>(node)]) {
      heldOf.push_back(hierHeldBlocks(map, t, rotate));
      if (t != r) peers.push_back(t);
    }
    stride = (uneven ? evenBlock(count, n, 0).count : count) * elem;
    chunks = chunksFor(stride, chunkBytes, static_cast<size_t>(phases * maxHeld));
  }

  /// Element range of block q in the whole buffer.
  Range block(int q) const {
    return uneven ? evenBlock(count, n, q) : Range{static_cast<size_t>(q) * count, count};
  }
  /// Chunk ch of block q: element range relative to the block's start.
  Range piece(int q, size_t ch) const {
    return evenBlock(block(q).count, static_cast<int>(chunks), static_cast<int>(ch));
  }
  /// Byte offset of chunk ch of block q in the whole buffer.
  size_t at(int q, size_t ch) const { return (block(q).offset + piece(q, ch).offset) * elem; }
  const std::vector<int>& held(int t) const {
    return heldOf[static_cast<size_t>(map.localRank[static_cast<size_t>(t)])];
  }
  /// Slot of chunk ch of block q between `holder` and one of its node peers (either way).
  uint32_t intraSlot(uint32_t base, int holder, int q, size_t ch) const {
    return base +
           static_cast<uint32_t>(static_cast<size_t>(hierHeldIndex(held(holder), q)) * chunks + ch);
  }
  /// Slot of chunk ch between ranks of two nodes (one block per such pair and phase).
  uint32_t interSlot(uint32_t base, size_t ch) const { return base + static_cast<uint32_t>(ch); }
  /// Slots one phase uses per pair.
  uint32_t phaseSlots() const { return static_cast<uint32_t>(maxHeld * chunks); }

  const NodeMap& map;
  int n, r, node;
  size_t elem, count;
  bool uneven;  // AllReduce: block q is evenBlock(count, n, q) of one vector
  int rotate;   // hierarchical_pattern.hpp's rotated proxy rule
  int maxHeld;
  std::vector<std::vector<int>> heldOf;  // by local index: hierHeldBlocks of each node rank
  std::vector<int> peers;                // the other ranks of this node, ascending
  size_t stride = 0;                     // bytes of the largest block
  size_t chunks = 1;
};

// ReduceScatter phase: reduces every rank's contribution to block r into `out` (r's block).
// Returns the operation that finishes each chunk of `out`; readers[q][ch] (if given) gets the
// operation that last reads chunk ch of block q of `send`.
std::vector<OpId> reducePhase(Schedule& s, const Plan& p, const std::byte* send, std::byte* out,
                              uint32_t base, std::vector<std::vector<OpId>>* readers) {
  const int r = p.r;
  const std::vector<int>& mine = p.held(r);
  const size_t local = p.peers.size(), remote = static_cast<size_t>(p.map.nodes() - 1);
  // Receive buffers, one per (held block, node peer) and one per source of r's own block; the
  // first buffer of each held block accumulates the node's partial.
  std::byte* proxyBuf = s.scratch(p.stride * (mine.size() * local + local + remote));
  std::byte* ownBuf = proxyBuf + p.stride * mine.size() * local;
  auto noteReader = [&](int q, size_t ch, OpId op) {
    if (readers) (*readers)[static_cast<size_t>(q)][ch] = op;
  };
  std::vector<OpId> finals(p.chunks);
  for (size_t ch = 0; ch < p.chunks; ++ch) {
    // Contributions to the holders on this node: foreign blocks first (their proxies feed the
    // node links), then the node peers' own blocks.
    for (const bool foreign : {true, false}) {
      for (int q = 0; q < p.n; ++q) {
        if (q == r || (p.map.nodeOf[static_cast<size_t>(q)] != p.node) != foreign) continue;
        const int holder = foreign ? hierProxy(p.map, p.node, q, p.rotate) : q;
        if (holder == r) continue;
        noteReader(q, ch,
                   s.send(holder, p.intraSlot(base, holder, q, ch), send + p.at(q, ch),
                          p.piece(q, ch).count * p.elem));
      }
    }
    // As proxy: the node's partial of each foreign block this rank holds, to its owner.
    for (size_t j = 0; j < mine.size(); ++j) {
      const int q = mine[j];
      if (q == r) continue;
      const Range pc = p.piece(q, ch);
      const size_t bytes = pc.count * p.elem;
      const std::byte* own = send + p.at(q, ch);
      if (local == 0) {  // alone on its node: its contribution is the node's
        noteReader(q, ch, s.send(q, p.interSlot(base, ch), own, bytes));
        continue;
      }
      std::byte* acc = proxyBuf + p.stride * j * local + pc.offset * p.elem;
      OpId prev = 0;
      for (size_t u = 0; u < local; ++u) {
        std::byte* into = proxyBuf + p.stride * (j * local + u) + pc.offset * p.elem;
        const OpId rv = s.recv(p.peers[u], p.intraSlot(base, r, q, ch), into, bytes);
        const OpId rd = s.reduce(acc, u == 0 ? own : acc, into, pc.count);
        s.after(rd, rv);
        if (u == 0)
          noteReader(q, ch, rd);
        else
          s.after(rd, prev);
        prev = rd;
      }
      s.after(s.send(q, p.interSlot(base, ch), acc, bytes), prev);
    }
    // As owner: the node peers' contributions, then the partials of the other nodes.
    const Range pc = p.piece(r, ch);
    std::byte* dst = out + pc.offset * p.elem;
    OpId prev = 0;
    for (size_t i = 0; i < local + remote; ++i) {
      std::byte* into = ownBuf + p.stride * i + pc.offset * p.elem;
      OpId rv;
      if (i < local) {
        rv = s.recv(p.peers[i], p.intraSlot(base, r, r, ch), into, pc.count * p.elem);
      } else {
        int m = static_cast<int>(i - local);
        if (m >= p.node) ++m;  // skip this node
        rv = s.recv(hierProxy(p.map, m, r, p.rotate), p.interSlot(base, ch), into,
                    pc.count * p.elem);
      }
      // In place, dst is this rank's own contribution: the first reduction reads it there.
      const OpId rd = s.reduce(dst, i == 0 ? send + p.at(r, ch) : dst, into, pc.count);
      s.after(rd, rv);
      if (i > 0) s.after(rd, prev);
      prev = rd;
    }
    finals[ch] = s.divide(dst, pc.count);
    s.after(finals[ch], prev);
  }
  return finals;
}

// AllGather phase: `own` is this rank's block (its chunks final after ownReady[ch], if given),
// `recv` the whole result; recv's chunk ch of block q is written only after readers[q][ch].
void gatherPhase(Schedule& s, const Plan& p, const std::byte* own, std::byte* recv, uint32_t base,
                 const std::vector<OpId>* ownReady, const std::vector<std::vector<OpId>>* readers) {
  const int r = p.r;
  const std::vector<int>& mine = p.held(r);
  std::vector<OpId> arrived(mine.size());
  auto notBefore = [&](OpId op, int q, size_t ch) {
    if (readers) s.after(op, (*readers)[static_cast<size_t>(q)][ch]);
  };
  for (size_t ch = 0; ch < p.chunks; ++ch) {
    // Receives first: posted before the data comes. From other nodes, the blocks r proxies.
    for (size_t j = 0; j < mine.size(); ++j) {
      const int q = mine[j];
      if (q == r) continue;
      arrived[j] =
          s.recv(q, p.interSlot(base, ch), recv + p.at(q, ch), p.piece(q, ch).count * p.elem);
      notBefore(arrived[j], q, ch);
    }
    // From node peers, every other block.
    for (int q = 0; q < p.n; ++q) {
      const int from = hierIntraSource(p.map, r, q, p.rotate);
      if (from < 0) continue;
      const OpId rv = s.recv(from, p.intraSlot(base, from, q, ch), recv + p.at(q, ch),
                             p.piece(q, ch).count * p.elem);
      notBefore(rv, q, ch);
    }
    // Own chunk: to its proxy on every other node, then to every node peer.
    const Range pc = p.piece(r, ch);
    const std::byte* src = own + pc.offset * p.elem;
    auto sendOwn = [&](int to, uint32_t slot) {
      const OpId sd = s.send(to, slot, src, pc.count * p.elem);
      if (ownReady) s.after(sd, (*ownReady)[ch]);
    };
    for (int m = 0; m < p.map.nodes(); ++m)
      if (m != p.node) sendOwn(hierProxy(p.map, m, r, p.rotate), p.interSlot(base, ch));
    for (int t : p.peers) sendOwn(t, p.intraSlot(base, r, r, ch));
    // Chunks received as proxy, forwarded as soon as they are in.
    for (size_t j = 0; j < mine.size(); ++j) {
      const int q = mine[j];
      if (q == r) continue;
      for (int t : p.peers)
        s.after(s.send(t, p.intraSlot(base, r, q, ch), recv + p.at(q, ch),
                       p.piece(q, ch).count * p.elem),
                arrived[j]);
    }
  }
  // Out of place, the local copy runs while the transfers are in flight.
  std::byte* ownSlot = recv + p.block(r).offset * p.elem;
  if (own != ownSlot) s.copy(ownSlot, own, p.block(r).count * p.elem);
}

// Two levels apply, and `phases` phases of slots fit the tag.
bool applies(const Schedule& s, int phases) {
  const NodeMap* map = s.context().nodes;
  return map != nullptr && map->size() == s.context().size && hierApplies(*map) &&
         static_cast<uint32_t>(phases * hierMaxHeld(*map)) <= tag::kMaxSlots;
}

}  // namespace

bool buildHierarchicalAllGather(Schedule& s, const CollArgs& a) {
  if (!applies(s, 1)) return false;
  if (a.count == 0) return true;
  const Plan p(s, a.count, false, a.chunkBytes, 1);
  gatherPhase(s, p, static_cast<const std::byte*>(a.send), static_cast<std::byte*>(a.recv), 0,
              nullptr, nullptr);
  return true;
}

bool buildHierarchicalReduceScatter(Schedule& s, const CollArgs& a) {
  if (!applies(s, 1)) return false;
  if (a.count == 0) return true;
  const Plan p(s, a.count, false, a.chunkBytes, 1);
  reducePhase(s, p, static_cast<const std::byte*>(a.send), static_cast<std::byte*>(a.recv), 0,
              nullptr);
  return true;
}

bool buildHierarchicalAllReduce(Schedule& s, const CollArgs& a) {
  if (!applies(s, 2)) return false;
  if (a.count == 0) return true;
  const Plan p(s, a.count, true, a.chunkBytes, 2);
  const auto* send = static_cast<const std::byte*>(a.send);
  auto* recv = static_cast<std::byte*>(a.recv);
  std::byte* mine = recv + p.block(p.r).offset * p.elem;
  // In place, the gather must not overwrite a chunk of the input before the reduce-scatter has
  // read it; out of place the phases touch disjoint memory.
  const bool inPlace = send == recv;
  std::vector<std::vector<OpId>> readers(static_cast<size_t>(p.n), std::vector<OpId>(p.chunks));
  const std::vector<OpId> finals = reducePhase(s, p, send, mine, 0, inPlace ? &readers : nullptr);
  gatherPhase(s, p, mine, recv, p.phaseSlots(), &finals, inPlace ? &readers : nullptr);
  return true;
}

}  // namespace sharc::algo

// Two-level AllGather and ReduceScatter for many nodes: across nodes a Bruck exchange per
// rail (each rank with the ranks of its local index on the other nodes, over its own NICs),
// within each node a direct exchange, pipelined with the steps.
//
// The direct exchange across nodes of hierarchical.cc gives each rank N-1 fabric peers and
// messages of one block: at hundreds of nodes the blocks are a few KiB and the posting window
// holds a fraction of the peers. Here a rank talks to ceil(log2 N) nodes, and step k moves
// min(2^k, N-2^k) blocks in one contiguous message (cut into chunks), so the messages grow
// with the step while every node still takes in (N-1)/N of the data once (the node links'
// optimum). The price is a chain of log2 N dependent steps.
//
// AllGather: rank (node a, local index i) keeps work[j] = the block of rail i on node a+j.
// Bruck step k sends work[0, cnt) to node a-2^k and receives work[2^k, 2^k+cnt) from node
// a+2^k (patterns.hpp bruckAllGatherStep over node indices). Each piece that arrives is
// copied to its place in the result and sent to every node peer, which put it at its place.
// ReduceScatter mirrors it: the node peers first send rank (a, i) their contributions to the
// blocks of rail i (where pieces hold several blocks, a run of positions per message, gathered
// with strided copies), which it reduces into acc[j] = node a's partial of the block of rail i
// on node a+j (own first, then peers by local index); then reversed Bruck (reverseBruckStep)
// sends acc[d, length) to node a+d, receives into a fresh buffer from node a-d, reduces into
// acc[0, length-d). acc[0] ends as the rank's block. Reductions run in a fixed order, so the
// result does not depend on arrival order.
#include <algorithm>
#include <utility>
#include <vector>

#include "algorithms.hpp"
#include "hierarchical_pattern.hpp"
#include "patterns.hpp"
#include "tag.hpp"

namespace sharc::algo {
namespace {

using OpId = Schedule::OpId;

// A received piece of the rotated buffer: bytes [begin, end) of it, done after `op`.
struct Piece {
  size_t begin, end;
  OpId op;
};

// Geometry shared by every rank of the call: node-rotated positions, pieces and slots.
struct Rails {
  Rails(const Schedule& s, size_t count, size_t chunkBytes)
      : map(*s.context().nodes),
        n(s.context().size),
        r(s.context().rank),
        node(map.nodeOf[static_cast<size_t>(r)]),
        N(map.nodes()),
        rail(map.localRank[static_cast<size_t>(r)]),
        elem(dataTypeSize(s.context().type)),
        count(count),
        block(count * elem),
        steps(ceilLog2(N)) {
    for (int t : map.ranksOf[static_cast<size_t>(node)])
      if (t != r) peers.push_back(t);
    // Pieces of at least chunkBytes, whole elements, and few enough that every message
    // between two ranks of a node has its own slot (at most one per position and piece).
    const size_t most = tag::kMaxSlots / 4;
    const size_t total = static_cast<size_t>(N) * count;  // elements of the rotated buffer
    pieceElems = std::max<size_t>(1, std::max(chunkBytes / elem, total / most + 1));
  }

  /// The rank of rail `lane` on the node `j` positions after node `from`.
  int rankAt(int from, int j, int lane) const {
    return map.ranksOf[static_cast<size_t>(mod(from + j, N))][static_cast<size_t>(lane)];
  }
  /// Element ranges [begin, end) of the pieces of one step's message of `blocks` blocks.
  std::vector<Range> pieces(int blocks) const { return pieces(0, blocks); }
  /// The pieces of blocks [first, last) of a message, cut from its block `first` on.
  std::vector<Range> pieces(int first, int last) const {
    const size_t begin = static_cast<size_t>(first) * count,
                 end = static_cast<size_t>(last) * count;
    std::vector<Range> out;
    for (size_t at = begin; at < end; at += pieceElems)
      out.push_back({at, std::min(pieceElems, end - at)});
    return out;
  }

  const NodeMap& map;
  int n, r, node, N, rail;
  size_t elem, count, block;
  int steps;
  size_t pieceElems = 1;
  std::vector<int> peers;  // the other ranks of this node, ascending
};

// Two levels with a Bruck across nodes apply: several nodes of the same size, several ranks
// on each, and a tag slot for every message between two node peers.
bool applies(const Schedule& s, size_t count) {
  const NodeMap* map = s.context().nodes;
  if (map == nullptr || map->size() != s.context().size || !hierApplies(*map) || !map->uniform())
    return false;
  // positions plus pieces (Rails caps the pieces at kMaxSlots / 4)
  return count > 0 && static_cast<size_t>(map->nodes()) < tag::kMaxSlots / 4;
}

// Pieces of a buffer of blocks, found by the blocks they overlap: the builders ask for the
// pieces a range overlaps once per piece they make, and a scan of all of them made building
// quadratic in the pieces (thousands per rank at 2 GiB).
class PieceIndex {
 public:
  PieceIndex(size_t blocks, size_t block) : at_(blocks), block_(block) {}

  void add(const Piece& p) {
    const auto id = static_cast<uint32_t>(pieces_.size());
    pieces_.push_back(p);
    for (size_t j = p.begin / block_; j <= (p.end - 1) / block_; ++j) at_[j].push_back(id);
  }
  /// The pieces that overlap bytes [begin, end), in the order they were added.
  const std::vector<Piece>& overlapping(size_t begin, size_t end) {
    ids_.clear();
    for (size_t j = begin / block_; j <= (end - 1) / block_; ++j)
      for (uint32_t id : at_[j])
        if (pieces_[id].begin < end && begin < pieces_[id].end) ids_.push_back(id);
    std::sort(ids_.begin(), ids_.end());
    ids_.erase(std::unique(ids_.begin(), ids_.end()), ids_.end());
    found_.clear();
    for (uint32_t id : ids_) found_.push_back(pieces_[id]);
    return found_;
  }
  /// Depends `op` on every piece that overlaps bytes [begin, end).
  void after(Schedule& s, OpId op, size_t begin, size_t end) {
    for (const Piece& p : overlapping(begin, end)) s.after(op, p.op);
  }

 private:
  std::vector<Piece> pieces_;
  std::vector<std::vector<uint32_t>> at_;  // per block: the pieces that overlap it
  size_t block_;
  std::vector<uint32_t> ids_;
  std::vector<Piece> found_;
};

// The blocks of a reversed Bruck step's message in the order they go (reverseBruckOrder).
std::vector<std::pair<int, int>> stepOrder(const ReverseBruckStep& b, const Rails& g) {
  return reverseBruckOrder(b.blocks, b.distance, static_cast<double>(g.block));
}

}  // namespace

bool buildHierarchicalBruckAllGather(Schedule& s, const CollArgs& a) {
  if (!applies(s, a.count)) return false;
  const Rails g(s, a.count, a.chunkBytes);
  const auto* send = static_cast<const std::byte*>(a.send);
  auto* recv = static_cast<std::byte*>(a.recv);
  std::byte* work = s.scratch(g.block * static_cast<size_t>(g.N));
  const OpId own = s.copy(work, send, g.block);
  PieceIndex got(static_cast<size_t>(g.N), g.block);  // received pieces of work, in bytes
  uint32_t localSlot = 0;  // messages between node peers, numbered alike on every rank
  // Where pieces hold several blocks, each goes to a node peer whole, into the part of
  // `lanes` kept for this rank's rail, and the peer puts its blocks in place with strided
  // copies: a message per piece rather than per block (the rank's posts bound it at
  // hundreds of nodes). Only while that scratch stays small; every rank decides alike.
  const size_t local = g.peers.size();
  const bool wholePieces =
      bruckWholePieces(static_cast<double>(g.pieceElems * g.elem), static_cast<double>(g.block),
                       static_cast<double>(local), g.N);
  std::byte* lanes = wholePieces ? s.scratch(local * static_cast<size_t>(g.N) * g.block) : nullptr;
  // Blocks [begin, end) of a rotated buffer (`from`, rail `lane`'s) to their places in the
  // result: runs of whole blocks whose places are evenly spaced in one strided copy.
  const auto place = [&](int lane, const std::byte* from, size_t begin, size_t end, OpId ready) {
    for (size_t at = begin; at < end;) {
      const size_t j = at / g.block, off = at % g.block;
      const size_t len = std::min(end, (j + 1) * g.block) - at;
      const int jj = static_cast<int>(j);
      std::byte* dst = recv + g.rankAt(g.node, jj, lane) * g.block + off;
      size_t rows = 1;
      long long pitch = 0;
      if (len == g.block) {
        pitch =
            (static_cast<long long>(g.rankAt(g.node, jj + 1, lane)) - g.rankAt(g.node, jj, lane)) *
            static_cast<long long>(g.block);
        while (pitch > 0 && at + (rows + 1) * g.block <= end &&
               (static_cast<long long>(g.rankAt(g.node, jj + static_cast<int>(rows) + 1, lane)) -
                g.rankAt(g.node, jj + static_cast<int>(rows), lane)) *
                       static_cast<long long>(g.block) ==
                   pitch)
          ++rows;
      }
      const OpId cp =
          rows > 1 ? s.copyRows(dst, static_cast<size_t>(pitch), from + at, g.block, g.block, rows)
                   : s.copy(dst, from + at, len);
      s.after(cp, ready);
      at += rows > 1 ? rows * g.block : len;
    }
  };
  // A piece of work goes to this rank's result and to every node peer, whose messages from
  // each peer come in the same order.
  const auto spread = [&](const Piece& piece) {
    if (wholePieces && (piece.end - 1) / g.block > piece.begin / g.block) {
      place(g.rail, work, piece.begin, piece.end, piece.op);
      for (size_t u = 0; u < local; ++u) {
        const int t = g.peers[u];
        std::byte* into = lanes + u * static_cast<size_t>(g.N) * g.block;
        const OpId rv = s.recv(t, localSlot, into + piece.begin, piece.end - piece.begin);
        place(g.map.localRank[static_cast<size_t>(t)], into, piece.begin, piece.end, rv);
        s.after(s.send(t, localSlot, work + piece.begin, piece.end - piece.begin), piece.op);
      }
      ++localSlot;
      return;
    }
    for (size_t at = piece.begin; at < piece.end;) {
      const size_t j = at / g.block, off = at % g.block;
      const size_t len = std::min(piece.end, (j + 1) * g.block) - at;
      const int jj = static_cast<int>(j);
      if (j > 0)
        s.after(s.copy(recv + g.rankAt(g.node, jj, g.rail) * g.block + off, work + at, len),
                piece.op);
      for (int t : g.peers) {
        const int lane = g.map.localRank[static_cast<size_t>(t)];
        s.recv(t, localSlot, recv + g.rankAt(g.node, jj, lane) * g.block + off, len);
        const OpId sd = s.send(t, localSlot, j == 0 ? send + off : work + at, len);
        if (j > 0) s.after(sd, piece.op);
      }
      ++localSlot;
      at += len;
    }
  };
  // The own block's pieces go to the node peers during the first step, each step's during the
  // next, the last step's as they arrive: operations are built interleaved (a step's sends
  // before the forwards they overtake), so that both links have work in the window and the
  // chain of steps does not wait behind forwards.
  std::vector<Piece> previous;
  for (const Range& p : g.pieces(1))
    previous.push_back({p.offset * g.elem, (p.offset + p.count) * g.elem, own});
  for (int k = 0; k < g.steps; ++k) {
    const BruckStep b = bruckAllGatherStep(g.node, g.N, k);
    const int to = g.map.ranksOf[static_cast<size_t>(b.sendPeer)][static_cast<size_t>(g.rail)];
    const int from = g.map.ranksOf[static_cast<size_t>(b.recvPeer)][static_cast<size_t>(g.rail)];
    const size_t into = static_cast<size_t>(b.distance) * g.block;
    const std::vector<Range> pieces = g.pieces(b.blocks);
    std::vector<Piece> now;
    size_t spreadDone = 0;
    for (size_t i = 0; i < pieces.size(); ++i) {
      const size_t begin = pieces[i].offset * g.elem, end = begin + pieces[i].count * g.elem;
      const OpId rv = s.recv(from, static_cast<uint32_t>(i), work + into + begin, end - begin);
      const OpId sd = s.send(to, static_cast<uint32_t>(i), work + begin, end - begin);
      if (begin < g.block) s.after(sd, own);
      got.after(s, sd, begin, end);
      now.push_back({into + begin, into + end, rv});
      for (; spreadDone < previous.size() * (i + 1) / pieces.size(); ++spreadDone)
        spread(previous[spreadDone]);
      if (k + 1 == g.steps) spread(now.back());
    }
    for (; spreadDone < previous.size(); ++spreadDone) spread(previous[spreadDone]);
    for (const Piece& p : now) got.add(p);
    previous = std::move(now);
  }
  // Out of place, this rank's own block goes to its place in the result.
  std::byte* mine = recv + static_cast<size_t>(g.r) * g.block;
  if (send != mine) s.copy(mine, send, g.block);
  return true;
}

bool buildHierarchicalBruckReduceScatter(Schedule& s, const CollArgs& a) {
  if (!applies(s, a.count)) return false;
  const Rails g(s, a.count, a.chunkBytes);
  const auto* send = static_cast<const std::byte*>(a.send);
  auto* out = static_cast<std::byte*>(a.recv);
  const size_t N = static_cast<size_t>(g.N), local = g.peers.size();
  // Where pieces hold several blocks, a node peer's contributions to a run of positions go in
  // one message, gathered from their strided places into `staged` (the mirror of the
  // AllGather's whole pieces): a message per run rather than per position. Every rank
  // decides alike.
  const bool wholeRuns =
      bruckWholePieces(static_cast<double>(g.pieceElems * g.elem), static_cast<double>(g.block),
                       static_cast<double>(local), static_cast<double>(N));
  // acc: the node's partials by position; in: what node peers send, one buffer per peer;
  // fresh: each reversed Bruck step's receive (N-1 blocks over all steps); staged: what this
  // rank sends each node peer, gathered by position.
  std::byte* acc = s.scratch(g.block * (N + local * N + N + (wholeRuns ? local * N : 0)));
  std::byte* in = acc + g.block * N;
  std::byte* fresh = in + g.block * local * N;
  std::byte* staged = fresh + g.block * N;
  // The last operation that wrote each piece of acc (bytes), for the steps that read it.
  PieceIndex wrote(N, g.block);
  // The steps' reductions into positions whose units may come later in the schedule: each
  // unit made afterwards goes before the ones it overlaps (own and node partials first).
  PieceIndex early(N, g.block);
  // The local phase in units of (run of positions, piece of their blocks), in the order the
  // reversed steps read them: step 0's positions [d, N) in its order (reverseBruckOrder),
  // then the next step's, position 0 last. Each unit: contributions to the node peers, theirs to
  // this rank, reduced in order (own first, then peers by local index).
  struct Unit {
    size_t first, last;  // positions [first, last)
    size_t off, len;     // bytes of each block
    size_t elems;        // elements of one block's part
  };
  std::vector<Unit> units;
  std::vector<size_t> unitsFor(N);   // per position: the units to make before it is complete
  std::vector<size_t> firstUnit(N);  // per position: the index of its first unit
  const std::vector<Range> blockPieces = g.pieces(1);
  const size_t runMax = wholeRuns ? g.pieceElems / g.count : 1;
  const auto addRuns = [&](size_t from, size_t to) {
    for (size_t j = from; j < to; j += runMax) {
      const size_t end = std::min(to, j + runMax);
      for (size_t q = j; q < end; ++q) firstUnit[q] = units.size();
      for (const Range& p : blockPieces)
        units.push_back({j, end, p.offset * g.elem, p.count * g.elem, p.count});
      for (size_t q = j; q < end; ++q) unitsFor[q] = units.size();
    }
  };
  for (int k = 0; k < reverseBruckSteps(g.N); ++k) {
    const ReverseBruckStep b = reverseBruckStep(0, g.N, k);
    // Ranges that follow one another down and fit one run together make one unit.
    const auto order = stepOrder(b, g);
    for (size_t i = 0; i < order.size(); ++i) {
      auto [first, last] = order[i];
      while (i + 1 < order.size() && order[i + 1].second == first &&
             static_cast<size_t>(last - order[i + 1].first) <= runMax)
        first = order[++i].first;
      addRuns(static_cast<size_t>(b.distance + first), static_cast<size_t>(b.distance + last));
    }
  }
  addRuns(0, 1);
  // The units to make before bytes [begin, end) of acc are complete: whole positions, and
  // of the last one the units up to the piece that holds its last byte (a position's units
  // go in order of its bytes; the positions of a range may belong to several steps).
  const auto unitsBefore = [&](size_t begin, size_t end) {
    const size_t lastAt = end - 1, lastPos = lastAt / g.block;
    size_t need = 0;
    for (size_t j = begin / g.block; j < lastPos; ++j) need = std::max(need, unitsFor[j]);
    const Unit& u = units[firstUnit[lastPos]];
    if (u.last - u.first > 1) return std::max(need, unitsFor[lastPos]);
    const size_t elem = (lastAt % g.block) / g.elem;
    size_t k = 0;
    while (k + 1 < blockPieces.size() && blockPieces[k + 1].offset <= elem) ++k;
    return std::max(need, firstUnit[lastPos] + k + 1);
  };
  // Blocks of positions [first, last) of rail `lane` from the send buffer into `dst`, one
  // after another: runs whose places are evenly spaced in one strided copy.
  const auto gather = [&](std::byte* dst, int lane, size_t first, size_t last) {
    std::vector<OpId> ops;
    const auto place = [&](size_t j) {
      return static_cast<long long>(g.rankAt(g.node, static_cast<int>(j), lane));
    };
    for (size_t j = first; j < last;) {
      const long long pitch = place(j + 1) - place(j);
      size_t rows = 1;
      while (pitch > 0 && j + rows < last && place(j + rows) - place(j + rows - 1) == pitch) ++rows;
      std::byte* to = dst + (j - first) * g.block;
      const std::byte* from = send + static_cast<size_t>(place(j)) * g.block;
      ops.push_back(rows > 1 ? s.copyRows(to, g.block, from, static_cast<size_t>(pitch) * g.block,
                                          g.block, rows)
                             : s.copy(to, from, g.block));
      j += rows;
    }
    return ops;
  };
  uint32_t localSlot = 0;
  size_t made = 0;
  // A unit's sends and gathers wait for the reductions of the unit kBruckUnitsAhead before it.
  // The engine's thread posts every ready send before it runs a copy or reduction:
  // unthrottled, it would post the whole local phase first and make every position at its
  // end, holding back the steps across nodes.
  std::vector<OpId> unitDone;
  const auto throttle = [&](OpId sd) {
    if (made >= kBruckUnitsAhead) s.after(sd, unitDone[made - kBruckUnitsAhead]);
  };
  const auto makeUnits = [&](size_t upTo) {
    for (; made < std::min(upTo, units.size()); ++made) {
      const Unit& x = units[made];
      const size_t rows = x.last - x.first;
      std::byte* dst = acc + x.first * g.block + x.off;
      OpId prev = 0;
      if (rows > 1) {  // whole blocks: gathered to and from the node peers
        const std::vector<OpId> own = gather(dst, g.rail, x.first, x.last);
        for (OpId c : own) throttle(c);
        for (size_t u = 0; u < local; ++u) {
          const int t = g.peers[u];
          std::byte* mine = staged + (u * N + x.first) * g.block;
          const OpId sd = s.send(t, localSlot, mine, rows * g.block);
          for (OpId c : gather(mine, g.map.localRank[static_cast<size_t>(t)], x.first, x.last)) {
            throttle(c);
            s.after(sd, c);
          }
          std::byte* buf = in + (u * N + x.first) * g.block;
          const OpId rv = s.recv(t, localSlot, buf, rows * g.block);
          const OpId rd = s.reduce(dst, dst, buf, rows * g.count);
          s.after(rd, rv);
          if (u == 0)
            for (OpId c : own) s.after(rd, c);
          else
            s.after(rd, prev);
          prev = rd;
        }
      } else {
        const int j = static_cast<int>(x.first);
        const std::byte* mine = send + g.rankAt(g.node, j, g.rail) * g.block + x.off;
        for (size_t u = 0; u < local; ++u) {
          const int t = g.peers[u];
          const int lane = g.map.localRank[static_cast<size_t>(t)];
          throttle(s.send(t, localSlot, send + g.rankAt(g.node, j, lane) * g.block + x.off, x.len));
          std::byte* buf = in + (u * N + x.first) * g.block + x.off;
          const OpId rv = s.recv(t, localSlot, buf, x.len);
          const OpId rd = s.reduce(dst, u == 0 ? mine : dst, buf, x.elems);
          s.after(rd, rv);
          if (u > 0) s.after(rd, prev);
          prev = rd;
        }
      }
      ++localSlot;
      unitDone.push_back(prev);
      const Piece unit{x.first * g.block + x.off, (x.last - 1) * g.block + x.off + x.len, prev};
      for (const Piece& p : early.overlapping(unit.begin, unit.end)) s.after(p.op, prev);
      wrote.add(unit);
    }
  };
  // Reversed Bruck across nodes over the partials, interleaved with the local units: each
  // piece once the units it reads exist, and the units made at about the pieces' pace plus
  // a few ahead, so that both links have work in the window.
  std::vector<std::vector<Range>> stepPieces;
  size_t allPieces = 0, piecesMade = 0;
  for (int k = 0; k < reverseBruckSteps(g.N); ++k) {
    stepPieces.emplace_back();
    for (const auto& [first, last] : stepOrder(reverseBruckStep(0, g.N, k), g))
      for (const Range& p : g.pieces(first, last)) stepPieces.back().push_back(p);
    allPieces += stepPieces.back().size();
  }
  const size_t ahead = 4;
  size_t freshAt = 0;
  for (int k = 0; k < reverseBruckSteps(g.N); ++k) {
    const ReverseBruckStep b = reverseBruckStep(g.node, g.N, k);
    const int to = g.map.ranksOf[static_cast<size_t>(b.sendPeer)][static_cast<size_t>(g.rail)];
    const int from = g.map.ranksOf[static_cast<size_t>(b.recvPeer)][static_cast<size_t>(g.rail)];
    const size_t at = static_cast<size_t>(b.distance) * g.block;
    std::vector<Piece> now;
    for (size_t i = 0; i < stepPieces[static_cast<size_t>(k)].size(); ++i) {
      const Range piece = stepPieces[static_cast<size_t>(k)][i];
      const size_t begin = piece.offset * g.elem, end = begin + piece.count * g.elem;
      const size_t paced = units.size() * ++piecesMade / allPieces;
      // the units the piece reads, the piece, then the units ahead: so the piece is older
      // than their sends, which the engine would otherwise post first
      const size_t need = unitsBefore(at + begin, at + end);
      makeUnits(need);
      const OpId sd = s.send(to, static_cast<uint32_t>(i), acc + at + begin, end - begin);
      wrote.after(s, sd, at + begin, at + end);
      std::byte* buf = fresh + freshAt + begin;
      const OpId rv = s.recv(from, static_cast<uint32_t>(i), buf, end - begin);
      const OpId rd = s.reduce(acc + begin, acc + begin, buf, piece.count);
      s.after(rd, rv);
      now.push_back({begin, end, rd});
      makeUnits(std::max(need, paced) + ahead);
    }
    // The step's reductions land in acc[0, length - d): after the units and earlier
    // reductions that wrote there, and after the units made later (`early`), so that the
    // node peers' sends of later positions do not crowd out the next step's.
    for (const Piece& p : now) wrote.after(s, p.op, p.begin, p.end);
    for (const Piece& p : now) early.add(p);
    freshAt += static_cast<size_t>(b.blocks) * g.block;
    for (const Piece& p : now) wrote.add(p);
  }
  makeUnits(units.size());
  // acc[0] is this rank's block: to the result, then Avg's division.
  const OpId done = s.copy(out, acc, g.block);
  wrote.after(s, done, 0, g.block);
  s.after(s.divide(out, g.count), done);
  return true;
}

}  // namespace sharc::algo

// The cost model of the two-level collectives with a Bruck across nodes
// (hierarchical_bruck.cc; cost_model.hpp, "Hierarchical with a Bruck across nodes").
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>

#include "algorithms.hpp"
#include "cost_model.hpp"
#include "patterns.hpp"
#include "schedule.hpp"
#include "tag.hpp"

namespace sharc::algo::model {
namespace {

// How long, in units of the local phase's work, a piece across nodes waits for the thread to
// reduce it while the local phase runs (the replay of p5 at 8 to 256 nodes, 32 MiB to 256 MiB:
// model within 8 %).
constexpr double kThreadWaitUnits = 0.75;

// The messages of an AllGather's pieces to one node peer where each goes a block at a time:
// the own block's pieces, then each step's, cut at the pieces' and at the blocks' bounds.
double segmentsPerBlock(double piece, double block, int nodes) {
  const auto p = static_cast<uint64_t>(piece), m = static_cast<uint64_t>(block);
  const uint64_t both = std::lcm(p, m);
  const auto cuts = [&](uint64_t bytes) {  // the parts of [0, bytes)
    return (bytes - 1) / p + (bytes - 1) / m - (bytes - 1) / both + 1;
  };
  double n = static_cast<double>(cuts(m));
  for (int st = 0; (1 << st) < nodes; ++st)
    n += static_cast<double>(
        cuts(static_cast<uint64_t>(bruckAllGatherStep(0, nodes, st).blocks) * m));
  return n;
}

}  // namespace

void Model::hierarchicalBruck(Cost& k, double m, bool reduce) const {
  const int N = nodes_, L = maxLocal_;
  const double s = p_.stepUs, af = p_.fabric.alphaUs, al = localLatency();
  // The schedule's pieces: the chunk, or more where the tag's slots would not hold them.
  const double piece = std::max(static_cast<double>(chunk_), N * m / (tag::kMaxSlots / 4));
  const double one = std::min(piece, m);  // a message between node peers
  const double blOne = localPerByte(one);
  // One step's message across nodes of b bytes: the rank's NICs (its share of the node's)
  // and the node's, which carry the step's messages of all L rails at once.
  const auto wire = [&](double b) {
    const double x = std::min(piece, b);
    return std::max(L * bf_, bfRank_) * railScale(x) * b;
  };
  // Each node peer gets every block but its own rail's once, from the rank of that rail.
  const double local = o_ * (L - 1) * N * m * blOne;
  double chain = 0, pieces = 0, last = 0;
  if (!reduce) {
    // AllGather: a step sends its pieces in the order the last step received them, the older
    // blocks first, so only its last piece waits for the last step's last one to come in (a
    // latency and a post): the NICs idle where a step's message is not longer on the wire
    // than that, at the early, small steps.
    double lastPiece = one;
    for (int st = 0; (1 << st) < N; ++st) {
      const double b = bruckAllGatherStep(0, N, st).blocks * m;
      chain = st == 0 ? af + s + wire(b)
                      : std::max(chain + wire(b), chain + af + s + wire(std::min(piece, b)));
      pieces += std::ceil(b / piece);
      lastPiece = std::min(piece, b);
    }  // Pieces of several blocks go to the node peers whole, which place the blocks with
    // strided copies (hierarchical_bruck.cc, kBruckLaneScratchMax); else a message per block.
    const bool whole = bruckWholePieces(piece, m, L - 1, N);
    const double segments = whole ? std::ceil(m / piece) + pieces : segmentsPerBlock(piece, m, N);
    const double placed = whole ? o_ * (L - 1) * N * m * c_ : 0.0;
    // The last step's last piece, once in, goes to the node peers: a message per block in it,
    // or one whole (each a send posted here and a receive there), then placed.
    const double lastMessages = (whole && lastPiece > m ? 1.0 : std::ceil(lastPiece / m)) * (L - 1);
    const double forward = o_ * (L - 1) * lastPiece * localPerByte(std::min(piece, lastPiece)) +
                           (whole ? o_ * (L - 1) * lastPiece * c_ : 0.0) + s;
    last = al + 2 * lastMessages * s + forward;
    // the rank: a post per send and, one after another with them, the copies of the rotated
    // buffer to the result and of the node peers' pieces to their places; after its last
    // posts (the last piece's), that piece's way to the node peers
    const double thread = (pieces + segments * (L - 1)) * s + o_ * N * m * c_ + placed;
    const double total = std::max({chain + last, local + al, thread + al + forward});
    k.latency += af + al;
    k.transfer += total - af - al;
    k.fabric = true;
    k.steps += ceilLog2(N) + 1;
    return;
  }
  // ReduceScatter: the node peers' contributions come in first, in the order the reversed
  // steps read the positions, and are reduced in order (the local phase).
  const double reduced = o_ * (L - 1) * N * m * g_;
  // Where pieces hold several blocks, a node peer's contributions to a run of positions (cut
  // at the steps' ranges) go in one message, gathered with strided copies (the own ones
  // too); else a message per position and piece.
  const bool runs = bruckWholePieces(piece, m, L - 1, N);
  const double runBlocks = runs ? std::floor(piece / m) : 1.0;
  double units = 1;  // the local phase's (run of positions, piece)s; position 0 alone
  for (int st = 0; st < reverseBruckSteps(N); ++st)
    units += std::ceil(reverseBruckStep(0, N, st).blocks / runBlocks);
  if (!runs) units = N * std::ceil(m / piece);
  const double gathered = runs ? o_ * L * N * m * c_ : 0.0;
  const double localRuns = runs ? o_ * (L - 1) * N * m * localPerByte(runBlocks * m) : local;
  // the local phase runs at the slower of NVLink and the rank posting its sends (L-1 per
  // unit), gathering them and running their reductions
  const double localPhase = std::max(localRuns, units * (L - 1) * s + reduced + gathered);
  // The first piece across nodes waits for its unit: its messages from the node peers, then
  // its reductions. The thread reaches those only after the work that became ready before
  // them: the posts and gathers of the kBruckUnitsAhead units the builder lets run ahead (the
  // posts up to the engine's window: two per peer, L-1 in the node, one per step across nodes).
  const double window =
      p_.postedSends > 0
          ? static_cast<double>(sendWindow(static_cast<size_t>(L - 1 + reverseBruckSteps(N)),
                                           static_cast<size_t>(p_.postedSends)))
          : std::numeric_limits<double>::infinity();
  const double first =  // the bytes of each block the first unit makes
      runs ? std::min(runBlocks, static_cast<double>(reverseBruckStep(0, N, 0).blocks)) * m : one;
  const double ahead = std::min(units, static_cast<double>(kBruckUnitsAhead));
  const double gathers = runs ? o_ * L * first * c_ : 0.0;  // one unit's
  const double before = std::min(ahead * (L - 1), (L - 1) + window) * s + ahead * gathers;
  const double arrived = gathers + (L - 1) * s + al + o_ * (L - 1) * first * localPerByte(first);
  const double lead = std::max(before, arrived) + o_ * (L - 1) * first * g_;
  // Step by step: a step streams its pieces once the part of the previous one it reads is in
  // and reduced (all of it, or the part sent first where the previous one was split) and the
  // local phase has made the positions it reads first. The rank's NICs carry the steps one
  // after another, so a step that starts early shares them with the rest of the last one. A
  // step ends no earlier than one piece after the local phase has made its last position
  // (positions are made in step order).
  double made = 0;  // positions the local phase has made by the step's end
  double ready = 0, nic = 0;
  for (int st = 0; st < reverseBruckSteps(N); ++st) {
    const ReverseBruckStep rb = reverseBruckStep(0, N, st);
    const double blocks = rb.blocks, b = blocks * m;
    const double x = std::min(piece, b);
    const double start = std::max({ready, al + localPhase * made / N, st == 0 ? lead : 0.0});
    // A piece's reduction waits for the thread, which runs the local phase's work in batches:
    // while that phase runs, behind kThreadWaitUnits of a unit's work (its posts, gathers and
    // reductions), fitted to the replay.
    const double red =
        o_ * x * g_ + (start < al + localPhase ? kThreadWaitUnits * localPhase / units : 0.0);
    made += blocks;
    const double end = std::max({start + af + s + wire(b), nic + wire(b) + af,
                                 al + localPhase * made / N + af + s + wire(x)}) +
                       red;
    const int half = reverseBruckSplit(rb.blocks, rb.distance, m);
    const double sentFirst = (blocks - half) * m;
    ready = half > 0 ? std::max(start + af + s + wire(sentFirst), nic + wire(sentFirst) + af) + red
                     : end;
    nic = std::max(start + s, nic) + wire(b);
    chain = std::max(chain, end);
    pieces += std::ceil(b / piece);
  }
  last = al + localPhase + o_ * std::min(piece, m) * g_;  // position 0, then its reductions
  // the rank: a post per send and, one after another with them, every reduction
  const double thread = (pieces + units * (L - 1)) * s + reduced + gathered + o_ * (N - 1) * m * g_;
  const double tail = o_ * m * c_;  // acc[0] to the result
  const double total = std::max({chain, last, thread + af + s}) + tail;
  k.latency += af + al;
  k.transfer += total - af - al;
  k.fabric = true;
  k.steps += reverseBruckSteps(N) + 1;
}

}  // namespace sharc::algo::model

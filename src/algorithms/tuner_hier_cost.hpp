// The cost of the hierarchical schedules (hierarchical.cc): Model's members for them, apart
// from tuner_model.hpp by size. Internal to tuner.cc.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

#include "tuner_model.hpp"

namespace sharc::algo::model {

// Over tcp, the bytes of each block (chunk) that a connection takes at once, so that they
// leave in the order they were posted (hierarchicalAllReduce; measured on 3+1, 200 Mbit/s).
inline constexpr double kPhaseOverlapBytes = 32 << 10;

// Hierarchical where NICs and NVLink move the bytes (the replay's transport): the longest
// of these paths through one phase (C chunks per block of m bytes; sends are posted in the
// order they became ready, at most W at a time: postedSends, the engine's 32):
//   AllGather
//   - the fabric phase chunk by chunk, then the forwards still queued: the own sends, ready
//     at once, hold the window's places, and the forwards go through the places left;
//   - the rank's local link: its (L-1)*N*m of local sends;
//   - its progress thread: C*(n-1) posts.
//   ReduceScatter, for each class of rank (tuner_hier.hpp)
//   - the contributions to the proxies on the node, the partials posted behind them, then
//     the partials across (out of a proxy's own NICs, and into the owner's);
//   - the local link; the thread's posts and reductions, then the last partial.
// (The window matters: 16x8 AllGather of 1 GiB in 1 MiB chunks replays in 2.8 ms with an
// unbounded window and 3.3, 4.0 and 4.5 ms with 64, 32 and 16.)
inline Model::HierPaths Model::hierarchicalPaths(double m, bool reduce) const {
  const int N = nodes_, L = maxLocal_;
  const double s = p_.stepUs, af = p_.fabric.alphaUs, al = localLatency();
  const double C = std::max(1.0, std::ceil(m / static_cast<double>(chunk_)));
  const double chunk = std::min(m, static_cast<double>(chunk_));
  const double blChunk = localPerByte(chunk);
  // the fabric's us per byte, the node's and one rank's, for messages of one chunk
  const double bf = bf_ * railScale(chunk), bfR = bfRank_ * railScale(chunk);
  // The node's NICs carry L*(N-1)*m each way; each rank's own NICs (N-1)*m (uneven nodes:
  // a small node's ranks proxy for several ranks of the others, hierBlocksAcross).
  const double fabric = std::max(static_cast<double>(L) * (N - 1) * bf, hierRankBlocks_ * bfR) * m;
  const double forwards = o_ * static_cast<double>(L - 1) * (N - 1) * m * blChunk;
  const double local = o_ * static_cast<double>(L - 1) * N * m * blChunk;
  const double posts = C * (n_ - 1) * s;
  const double window =
      p_.postedSends > 0 ? p_.postedSends : std::numeric_limits<double>::infinity();
  HierPaths h;
  h.local = local + al;
  h.fabric = fabric + af;
  if (!reduce) {
    // Chunk by chunk (a round of fabric/C on the NICs: a pair's chunks go in order): the
    // own sends, ready first, hold min(W, (C-c)(N-1)) of the window's places in round c;
    // the forwards of the chunks already in (ready in that order, behind them) go through
    // the k places left, each a post, its wire and the local alpha before the place frees,
    // at most at the link's rate. Where the window cannot also hold the next round's sends
    // (W < 2(N-1)), the NICs wait between rounds for the last ones to be delivered (af)
    // and the next 2(N-1)-W to be posted. The forwards still to go follow the last round.
    const double P = N - 1, round = fabric / C, fwd = forwards / C, one = o_ * chunk * blChunk;
    const double slot = one / (one + al + s);  // a place's share of the link's rate
    double t = af + N * s, queued = 0;
    for (int c = 0; c < static_cast<int>(C); ++c) {
      const double k = window - std::min(window, (C - c) * P);
      const double done = std::min(queued, round * std::min(1.0, std::isinf(k) ? 1.0 : k * slot));
      queued += fwd - done;
      t += round;
      if (c + 1 < static_cast<int>(C) && (C - c) * P > window && window < 2 * P)
        t += af + (2 * P - window) * s;
    }
    const double tail = al + chunk * blChunk;
    h.serial = t + std::max(queued, queued / std::max(one, 1e-12) * s) + tail;
    h.head = N * s;
    h.across = t - af - N * s;
    h.rest = h.serial - h.head - h.across;
    h.thread = posts + tail;
    h.total = std::max({h.serial, local + tail, h.thread});
    return h;
  }
  const double tail = o_ * chunk * g_;
  // Per class of rank (tuner_hier.hpp): on a node of Lk ranks, a proxy of h foreign blocks
  // sends n-1-h contributions and takes in (Lk-1)(h+1) per chunk (the node's local phase
  // is the most of these), all of its C*(n-1-h) local sends ready at once. Its partials
  // become ready chunk by chunk but are posted behind those sends, at most W at a time: the
  // first once all but W of its local sends have left, (1 - W/(C(n-1-h))) of the local
  // phase, or, where the window holds them all, once the first chunk's contributions are in
  // (each peer sends to Lk-1 ranks at once) and reduced. From then its own NICs carry its h
  // partials. A peer sends its contributions in block order, chunk by chunk, so the last
  // chunk of the last block a proxy holds is in only as the local phase ends; every proxy
  // holds the blocks of another node's last rank last, so that owner's N-1 partials of it
  // arrive together through its own NICs.
  // The thread posts those sends one by one (s each) and, while the window holds it back,
  // runs every reduction whose contributions are in: a partial is posted no earlier.
  const auto work = [&](const HierClass& c) {  // the local phase of c's node
    double most = 0;
    for (const HierClass& o : hier_)
      if (o.local == c.local)
        most = std::max(most, std::max<double>(n_ - 1 - o.held, (c.local - 1) * (o.held + 1.0)));
    return o_ * most * m * blChunk;
  };
  double localWork = 0, serial = 0, red = 0;
  const double in = std::max((N - 1) * bfR, L * (N - 1) * bf);
  for (const HierClass& c : hier_) {
    const double lw = work(c), reduced = o_ * (c.local - 1) * (c.held + 1.0) * m * g_;
    localWork = std::max(localWork, lw);
    red = std::max(red, reduced + o_ * (N - 1) * m * g_);
    if (c.held == 0) continue;
    const double sends = C * (n_ - 1 - c.held);
    const double wait = sends > window ? (1.0 - window / sends) * lw : 0.0;
    const double first = o_ * (c.local - 1) * chunk * (blChunk + g_);
    const double thread = sends * s + reduced * std::min(1.0, sends * s / std::max(lw, 1e-9));
    const double start = al + std::max({wait, first, thread}) + s;
    const double last =
        al + lw * (1.0 - 1.0 / (C * (c.held + 1))) + o_ * (c.local - 1) * chunk * g_ + s;
    const double out = std::max(c.held * bfR, (n_ - c.local) * bf);
    serial = std::max({serial, std::max(start + out * m, last + c.held * chunk * bfR),
                       std::max(start + in * m, last + (N - 1) * chunk * bfR)});
  }
  h.serial = serial + af + tail;
  h.across = fabric;
  h.rest = af + tail;
  h.head = std::max(0.0, h.serial - h.across - h.rest);
  // The progress thread: every post and reduction, then the last partial's wire.
  h.thread = posts + red + chunk * bfR + af + tail;
  h.total = std::max({h.serial, localWork + al + tail, h.thread});
  return h;
}

inline void Model::hierarchicalDma(Cost& k, double m, bool reduce) const {
  const HierPaths h = hierarchicalPaths(m, reduce);
  k.latency += p_.fabric.alphaUs + localLatency();
  k.transfer += h.total - p_.fabric.alphaUs - localLatency();
  k.fabric = true;
  k.steps += 2;
}

// Hierarchical AllReduce (its ReduceScatter, then its AllGather, chunk by chunk: a chunk's
// gather starts once it is reduced). The longest of: the two phases' serial paths one after
// the other; each resource's work of both phases; one chunk through both phases (at
// small sizes, with one chunk per block, the whole call). On a CPU transport, the sum (less
// tcp's overlap of a block's first 32 KiB).
inline void Model::hierarchicalAllReduce(Cost& k, double m) const {
  if (!p_.dmaTransfers) {
    // The two phases one after the other. (Their node links overlapping chunk by chunk at
    // every size, as the DMA path below counts, priced 3+1 and 2+1+1 AllReduce at 0.55-0.7x
    // of measured.)
    Cost both;
    hierarchical(both, m, true);
    hierarchical(both, m, false);
    // But over tcp (half duplex per connection) the first 32 KiB of a block leave in the
    // order they were posted (a connection's window takes them at once; beyond, the
    // connections to the proxies interleave): a rank's partial goes out as soon as it is
    // reduced, its AllGather block behind it, so for that share the phases share the links
    // and the busiest one carries its blocks of both, each way (hierBothPhases_). On uneven
    // nodes that is less than the phases' sum: 3+1 at 64 and 128 KiB (16 and 32 KiB blocks)
    // measured 1.00-1.09x these 4 blocks against 6 (2+1+1: 6 against 8, 0.97x); at 256 KiB
    // (64 KiB blocks) 12.9-15.0 ms, between the 4 blocks' 11.2 and the 6 blocks' 16.8.
    if (p_.fabricHalfDuplex && nodes_ > 1) {
      const HierCpuTerms t = hierCpuTerms(m, hierBothPhases_, hierRankBlocks_ + nodes_ - 1, 2);
      const double overlapped = std::max(t.fabric + t.forwarded, t.local);
      const double share =
          std::min(1.0, kPhaseOverlapBytes / std::min(m, static_cast<double>(chunk_)));
      both.transfer -= share * std::max(0.0, both.transfer - overlapped);
    }
    k.addRepeated(both, 1);
    return;
  }
  const HierPaths r = hierarchicalPaths(m, true), a = hierarchicalPaths(m, false);
  const double one = std::min(m, static_cast<double>(chunk_));
  const double first = hierarchicalPaths(one, true).total + hierarchicalPaths(one, false).total;
  // A chunk's gather starts once it is reduced, the first after one round of the partials
  // (across/C) and their alpha: from then the rank's own NICs carry the gather's blocks
  // behind the partials. Each way they carry one phase's h blocks (partials out, proxied
  // blocks in) and the other's N-1 (its own block): h+N-1, where the two phases' paths
  // added would count 2h (the same on even nodes, h = N-1; not on uneven ones).
  const int N = nodes_, L = maxLocal_;
  const double C = std::max(1.0, std::ceil(m / static_cast<double>(chunk_)));
  const double across =
      std::max(2.0 * L * (N - 1) * bf_, (hierRankBlocks_ + N - 1) * bfRank_) * m * railScale(one);
  const double serial =
      r.head + std::max(across, r.across / C + r.rest + a.head + a.across) + a.rest;
  const double t = std::max(
      {serial, r.local + a.local, across + 2 * p_.fabric.alphaUs, r.thread + a.thread, first});
  k.latency += 2 * (p_.fabric.alphaUs + localLatency());
  k.transfer += t - 2 * (p_.fabric.alphaUs + localLatency());
  k.fabric = true;
  k.steps += 4;
}

// hierarchical()'s and hierarchicalAllReduce()'s CPU-path terms (HierCpuTerms).
inline Model::HierCpuTerms Model::hierCpuTerms(double m, double nodeBlocks, double rankBlocks,
                                               int phases) const {
  const int N = nodes_, L = maxLocal_;
  const double one = std::min(m, static_cast<double>(chunk_));
  const double blChunk = localPerByte(one);
  return {std::max(nodeBlocks * bf_, rankBlocks * bfRank_) * m * railScale(one),
          o_ * static_cast<double>(L - 1) * (N - 1) * m * blChunk /
              std::max(1.0, std::ceil(m / static_cast<double>(chunk_))),
          phases * o_ * static_cast<double>(L - 1) * N * m * blChunk};
}

// Hierarchical (hierarchical.cc). AllGather: each rank sends its block, chunk by chunk,
// to its proxy on every other node and its node peers; every chunk it receives as proxy
// goes on to its L-1 node peers. ReduceScatter mirrors it: contributions to the proxies
// on the node first, the node's partials across. See hierarchicalDma() for the form where
// the bytes move by DMA (dmaTransfers); on a CPU transport the phases are taken to overlap
// (the form the emulated cluster's measurements were taken against, docs/planning.md):
inline void Model::hierarchical(Cost& k, double m, bool reduce) const {
  if (p_.dmaTransfers) return hierarchicalDma(k, m, reduce);
  const int N = nodes_, L = maxLocal_;
  // Each rank posts its sends one after another on its progress thread: its own chunk to
  // its N-1 proxies (the node peers' copies go out while those are in flight), then, once
  // they arrive, each of the N-1 chunks it proxies to its L-1 node peers: (N-1)*L posts on
  // the critical path, not N + L - 2 (ReduceScatter mirrors it).
  k.latency += p_.fabric.alphaUs + localLatency() + (N - 1) * L * p_.stepUs;
  const double blChunk = localPerByte(std::min(m, static_cast<double>(chunk_)));
  const double perBlock = std::ceil(m / static_cast<double>(chunk_));
  // AllGather's node phase overlaps its fabric phase only chunk by chunk: a proxied chunk
  // is forwarded once it has arrived, so the forwards of the last chunk of every block,
  // 1/chunks of the (L-1)*(N-1)*m forwarded per rank, follow the fabric phase. (The replay
  // of ReduceScatter's mirror image is mixed: its reductions overlap instead.)
  // (fabric: L(N-1) blocks per node link, N-1 per rank; local: (L-1)N blocks per rank)
  const HierCpuTerms t = hierCpuTerms(m, static_cast<double>(L) * (N - 1), hierRankBlocks_, 1);
  const double forwarded = reduce ? 0.0 : t.forwarded;
  const double rails = railScale(std::min(m, static_cast<double>(chunk_)));  // one chunk's
  double fabric = t.fabric;
  // A pair sending both ways (hierTwoWay_: 3+1's lone rank and its proxy) takes turns on its
  // connection beyond duplexLoad's overlap, chunk by chunk, while the node's other
  // connections keep the link busy: 3+1 ReduceScatter at 200 Mbit/s and 1 Gbit/s measured
  // 1.20-1.28x the link's 3 blocks at 4-16 MiB, 1.10 at 1 MiB, 1.00 at 256 KiB.
  if (hierTwoWay_) fabric += (chunkedDuplexLoad(m) - m) * bf_ * rails;
  k.transfer += std::max(fabric + forwarded, t.local);
  if (reduce) k.reduce += o_ * (n_ - 1) * m * g_;
  k.pipeline += std::max(0.0, perBlock - 1) * ((N - 1) + (L - 1) * N) * p_.stepUs;
  if (perBlock > 1)
    fill_ =
        std::max(fill_, static_cast<double>(chunk_) * (std::max(L * bf_, bfRank_) * rails +
                                                       o_ * blChunk + (reduce ? o_ * g_ : 0.0)));
  k.fabric = true;
  k.steps += 2;
}

}  // namespace sharc::algo::model

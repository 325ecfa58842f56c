// The cost model: the two-level schedules (hierarchical.cc), their geometry and their cost
// (cost_model.hpp, "Hierarchical").
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include "cost_model.hpp"
#include "hierarchical_pattern.hpp"
#include "schedule.hpp"

namespace sharc::algo::model {
namespace {

// Over tcp, the bytes of each block (chunk) that a connection takes at once, so that they
// leave in the order they were posted.
constexpr double kPhaseOverlapBytes = 32 << 10;

}  // namespace

std::vector<HierClass> hierClasses(const NodeMap& map) {
  std::map<int, int> nodesOfSize;
  for (const auto& ranks : map.ranksOf) ++nodesOfSize[static_cast<int>(ranks.size())];
  std::vector<HierClass> out;
  for (const auto& [a, count] : nodesOfSize) {
    for (int i = 0; i < a; ++i) {
      int held = 0;
      for (const auto& [b, nodes] : nodesOfSize) {
        const int others = b == a ? nodes - 1 : nodes;
        held += b > i ? others * ((b - i + a - 1) / a) : 0;
      }
      const HierClass c{a, held};
      if (std::none_of(out.begin(), out.end(),
                       [&](const HierClass& o) { return o.local == a && o.held == held; }))
        out.push_back(c);
    }
  }
  return out;
}

int hierBlocksAcross(const std::vector<HierClass>& classes, int nodes) {
  int most = nodes - 1;
  for (const HierClass& c : classes) most = std::max(most, c.held);
  return most;
}

int hierBothPhasesBlocks(const NodeMap& map) {
  const int n = map.size(), N = map.nodes();
  int most = 0;
  for (const auto& ranks : map.ranksOf) {
    const int L = static_cast<int>(ranks.size());
    most = std::max(most, L * (N - 1) + n - L);
  }
  return most;
}

bool hierTwoWayPairs(const NodeMap& map) {
  for (int s = 0; s < map.size(); ++s) {
    const int home = map.nodeOf[static_cast<size_t>(s)];
    for (int m = 0; m < map.nodes(); ++m) {
      if (m == home) continue;
      const int t = hierProxy(map, m, s, 1);
      if (hierProxy(map, home, t, 1) == s) return true;
    }
  }
  return false;
}

Model::HierPaths Model::hierarchicalPaths(double m, bool reduce) const {
  const int N = nodes_, L = maxLocal_;
  const double s = p_.stepUs, af = p_.fabric.alphaUs, al = localLatency();
  const double C = std::max(1.0, std::ceil(m / static_cast<double>(chunk_)));
  const double chunk = std::min(m, static_cast<double>(chunk_));
  const double blChunk = localPerByte(chunk);
  // the fabric's us per byte, the node's and one rank's, for messages of one chunk
  const double bf = bf_ * railScale(chunk), bfR = bfRank_ * railScale(chunk);
  const double fabric = std::max(static_cast<double>(L) * (N - 1) * bf, hierRankBlocks_ * bfR) * m;
  const double forwards = o_ * static_cast<double>(L - 1) * (N - 1) * m * blChunk;
  const double local = o_ * static_cast<double>(L - 1) * N * m * blChunk;
  const double posts = C * (n_ - 1) * s;
  // The engine's window for a hierarchical rank's peers: N-1 across nodes, L-1 in its node.
  const double window = p_.postedSends > 0
                            ? static_cast<double>(sendWindow(static_cast<size_t>(N - 1 + L - 1),
                                                             static_cast<size_t>(p_.postedSends)))
                            : std::numeric_limits<double>::infinity();
  HierPaths h;
  h.local = local + al;
  h.fabric = fabric + af;
  if (!reduce) {
    // Round by round: the forwards the window lets through. They go before the rank's own
    // sends of later chunks (schedule order), so every place can take one, and the window
    // (two per peer) never makes the NICs wait between rounds.
    const double round = fabric / C, fwd = forwards / C, one = o_ * chunk * blChunk;
    const double slot = one / (one + al + s);  // a place's share of the link's rate
    const double share = std::isinf(window) ? 1.0 : std::min(1.0, window * slot);
    double t = af + N * s, queued = 0;
    for (int c = 0; c < static_cast<int>(C); ++c) {
      queued += fwd - std::min(queued, round * share);
      t += round;
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
  const auto work = [&](const HierClass& c) {  // the local phase of c's node
    double most = 0;
    for (const HierClass& o : hier_)
      if (o.local == c.local)
        most = std::max(most, std::max<double>(n_ - 1 - o.held, (c.local - 1) * (o.held + 1.0)));
    return o_ * most * m * blChunk;
  };
  double localWork = 0, serial = 0, red = 0, drained = 0;
  const double in = std::max((N - 1) * bfR, L * (N - 1) * bf);
  for (const HierClass& c : hier_) {
    const double lw = work(c), reduced = o_ * (c.local - 1) * (c.held + 1.0) * m * g_;
    localWork = std::max(localWork, lw);
    red = std::max(red, reduced + o_ * (N - 1) * m * g_);
    // Every contribution is ready at the start and older than any later phase's send: those
    // go once all are posted and all but W have left.
    const double all = C * (n_ - 1 - c.held);
    const double left = all > window ? (1.0 - window / all) * lw : 0.0;
    drained = std::max(drained, al + std::max(left, all * s) + s);
    if (c.held == 0) continue;
    // A chunk's partials go ahead of the later chunks' contributions but behind its own
    // (schedule order): the first waits for all but W of the first chunk's to leave, and
    // for the thread to post them and the W that refill the window before its reductions.
    const double perChunk = n_ - 1 - c.held;
    const double posted = std::min(C * perChunk, perChunk + window);
    const double wait = perChunk > window ? (1.0 - window / perChunk) * lw / C : 0.0;
    const double first = o_ * (c.local - 1) * chunk * (blChunk + g_);
    const double thread = posted * s + reduced * std::min(1.0, posted * s / std::max(lw, 1e-9));
    const double start = al + std::max({wait, first, thread}) + s;
    const double last =
        al + lw * (1.0 - 1.0 / (C * (c.held + 1))) + o_ * (c.local - 1) * chunk * g_ + s;
    const double out = std::max(c.held * bfR, (n_ - c.local) * bf);
    serial = std::max({serial, std::max(start + out * m, last + c.held * chunk * bfR),
                       std::max(start + in * m, last + (N - 1) * chunk * bfR)});
  }
  h.serial = serial + af + tail;
  h.drained = drained;
  h.across = fabric;
  h.rest = af + tail;
  h.head = std::max(0.0, h.serial - h.across - h.rest);
  h.thread = posts + red + chunk * bfR + af + tail;
  h.total = std::max({h.serial, localWork + al + tail, h.thread});
  return h;
}

void Model::hierarchicalDma(Cost& k, double m, bool reduce) const {
  const HierPaths h = hierarchicalPaths(m, reduce);
  k.latency += p_.fabric.alphaUs + localLatency();
  k.transfer += h.total - p_.fabric.alphaUs - localLatency();
  k.fabric = true;
  k.steps += 2;
}

void Model::hierarchicalAllReduce(Cost& k, double m) const {
  if (!p_.dmaTransfers) {
    Cost both;
    hierarchical(both, m, true);
    hierarchical(both, m, false);
    // Over tcp the phases share the links for each block's first kPhaseOverlapBytes.
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
  const int N = nodes_, L = maxLocal_;
  const double C = std::max(1.0, std::ceil(m / static_cast<double>(chunk_)));
  // Each way the rank's NICs carry one phase's h blocks and the other's N-1, not 2h.
  const double across =
      std::max(2.0 * L * (N - 1) * bf_, (hierRankBlocks_ + N - 1) * bfRank_) * m * railScale(one);
  // The gather's sends are younger than every reduce-scatter contribution (schedule order).
  const double serial =
      std::max(r.head + std::max(across, r.across / C + r.rest + a.head + a.across) + a.rest,
               r.drained + a.head + a.across + a.rest);
  const double t = std::max(
      {serial, r.local + a.local, across + 2 * p_.fabric.alphaUs, r.thread + a.thread, first});
  k.latency += 2 * (p_.fabric.alphaUs + localLatency());
  k.transfer += t - 2 * (p_.fabric.alphaUs + localLatency());
  k.fabric = true;
  k.steps += 4;
}

Model::HierCpuTerms Model::hierCpuTerms(double m, double nodeBlocks, double rankBlocks,
                                        int phases) const {
  const int N = nodes_, L = maxLocal_;
  const double one = std::min(m, static_cast<double>(chunk_));
  const double blChunk = localPerByte(one);
  return {std::max(nodeBlocks * bf_, rankBlocks * bfRank_) * m * railScale(one),
          o_ * static_cast<double>(L - 1) * (N - 1) * m * blChunk /
              std::max(1.0, std::ceil(m / static_cast<double>(chunk_))),
          phases * o_ * static_cast<double>(L - 1) * N * m * blChunk};
}

void Model::hierarchical(Cost& k, double m, bool reduce) const {
  if (p_.dmaTransfers) return hierarchicalDma(k, m, reduce);
  const int N = nodes_, L = maxLocal_;
  // A rank's posts on its progress thread: (N-1)*L on the critical path, not N + L - 2.
  k.latency += p_.fabric.alphaUs + localLatency() + (N - 1) * L * p_.stepUs;
  const double blChunk = localPerByte(std::min(m, static_cast<double>(chunk_)));
  const double perBlock = std::ceil(m / static_cast<double>(chunk_));
  const HierCpuTerms t = hierCpuTerms(m, static_cast<double>(L) * (N - 1), hierRankBlocks_, 1);
  // AllGather forwards a proxied chunk once it has arrived, so its last chunks' forwards
  // follow the fabric phase; ReduceScatter's reductions overlap instead.
  const double forwarded = reduce ? 0.0 : t.forwarded;
  const double rails = railScale(std::min(m, static_cast<double>(chunk_)));  // one chunk's
  double fabric = t.fabric;
  // see cost_model.hpp, half-duplex turns: the node's other connections keep the link busy
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

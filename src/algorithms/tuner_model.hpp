// The cost model's machinery (tuner.cc has the formulas and the algorithms on top): the terms
// of one call (Cost) and everything derived from its shape (Model). Internal to tuner.cc.
#pragma once

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "tuner.hpp"
#include "tuner_hier.hpp"

namespace sharc::algo::model {

// Shared-memory messages up to this size move at cache speed (one slot of the transport's
// FIFO, shm_endpoint.cc); 16 KiB when ranks outnumber cores. Larger ones were measured to
// depend on the two cores' placement (1.4 to 9 GB/s between runs), so the model takes the
// streaming figure for them and single-copy reads win.
inline constexpr double kFifoBytes = 64 << 10;
inline constexpr double kFifoBytesOversubscribed = 16 << 10;

// Read once: the tuner runs on every call, and this is a system call.
inline int detectCores() {
  static const int cores = [] {
    cpu_set_t cpus;
    if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0) return CPU_COUNT(&cpus);
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? static_cast<int>(n) : 1;
  }();
  return cores;
}

// Sums of the model's terms for one algorithm.
struct Cost {
  double latency = 0, transfer = 0, reduce = 0, pipeline = 0;
  int steps = 0;
  bool fabric = false;  // some step crossed nodes
  double total() const { return latency + transfer + reduce + pipeline; }
  // `times` more of the steps in `one` (identical steps: the ring's n-1).
  void addRepeated(const Cost& one, int times) {
    latency += times * one.latency;
    transfer += times * one.transfer;
    reduce += times * one.reduce;
    pipeline += times * one.pipeline;
    steps += times * one.steps;
    fabric = fabric || (times > 0 && one.fabric);
  }
};

// Everything derived once per call.
class Model {
 public:
  Model(const CallShape& shape, const TunerParams& p, size_t chunk) : p_(p) {
    n_ = std::max(1, shape.nranks);
    chunk_ = modelChunkBytes(chunk);
    const bool map =
        shape.locality == Locality::Network && shape.nodes != nullptr && shape.nodes->size() == n_;
    // Without a map, Network means one rank per node, the one-host localities one node.
    const bool spread = !map && shape.locality == Locality::Network;
    node_.assign(static_cast<size_t>(n_), 0);
    for (int r = 0; r < n_; ++r)
      node_[r] = map ? shape.nodes->nodeOf[static_cast<size_t>(r)] : spread ? r : 0;
    nodes_ = map ? shape.nodes->nodes() : spread ? n_ : 1;
    maxLocal_ = map ? shape.nodes->maxLocal() : spread ? 1 : n_;
    const int cores = p.cores > 0 ? p.cores : detectCores();
    o_ = std::max(1.0, static_cast<double>(maxLocal_) / std::max(1, cores));
    bl_ = p.local.usPerByte();
    bf_ = p.fabric.usPerByte();
    // One rank's own NICs (TunerParams::fabricRankShare of the node's): what a message that
    // crosses nodes moves at, at most, however idle the rest of the node's NICs are.
    bfRank_ = bf_ / std::clamp(p.fabricRankShare, 1e-9, 1.0);
    // Hierarchical's ranks by what they carry (even nodes: one class, N-1 blocks each); only
    // where two levels apply (the tuner runs on every call).
    hier_ = map && nodes_ > 1 && maxLocal_ > 1 ? hierClasses(*shape.nodes)
                                               : std::vector<HierClass>{{maxLocal_, nodes_ - 1}};
    hierRankBlocks_ = nodes_ - 1;
    if (bfRank_ > bf_ && map && maxLocal_ * nodes_ != n_)
      hierRankBlocks_ = hierBlocksAcross(hier_, nodes_);
    if (map && p.fabricHalfDuplex && !p.dmaTransfers) hierTwoWay_ = hierTwoWayPairs(*shape.nodes);
    if (p.fabricHalfDuplex && !p.dmaTransfers)  // read only by hierarchicalAllReduce's CPU path
      hierBothPhases_ = map ? hierBothPhasesBlocks(*shape.nodes) : 2 * maxLocal_ * (nodes_ - 1);
    c_ = 1.0 / (p.copyGbps * 1e3);
    cma_ = 1.0 / ((p.cmaGbps > 0 ? p.cmaGbps : p.copyGbps) * 1e3);
    blCache_ = 1.0 / (p.localCacheGbps * 1e3);
    g_ = 1.0 / (p.reduceGbps * 1e3);
  }

  // us per byte of a shared-memory message of x bytes: cached while small, else streamed,
  // and slowed by oversubscription (both ends must run for a FIFO to move).
  double localPerByte(double x) const {
    return x <= (o_ > 1 ? kFifoBytesOversubscribed : kFifoBytes) ? blCache_ : o_ * bl_;
  }
  // Latency of one round of local messages.
  double localLatency() const { return o_ * p_.local.alphaUs + (o_ > 1 ? o_ * p_.switchUs : 0); }

  // What one connection carries when a pair exchanges x bytes each way: where the fabric is
  // half duplex per connection (tcp;ofi_rxm), the two directions overlap only for the first
  // 64 KiB, then take turns: max(x, 2x - 64 KiB). Measured on 1,1 (recursive doubling, HTB-
  // shaped 100 and 200 Mbit/s, 32 KiB-4 MiB each way): 1.0, 1.1, 1.5, 1.8, 1.9, 1.9 times the
  // one-way time against 1.0, 1.0, 1.5, 1.75, 1.88, 1.97 from this rule.
  double duplexLoad(double x) const {
    return p_.fabricHalfDuplex ? std::max(x, 2 * x - kDuplexOverlapBytes) : x;
  }
  // The same for x bytes each way cut in the call's chunks: the builders cut a block into
  // equal pieces (chunksFor, evenBlock), and each piece's first 64 KiB each way overlap.
  double chunkedDuplexLoad(double x) const {
    const double pieces = std::max(1.0, std::ceil(x / static_cast<double>(chunk_)));
    return pieces * duplexLoad(x / pieces);
  }

  // A message of x bytes is cut into stripePieces(x) pieces, one per rail (StripedEndpoint):
  // under 32 KiB one, on the first rail, so its fabric time, at the node's and at the rank's
  // rate, is this many times its bytes' (1 once it is cut over every rail).
  double railScale(double x) const { return algo::railScale(p_, x); }

  double stepUs() const { return p_.stepUs; }
  bool dmaTransfers() const { return p_.dmaTransfers; }

  // One message of x bytes on a local edge.
  double localWire(double x) const { return o_ * x * localPerByte(x); }
  // One message of x bytes on a crossing edge of the ring (r -> r+1): the NIC of the node
  // with the most crossing edges carries that many at once, and the sender's own NICs (its
  // share of the node's, fabricRankShare) carry its one; a 2-rank ring exchanges over one
  // connection (half duplex: both directions in turn).
  double ringCrossWire(double x) const {
    std::vector<int> out(static_cast<size_t>(nodes_), 0), in(static_cast<size_t>(nodes_), 0);
    int most = 0;
    for (int r = 0; r < n_; ++r) {
      const int q = (r + 1) % n_;
      if (node_[r] == node_[q]) continue;
      most = std::max({most, ++out[node_[r]], ++in[node_[q]]});
    }
    double load = most * x;
    if (n_ == 2 && most > 0) load = std::max(load, duplexLoad(x));
    return most > 0 ? std::max(load * bf_, x * bfRank_) * railScale(x) : load * bf_;
  }

  // One chunk through the ring schedule's dependencies (all_gather.cc, reduce_scatter.cc),
  // step by step: rank r posts step k's send (s) once step k-1's chunk is in (and reduced);
  // the chunk reaches r+1 after the edge's wire time and alpha. ReduceScatter receives into
  // one of two buffers, the one its send of step k-1 read, so its receive of step k completes
  // no earlier than that send's delivery. `wire` is one chunk's time on a local and on a
  // crossing edge, `red` one chunk's reduction. Ranks numbered node by node on nodes of L
  // ranks repeat node after node, so only L positions are followed; uneven nodes follow all
  // n ranks (O(n^2): the planner's uneven groups are small).
  double ringChain(double wireLocal, double wireCross, double red, bool reduce) const {
    bool even = n_ % nodes_ == 0 && maxLocal_ * nodes_ == n_;
    for (int r = 0; r < n_ && even; ++r) even = node_[r] == r / maxLocal_;
    const int width = even ? maxLocal_ : n_;
    const auto crossIn = [&](int i) {  // the edge into position i from the one before it
      return even ? (i == 0 && nodes_ > 1) : node_[i] != node_[(i + n_ - 1) % n_];
    };
    const double s = p_.stepUs, aL = localLatency(), aF = p_.fabric.alphaUs;
    std::vector<double> post(static_cast<size_t>(width), s), done(static_cast<size_t>(width));
    std::vector<double> delivered(static_cast<size_t>(width), 0), nextPost(post);
    for (int k = 0; k < n_ - 1; ++k) {
      for (int i = 0; i < width; ++i) {
        const int from = (i + width - 1) % width;
        const bool cross = crossIn(i);
        const double arrival = post[from] + (cross ? wireCross + aF : wireLocal + aL);
        // the receive of step k is posted once this rank's send of step k-1 was delivered
        done[i] = std::max(arrival, reduce && k >= 2 ? delivered[i] : 0.0) + (reduce ? red : 0);
      }
      for (int i = 0; i < width; ++i) {
        const bool crossOut = crossIn((i + 1) % width);
        delivered[i] = post[i] + (crossOut ? wireCross + aF : wireLocal + aL);
        nextPost[i] = done[i] + s;
      }
      std::swap(post, nextPost);
    }
    return *std::max_element(done.begin(), done.end());
  }

  // Latency along the ring's critical chain: n-1 consecutive edges r -> r+1, the slowest
  // chain leaving out one local edge where there is one. ReduceScatter receives into one of
  // two buffers only once the send that read it is delivered (reduce_scatter.cc), so a rank
  // whose edge crosses nodes pays that edge every other step as well.
  double ringChainAlpha(bool reduce) const {
    int cross = 0;
    for (int r = 0; r < n_; ++r) cross += node_[r] != node_[(r + 1) % n_] ? 1 : 0;
    const int fabricHops = std::min(cross, n_ - 1);
    double chain = fabricHops * p_.fabric.alphaUs + (n_ - 1 - fabricHops) * localLatency();
    if (reduce && cross > 0 && n_ > 2)
      chain = std::max(chain, ((n_ - 2) / 2 + 1) * (p_.fabric.alphaUs + p_.stepUs) -
                                  (n_ - 1) * p_.stepUs + localLatency());
    return chain;
  }

  int n() const { return n_; }
  size_t chunk() const { return chunk_; }
  int nodes() const { return nodes_; }
  int maxLocal() const { return maxLocal_; }

  // One step: every rank r sends x bytes to peer(r) (and receives as much).
  void step(Cost& k, const std::function<int(int)>& peer, double x, bool reduce, bool chunked,
            bool fill = true) const {
    bool anyLocal = false, anyCross = false, exchange = false;
    std::vector<double> out(static_cast<size_t>(nodes_), 0), in(static_cast<size_t>(nodes_), 0);
    std::vector<double> rankIn(static_cast<size_t>(n_), 0);  // what each rank's NICs take in
    for (int r = 0; r < n_; ++r) {
      const int q = peer(r);
      // r^d on a group that is not a power of two (a forced or folded recursive doubling):
      // no partner there.
      if (q == r || q < 0 || q >= n_) continue;
      if (node_[r] == node_[q]) {
        anyLocal = true;
      } else {
        anyCross = true;
        exchange = exchange || peer(q) == r;
        out[node_[r]] += x;
        in[node_[q]] += x;
        rankIn[q] += x;
      }
    }
    double load = 0;
    for (int i = 0; i < nodes_; ++i) load = std::max({load, out[i], in[i]});
    // A pair that exchanges over one connection moves its two directions in turn where the
    // fabric is half duplex per connection (tcp): that connection carries duplexLoad(x), chunk
    // by chunk where the step is cut in chunks (each message's first 64 KiB each way overlap;
    // the replay: a 2-rank ring of 16 MiB in 256 KiB chunks takes 1.75x, not 1.99x, the
    // one-way wire).
    if (exchange) load = std::max(load, chunked ? chunkedDuplexLoad(x) : duplexLoad(x));
    // The busiest rank's own NICs: one message out (x), and what it takes in.
    const double rankLoad =
        anyCross ? std::max(x, *std::max_element(rankIn.begin(), rankIn.end())) : 0.0;
    const double message = chunked ? std::min(x, static_cast<double>(chunk_)) : x;
    const double cross = std::max(load * bf_, rankLoad * bfRank_) * railScale(message);
    const double wire = std::max(anyLocal ? o_ * x * localPerByte(x) : 0.0, cross);
    k.latency += (anyCross ? p_.fabric.alphaUs : localLatency()) + p_.stepUs;
    // Beyond one chunk's worth, an unchunked message's receive copy no longer overlaps the wire.
    // (Not where DMA moves the bytes: they land in place, no receive copy on the cores.)
    const bool copied = !chunked && !p_.dmaTransfers;
    k.transfer += wire + (copied ? o_ * std::max(0.0, x - static_cast<double>(chunk_)) * c_ : 0.0);
    if (reduce) k.reduce += o_ * x * g_;
    if (chunked && fill)
      pipeline(k, x, anyCross ? std::max(cross / std::max(x, 1.0), bl_) : o_ * localPerByte(x),
               reduce);
    k.fabric = k.fabric || anyCross;
    ++k.steps;
  }

  // Processor sharing on one node's NICs: the messages of `senders` (each x bytes, posted at
  // their sender's t + s) share its rate equally, each at most at its rank's own NICs' rate
  // (fabricRankShare); done[sender] = when each one's last byte is out.
  void share(std::vector<int>& senders, const std::vector<double>& t, double x,
             std::vector<double>& done, double& free) const {
    if (senders.empty()) return;
    const auto start = [&](int r) { return t[static_cast<size_t>(r)] + p_.stepUs; };
    std::sort(senders.begin(), senders.end(), [&](int a, int b) { return start(a) < start(b); });
    std::vector<std::pair<double, int>> active;  // bytes left, sender
    double now = start(senders[0]);
    // What is still on the NIC from earlier steps goes first (as a whole: the messages that
    // finish last, the ones a chain waits for, are late by all of it).
    const double backlog = std::max(0.0, free - now);
    size_t next = 0;
    while (next < senders.size() || !active.empty()) {
      if (active.empty()) now = std::max(now, start(senders[next]));
      while (next < senders.size() && start(senders[next]) <= now)
        active.push_back({x, senders[next++]});
      const double k = static_cast<double>(active.size());
      double least = active[0].first;
      for (const auto& f : active) least = std::min(least, f.first);
      const double perByte = std::max(bf_ * k, bfRank_) * railScale(x);  // us per byte of one
      const double ends = now + least * perByte;
      const double arrives = next < senders.size() ? start(senders[next]) : ends;
      const double until = std::min(ends, arrives);
      const double moved = (until - now) / perByte;
      now = until;
      for (size_t i = 0; i < active.size();) {
        active[i].first -= moved;
        if (active[i].first <= 1e-9 * x) {
          done[static_cast<size_t>(active[i].second)] = now + backlog;
          active[i] = active.back();
          active.pop_back();
        } else {
          ++i;
        }
      }
    }
    // The node's NICs' own work (a rank held to its share leaves the rest of them free).
    free = std::max(free, start(senders[0])) +
           static_cast<double>(senders.size()) * x * bf_ * railScale(x);
  }

  // The log-step algorithms (recursive doubling/halving, Bruck): rank r's step k sends to
  // to(r) once its step k-1 is done and completes once the message from from(r) is in (and
  // reduced). The call is the longest chain through those dependencies, T_k(r) = max(T_k-1(r),
  // T_k-1(from(r)) + s + edge) (+ the reduction): on nodes of several ranks a chain of short
  // distances crosses nodes only where it passes a node boundary (the ring's argument), so it
  // pays a fabric alpha, and the NIC shared by that step's crossing messages, only there.
  struct LogStep {
    std::function<int(int)> to, from;
    double x;
    bool reduce;
    bool afterSend = false;  // the step's reduction waits for its own send (AllReduce in place)
  };
  void logSteps(Cost& k, const std::vector<LogStep>& steps) const {
    const auto n = static_cast<size_t>(n_);
    const bool rankNics = bfRank_ > bf_;
    // A rank's message of step k starts once its receives up to step k-1 are in, not its
    // sends: a rank at a node boundary (Bruck) may start its next crossing message while its
    // last one is still going, and the two share its own NICs fairly (the replay's rule), the
    // earlier one ending later than its turn alone. The chain depends on those ends and they
    // on the chain's start times: taken first one after the other, then (twice) from the
    // start times of the pass before, shared fairly (fairEnds).
    std::vector<std::vector<double>> startAt(steps.size(), std::vector<double>(n, -1));
    std::vector<std::vector<double>> outEnd, inEnd;
    std::vector<double> t, lat, post, red;
    const int passes = rankNics ? 3 : 1;
    for (int pass = 0; pass < passes; ++pass) {
      const bool fair = pass > 0;
      if (fair) fairShares(steps, startAt, outEnd, inEnd);
      k.steps -= pass > 0 ? static_cast<int>(steps.size()) : 0;
      logPass(k, steps, fair ? &outEnd : nullptr, fair ? &inEnd : nullptr, startAt, t, lat, post,
              red);
    }
    const auto last = static_cast<size_t>(std::max_element(t.begin(), t.end()) - t.begin());
    k.latency += lat[last] + post[last];
    k.reduce += red[last];
    k.transfer += t[last] - lat[last] - post[last] - red[last];
  }

  // Fair sharing of one link (us per byte `perByte`) among messages (start, bytes): when each
  // one's last byte is through.
  static std::vector<double> fairEnds(const std::vector<std::pair<double, double>>& msgs,
                                      double perByte) {
    const size_t k = msgs.size();
    std::vector<double> end(k, 0), left(k);
    std::vector<size_t> order(k), active;
    for (size_t i = 0; i < k; ++i) order[i] = i, left[i] = msgs[i].second;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return msgs[a].first < msgs[b].first; });
    double now = 0;
    size_t next = 0;
    while (next < k || !active.empty()) {
      if (active.empty()) now = std::max(now, msgs[order[next]].first);
      while (next < k && msgs[order[next]].first <= now) active.push_back(order[next++]);
      const double each = perByte * static_cast<double>(active.size());  // us per byte
      double least = std::numeric_limits<double>::infinity();
      for (size_t a : active) least = std::min(least, left[a]);
      double until = now + least * each;
      if (next < k) until = std::min(until, msgs[order[next]].first);
      const double moved = (until - now) / each;
      now = until;
      for (size_t i = 0; i < active.size();) {
        left[active[i]] -= moved;
        if (left[active[i]] <= 1e-9 * msgs[active[i]].second) {
          end[active[i]] = now;
          active[i] = active.back();
          active.pop_back();
        } else {
          ++i;
        }
      }
    }
    return end;
  }

  // Each rank's own NICs, out and in, shared fairly among its crossing messages of every
  // step, started when the last pass said: how long each took, per step and sender.
  void fairShares(const std::vector<LogStep>& steps,
                  const std::vector<std::vector<double>>& startAt,
                  std::vector<std::vector<double>>& outTook,
                  std::vector<std::vector<double>>& inTook) const {
    const auto n = static_cast<size_t>(n_);
    outTook.assign(steps.size(), std::vector<double>(n, 0));
    inTook = outTook;
    std::vector<std::vector<std::pair<double, double>>> out(n), in(n);
    std::vector<std::vector<std::pair<size_t, int>>> outId(n), inId(n);  // step, sender
    for (size_t i = 0; i < steps.size(); ++i)
      for (int r = 0; r < n_; ++r) {
        const double at = startAt[i][static_cast<size_t>(r)];
        if (at < 0) continue;
        const auto q = static_cast<size_t>(steps[i].to(r));
        const double bytes = steps[i].x * railScale(steps[i].x);  // at the rank's rate
        out[static_cast<size_t>(r)].push_back({at, bytes});
        outId[static_cast<size_t>(r)].push_back({i, r});
        in[q].push_back({at, bytes});
        inId[q].push_back({i, r});
      }
    for (size_t r = 0; r < n; ++r) {
      const auto o = fairEnds(out[r], bfRank_), e = fairEnds(in[r], bfRank_);
      for (size_t j = 0; j < o.size(); ++j)
        outTook[outId[r][j].first][static_cast<size_t>(outId[r][j].second)] =
            o[j] - out[r][j].first;
      for (size_t j = 0; j < e.size(); ++j)
        inTook[inId[r][j].first][static_cast<size_t>(inId[r][j].second)] = e[j] - in[r][j].first;
    }
  }

  // One pass through the steps (see logSteps): the longest chain to each rank, with each
  // rank's own NICs taken one message after the other (outTook null) or as fairShares says.
  void logPass(Cost& k, const std::vector<LogStep>& steps,
               const std::vector<std::vector<double>>* outTook,
               const std::vector<std::vector<double>>* inTook,
               std::vector<std::vector<double>>& startAt, std::vector<double>& t,
               std::vector<double>& lat, std::vector<double>& post,
               std::vector<double>& red) const {
    const auto n = static_cast<size_t>(n_);
    // Along the longest chain to each rank: total, alphas, posts, reductions.
    t.assign(n, 0), lat.assign(n, 0), post.assign(n, 0), red.assign(n, 0);
    std::vector<std::vector<int>> egress(static_cast<size_t>(nodes_)),
        ingress(static_cast<size_t>(nodes_));
    std::vector<double> outDone(n), inDone(n);
    // When each NIC has moved every byte of the steps so far: a step's messages that start
    // while an earlier step's are still on the NIC queue behind them (the chain of short
    // distances runs ahead of the messages that cross).
    std::vector<double> outFree(static_cast<size_t>(nodes_), 0),
        inFree(static_cast<size_t>(nodes_), 0);
    // The same for each rank's own NICs where it drives only its share of the node's (on the
    // first pass: one message after the other).
    const bool rankNics = bfRank_ > bf_;
    std::vector<double> rankOutFree(rankNics ? n : 0, 0), rankInFree(rankNics ? n : 0, 0);
    for (size_t idx = 0; idx < steps.size(); ++idx) {
      const LogStep& st = steps[idx];
      // Each node's NIC shares its rate equally among the messages on it (processor
      // sharing, the replay's fair share): a message that starts behind others on a NIC ends
      // when its share of the rate has moved it.
      for (auto& v : egress) v.clear();
      for (auto& v : ingress) v.clear();
      bool exchange = false, anyCross = false;
      for (int r = 0; r < n_; ++r) {
        const int q = st.to(r);
        if (q == r || q < 0 || q >= n_ || node_[r] == node_[q]) continue;
        anyCross = true;
        exchange = exchange || st.to(q) == r;
        egress[node_[r]].push_back(r);
        ingress[node_[q]].push_back(r);
      }
      for (int i = 0; i < nodes_; ++i) {
        share(egress[i], t, st.x, outDone, outFree[i]);
        share(ingress[i], t, st.x, inDone, inFree[i]);
      }
      if (rankNics) {
        for (int r = 0; r < n_; ++r) {
          const int q = st.to(r);
          if (q == r || q < 0 || q >= n_ || node_[r] == node_[q]) continue;
          const auto i = static_cast<size_t>(r);
          const double start = t[i] + p_.stepUs, own = st.x * bfRank_ * railScale(st.x);
          startAt[idx][i] = start;
          double out = start + own, in = start + own;
          if (outTook) {
            out = start + std::max(own, (*outTook)[idx][i]);
            in = start + std::max(own, (*inTook)[idx][i]);
          } else {
            double& o = rankOutFree[i];
            double& e = rankInFree[static_cast<size_t>(q)];
            out = o = std::max(o, start) + own;
            in = e = std::max(e, start) + own;
          }
          outDone[i] = std::max(outDone[i], out);
          inDone[i] = std::max(inDone[i], in);
        }
      }
      const double own =
          std::max((exchange ? duplexLoad(st.x) : st.x) * bf_, st.x * bfRank_) * railScale(st.x);
      // the receive copy beyond one chunk (step()), not where DMA moves the bytes
      const double copy =
          p_.dmaTransfers ? 0.0 : o_ * std::max(0.0, st.x - static_cast<double>(chunk_)) * c_;
      const double reduce = st.reduce ? o_ * st.x * g_ : 0.0;
      const double local = o_ * st.x * localPerByte(st.x);
      const std::vector<double> t0 = t, lat0 = lat, post0 = post, red0 = red;
      for (int r = 0; r < n_; ++r) {
        const int q = st.from(r);
        if (q == r || q < 0 || q >= n_) continue;  // no partner this step
        double alpha = localLatency(), sent = t0[q] + p_.stepUs + local;
        if (node_[q] != node_[r]) {
          alpha = p_.fabric.alphaUs;
          sent = std::max({t0[q] + p_.stepUs + own, outDone[q], inDone[q]});
        }
        const double via = sent + alpha + copy;
        if (via > t0[r]) {
          t[r] = via;
          lat[r] = lat0[q] + alpha;
          post[r] = post0[q] + p_.stepUs;
          red[r] = red0[q];
        }
        // recursive_doubling's AllReduce reduces into the buffer its send reads: not before
        // that send is delivered, so a rank's sends never overlap
        const int to = st.to(r);
        if (st.afterSend && to != r && to >= 0 && to < n_) {
          const double mine =
              node_[to] != node_[r]
                  ? std::max({t0[r] + p_.stepUs + own, outDone[r], inDone[r]}) + p_.fabric.alphaUs
                  : t0[r] + p_.stepUs + local + localLatency();
          t[r] = std::max(t[r], mine);
        }
        t[r] += reduce;
        red[r] += reduce;
      }
      k.fabric = k.fabric || anyCross;
      ++k.steps;
    }
  }

  // Extra messages of a step cut into chunks, and the fill (counted once, the largest).
  void pipeline(Cost& k, double x, double perByte, bool reduce) const {
    const double chunks = std::ceil(x / static_cast<double>(chunk_));
    if (chunks <= 1) return;  // one message: its transfer is already counted whole
    k.pipeline += (chunks - 1) * p_.stepUs;
    fill_ = std::max(fill_, static_cast<double>(chunk_) * (perByte + (reduce ? o_ * g_ : 0.0)));
  }
  double fill() const { return fill_; }

  // Single-copy handshakes (each a message to and from every peer) plus `bytes` copied (and
  // `reduced` reduced) by each rank.
  void singleCopy(Cost& k, int handshakes, double bytes, double reduced) const {
    k.latency += handshakes * (localLatency() + (n_ - 1) * p_.stepUs);
    k.transfer += o_ * bytes * cma_;  // cross-memory attach: pins the peer's pages, then copies
    k.reduce += o_ * reduced * g_;
    k.steps += handshakes;
  }

  void copy(Cost& k, double bytes) const { k.transfer += o_ * bytes * c_; }

  // The hierarchical schedules (their cost is in tuner_hier_cost.hpp): the longest paths of
  // one phase, for blocks of m bytes.
  struct HierPaths {
    double total = 0;                          // the longest
    double serial = 0;                         // one phase after the other, as the window allows
    double local = 0, fabric = 0, thread = 0;  // each resource's work
    // serial = head + across + rest: before the rank's NICs start, while they carry the
    // phase's blocks, after (for AllReduce's two phases back to back)
    double head = 0, across = 0, rest = 0;
  };
  HierPaths hierarchicalPaths(double m, bool reduce) const;
  // The CPU path's work terms for blocks of m bytes: the node link's (NODE_BLOCKS blocks on
  // the busiest link, RANK_BLOCKS on a rank's own NICs), the forwards of each block's last
  // chunk that follow it (AllGather's), and PHASES phases' node-local copies per rank.
  struct HierCpuTerms {
    double fabric = 0, forwarded = 0, local = 0;
  };
  HierCpuTerms hierCpuTerms(double m, double nodeBlocks, double rankBlocks, int phases) const;
  void hierarchicalDma(Cost& k, double m, bool reduce) const;
  void hierarchicalAllReduce(Cost& k, double m) const;
  void hierarchical(Cost& k, double m, bool reduce) const;

  // Direct: one step with a message to every peer at once.
  void direct(Cost& k, double x) const {
    double load = 0, rankLoad = 0;
    int localPeers = 0;
    for (int r = 0; r < n_; ++r) {
      int here = 0;
      for (int q = 0; q < n_; ++q) here += node_[q] == node_[r] ? 1 : 0;
      load = std::max(load, here * static_cast<double>(n_ - here) * x);
      rankLoad = std::max(rankLoad, static_cast<double>(n_ - here) * x);  // its own NICs
      localPeers = std::max(localPeers, here - 1);
    }
    if (load > 0) load = std::max(load, duplexLoad(x));  // see step()
    k.latency += (load > 0 ? p_.fabric.alphaUs : localLatency()) + (n_ - 1) * p_.stepUs;
    const double rails = railScale(std::min(x, static_cast<double>(chunk_)));
    k.transfer += std::max(
        {o_ * localPeers * x * localPerByte(x), load * bf_ * rails, rankLoad * bfRank_ * rails});
    pipeline(k, x, o_ * localPerByte(x), false);
    k.fabric = load > 0;
    ++k.steps;
  }

 private:
  const TunerParams& p_;
  int n_ = 1, nodes_ = 1, maxLocal_ = 1, hierRankBlocks_ = 0;
  size_t chunk_ = 1u << 20;
  double o_ = 1, bl_ = 0, bf_ = 0, bfRank_ = 0, c_ = 0, g_ = 0, blCache_ = 0, cma_ = 0;
  std::vector<int> node_;
  std::vector<HierClass> hier_;
  // Some pair of ranks on two nodes sends both ways in hierarchical's inter-node phase
  // (hierTwoWayPairs); computed where the fabric is half duplex per connection.
  bool hierTwoWay_ = false;
  int hierBothPhases_ = 0;  // hierBothPhasesBlocks: the busiest node link's blocks each way
  mutable double fill_ = 0;
};

}  // namespace sharc::algo::model

// The cost model. Notation: n ranks on N nodes, at most L on one node, m bytes per rank's
// block (AllGather/ReduceScatter: bytesPerRank; AllReduce: the vector V split n ways),
// a = alpha, b = beta (us/byte) of the link class a transfer uses, c = 1/copy.gbps,
// g = 1/reduce.gbps, s = step_us, o = max(1, L / cores) (ranks sharing a core serialise
// their local copies, reductions and wake-ups).
//
// One step in which every rank r sends `x` bytes to peer(r) costs
//   latency  a_step + s            a_step = fabric.alpha if any pair crosses nodes, else
//   o*local.alpha transfer max(o*x*b_local [if some pair is on one node], load*b_fabric)
//            load = most bytes any node sends or receives over its one fabric link that step
//            (a node whose ranks all have off-node peers carries L*x)
//   reduce   o*x*g                 (ReduceScatter/AllReduce steps)
//   unchunked steps (recursive doubling/halving, Bruck: whole blocks in one message) add
//   o*max(0, x - chunk)*c: beyond a chunk the receive-side copy no longer overlaps the wire
//   as it does for pipelined chunks.
// Chunked (pipelined) algorithms add per step (ceil(x/chunk) - 1)*s (one more message per
// chunk) and, when a block spans several chunks, once the pipeline fill: chunk*(b + g) of the
// slowest link. Every call adds s for building its schedule.
//
//   AllGather     Ring               n-1 steps to r+1 of m
//                 RecursiveDoubling  step k: partner r^2^k, 2^k*m (unchunked, n = 2^j)
//                 Bruck              step k: to r-2^k, min(2^k, n-2^k)*m (unchunked) + o*n*m*c
//                 rotation Direct             one step, m to each of n-1 peers: a + (n-1)*s +
//                 o*(n-1)*m*b DirectWrite        two handshakes 2*(o*a + (n-1)*s) + o*(n-1)*m*c
//                 (one copy) Hierarchical       direct to a proxy on every other node, forwarded
//                 within the
//                                    node as chunks arrive (overlapped): a_f + (N-1)*s + o*a +
//                                    (L-1)*s + max(L*(N-1)*m*b_f [(N-1)/N of the total per node
//                                    link], o*(L-1)*N*m*b_local)
//   ReduceScatter Ring               n-1 steps to r+1 of m, reducing m
//                 RecursiveDoubling  step k: distance n/2^(k+1), that many blocks (unchunked)
//                 Bruck              d = floorPow2(n-1) down to 1: to r+d, (length-d)*m,
//                                    length = d (unchunked) + o*n*m*c rotation
//                 DirectRead         2*(o*a + (n-1)*s) + o*(n-1)*m*(c + g)
//                 Hierarchical       the same transfers in reverse, plus o*(n-1)*m*g
//   AllReduce     Ring               ReduceScatter ring + AllGather ring on V/n blocks
//                 RecursiveDoubling  ceil(log2 n) steps of V bytes, reducing V (unchunked)
//                 DirectRead         4*(o*a + (n-1)*s) + o*(n-1)*m*(2c + g)
//                 Hierarchical       its ReduceScatter then its AllGather on V/n blocks
//
// Fabric defaults come from the host (TunerParams::fromConfig): b_fabric from the line rate
// of the NICs sharc uses (sysfs or SHARC_NIC_MBITS, summed over rails) times TCP's payload
// share of a frame; on a half-duplex fabric (tcp) a pair that exchanges more than the eager
// size over one connection takes turns: that connection carries 2x (fabric.half_duplex).
// A forced algorithm is costed as the schedule that really runs for it (runsAs). The
// single-copy algorithms' c is 1/cma.gbps where set (cross-memory attach pins the peer's
// pages: 0.65 GB/s against a 13.5 GB/s memcpy on the project's host, --calibrate -N 2).
//
// For flat algorithms on several nodes the fabric load follows from the rank order: on a
// ring numbered node by node each node has one edge out, so its link carries (n-1)/n of the
// total for AllGather; interleaved orders cross more often and load the link more.
#include "tuner.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>

#include "core/config.hpp"
#include "hierarchical_pattern.hpp"
#include "patterns.hpp"

namespace sharc::algo {
namespace {

// Defaults, measured on the project's 2-core machine with `sharc-perf --calibrate` (medians
// of 15 broadcast ping-pongs; figures moved 20-40% between runs, so they are rounded):
//   SHARC_SHM=0 sharc-perf --calibrate F -N 2 (shm provider, CMA): 8 B ping-pong 8.7 us per
//     call, 16 MiB 4340 us -> local 3.9 GB/s (3.1 GB/s with -N 4); memcpy 16 MiB 8.2 GB/s;
//     float32 sum kernel 10.3 GB/s of one input. A 1-rank call costs 8-12 us
//     (sharc-perf all_reduce -b 8 -e 8 -n 2000, no -N): two step overheads of ~4 us, which
//     leaves ~1-3 us of local latency in the 8.7 us ping-pong.
//   tools/emulate-cluster.sh --nodes 2,2 -- env SHARC_SHM=0 sharc-perf --calibrate F: fabric
//     (tcp over veth, unshaped) 8 B ping-pong 54.6 us -> alpha 41 us, 16 MiB -> 1.8 GB/s.
//   Those small-call figures include the perf loop on a machine busy with other builds; the
//   latencies below follow the quieter selector measurements instead (2 ranks, mpirun,
//   -n 200: recursive doubling 8.5 us, direct write 4.7 us at 32 KiB gathered), which put
//   alpha + step near 2.5 us and the direct-write crossover near 16-32 KiB as measured.
constexpr LinkParams kLocal{1.5, 3.5};
constexpr LinkParams kFabric{40.0, 1.8};
constexpr double kEagerBytes = 16 << 10;
constexpr double kCopyGbps = 8.0;
// Shared-memory messages up to this size move at cache speed (one slot of the transport's
// FIFO, shm_endpoint.cc); 16 KiB when ranks outnumber cores. Larger ones were measured to
// depend on the two cores' placement (1.4 to 9 GB/s between runs), so the model takes the
// streaming figure for them and single-copy reads win.
constexpr double kFifoBytes = 64 << 10;
constexpr double kFifoBytesOversubscribed = 16 << 10;
constexpr double kReduceGbps = 10.0;
constexpr double kStepUs = 1.0;

// Direct algorithms keep n-1 transfers in flight per rank: only for small groups.
constexpr int kDirectMaxRanks = 8;

// Read once: the tuner runs on every call, and this is a system call.
int detectCores() {
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
    chunk_ = std::max<size_t>(chunk, 4096);
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

  // Whether an exchange of x bytes each way over one connection takes turns: on a half-duplex
  // fabric, for messages past the eager size (rxm's 16 KiB buffers; larger ones go by
  // rendezvous, where the turns were measured; smaller ones were not seen to).
  bool halfDuplex(double x) const { return p_.fabricHalfDuplex && x > kEagerBytes; }

  double stepUs() const { return p_.stepUs; }

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
  int nodes() const { return nodes_; }
  int maxLocal() const { return maxLocal_; }

  // One step: every rank r sends x bytes to peer(r) (and receives as much).
  void step(Cost& k, const std::function<int(int)>& peer, double x, bool reduce,
            bool chunked) const {
    bool anyLocal = false, anyCross = false, exchange = false;
    std::vector<double> out(static_cast<size_t>(nodes_), 0), in(static_cast<size_t>(nodes_), 0);
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
      }
    }
    double load = 0;
    for (int i = 0; i < nodes_; ++i) load = std::max({load, out[i], in[i]});
    // A pair that exchanges over one connection moves its two directions in turn where the
    // fabric is half duplex per connection (tcp): that connection carries 2x.
    if (exchange && halfDuplex(x)) load = std::max(load, 2 * x);
    const double wire = std::max(anyLocal ? o_ * x * localPerByte(x) : 0.0, load * bf_);
    k.latency += (anyCross ? p_.fabric.alphaUs : localLatency()) + p_.stepUs;
    // Beyond one chunk's worth, an unchunked message's receive copy no longer overlaps the wire.
    k.transfer += wire + (chunked ? 0.0 : o_ * std::max(0.0, x - static_cast<double>(chunk_)) * c_);
    if (reduce) k.reduce += o_ * x * g_;
    if (chunked)
      pipeline(k, x, anyCross ? std::max(bf_ * load / std::max(x, 1.0), bl_) : o_ * localPerByte(x),
               reduce);
    k.fabric = k.fabric || anyCross;
    ++k.steps;
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

  // Hierarchical (hierarchical.cc): each rank sends its block straight to its proxy on every
  // other node, and every chunk a rank holds goes on to its node peers as soon as it is there,
  // so the node phase overlaps the fabric phase: one fabric hop and one local hop of latency,
  // the slower of the two loads.
  void hierarchical(Cost& k, double m, bool reduce) const {
    const int N = nodes_, L = maxLocal_;
    const double fabricBytes = static_cast<double>(L) * (N - 1) * m;  // per node link
    const double localBytes = static_cast<double>(L - 1) * N * m;     // per rank
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
    const double forwarded =
        reduce ? 0.0 : o_ * static_cast<double>(L - 1) * (N - 1) * m * blChunk;
    k.transfer += std::max(fabricBytes * bf_ + forwarded / std::max(1.0, perBlock),
                           o_ * localBytes * blChunk);
    if (reduce) k.reduce += o_ * (n_ - 1) * m * g_;
    k.pipeline += std::max(0.0, perBlock - 1) * ((N - 1) + (L - 1) * N) * p_.stepUs;
    if (perBlock > 1)
      fill_ = std::max(
          fill_, static_cast<double>(chunk_) * (L * bf_ + o_ * blChunk + (reduce ? o_ * g_ : 0.0)));
    k.fabric = true;
    k.steps += 2;
  }

  // Direct: one step with a message to every peer at once.
  void direct(Cost& k, double x) const {
    double load = 0;
    int localPeers = 0;
    for (int r = 0; r < n_; ++r) {
      int here = 0;
      for (int q = 0; q < n_; ++q) here += node_[q] == node_[r] ? 1 : 0;
      load = std::max(load, here * static_cast<double>(n_ - here) * x);
      localPeers = std::max(localPeers, here - 1);
    }
    if (load > 0 && halfDuplex(x)) load = std::max(load, 2 * x);  // see step()
    k.latency += (load > 0 ? p_.fabric.alphaUs : localLatency()) + (n_ - 1) * p_.stepUs;
    k.transfer += std::max(o_ * localPeers * x * localPerByte(x), load * bf_);
    pipeline(k, x, o_ * localPerByte(x), false);
    k.fabric = load > 0;
    ++k.steps;
  }

 private:
  const TunerParams& p_;
  int n_ = 1, nodes_ = 1, maxLocal_ = 1;
  size_t chunk_ = 1u << 20;
  double o_ = 1, bl_ = 0, bf_ = 0, c_ = 0, g_ = 0, blCache_ = 0, cma_ = 0;
  std::vector<int> node_;
  mutable double fill_ = 0;
};

bool unchunked(Algorithm a) {
  return a == Algorithm::RecursiveDoubling || a == Algorithm::Bruck;
}

// Bytes the whole call moves in one message for the unchunked algorithms.
size_t wholeMessage(const CallShape& s) {
  return s.kind == CollKind::AllReduce ? s.bytesPerRank
                                       : s.bytesPerRank * static_cast<size_t>(s.nranks);
}

// The ring's n-1 steps are alike (every rank to r+1): costed once, so that the model stays
// O(n) for the thousands of ranks sharc-plan asks about.
void ringSteps(const Model& md, Cost& k, double m, bool reduce) {
  const int n = md.n();
  if (n < 2) return;
  Cost one;
  md.step(
      one, [n](int r) { return mod(r + 1, n); }, m, reduce, true);
  // A step waits only for the hop before it, not for every pair of the step: the n-1 steps
  // pay the latencies along one chain of n-1 consecutive ring edges, not n-1 times the
  // slowest (on nodes of L ranks numbered node by node only ~1 hop in L crosses nodes).
  const double stepAlpha = one.latency - md.stepUs();
  k.addRepeated(one, n - 1);
  k.latency += md.ringChainAlpha(reduce) - (n - 1) * stepAlpha;
}

void allGather(const Model& md, Cost& k, Algorithm a, double m) {
  const int n = md.n();
  switch (a) {
    case Algorithm::RecursiveDoubling:
      for (int d = 1; d < n; d <<= 1)
        md.step(
            k, [d](int r) { return r ^ d; }, d * m, false, false);
      return;
    case Algorithm::Bruck:
      for (int d = 1; d < n; d <<= 1)
        md.step(
            k, [d, n](int r) { return mod(r - d, n); }, std::min(d, n - d) * m, false, false);
      md.copy(k, n * m);
      return;
    case Algorithm::Direct: md.direct(k, m); return;
    case Algorithm::DirectRead:
    case Algorithm::DirectWrite: md.singleCopy(k, 2, (n - 1) * m, 0); return;
    case Algorithm::Hierarchical: md.hierarchical(k, m, false); return;
    default: ringSteps(md, k, m, false); return;
  }
}

void reduceScatter(const Model& md, Cost& k, Algorithm a, double m) {
  const int n = md.n();
  switch (a) {
    case Algorithm::RecursiveDoubling:
      for (int d = n / 2; d >= 1; d >>= 1)
        md.step(
            k, [d](int r) { return r ^ d; }, d * m, true, false);
      return;
    case Algorithm::Bruck: {
      // reduce_scatter.cc's reversed Bruck: a rotated copy of the n blocks, then distances
      // floorPow2(n-1) down to 1, each sending (and reducing) the length - d blocks beyond d.
      md.copy(k, n * m);
      int length = n;
      for (int d = floorPowerOfTwo(n - 1); d >= 1; d >>= 1) {
        md.step(
            k, [d, n](int r) { return mod(r + d, n); }, (length - d) * m, true, false);
        length = d;
      }
      return;
    }
    case Algorithm::DirectRead:
    case Algorithm::DirectWrite: md.singleCopy(k, 2, (n - 1) * m, (n - 1) * m); return;
    case Algorithm::Hierarchical: md.hierarchical(k, m, true); return;
    default: ringSteps(md, k, m, true); return;
  }
}

void allReduce(const Model& md, Cost& k, Algorithm a, double v) {
  const int n = md.n();
  const double m = v / n;
  switch (a) {
    case Algorithm::RecursiveDoubling:
      for (int d = 1; d < n; d <<= 1)
        md.step(
            k, [d, n](int r) { return (r ^ d) < n ? (r ^ d) : r; }, v, true, false);
      if (!isPowerOfTwo(n))
        md.step(
            k, [n](int r) { return mod(r + 1, n); }, v, false, false);
      return;
    case Algorithm::DirectRead:
    case Algorithm::DirectWrite: md.singleCopy(k, 4, 2 * (n - 1) * m, (n - 1) * m); return;
    case Algorithm::Hierarchical:
      reduceScatter(md, k, Algorithm::Hierarchical, m);
      allGather(md, k, Algorithm::Hierarchical, m);
      return;
    default:
      reduceScatter(md, k, Algorithm::Ring, m);
      allGather(md, k, Algorithm::Ring, m);
      return;
  }
}

// What the schedule builders (all_gather.cc, reduce_scatter.cc, all_reduce.cc) really run for
// a forced algorithm: SHARC_ALGO=direct_write on a ReduceScatter runs the ring, a recursive
// doubling on a group that is not a power of two runs Bruck, the single-copy forms need
// cross-memory attach. The model costs that, not the name.
Algorithm runsAs(const CallShape& s, Algorithm a) {
  const bool pow2 = isPowerOfTwo(s.nranks);
  const bool single = s.locality == Locality::OneHostSingleCopy;
  switch (s.kind) {
    case CollKind::AllGather:
      if (a == Algorithm::RecursiveDoubling && !pow2) return Algorithm::Bruck;
      if ((a == Algorithm::DirectRead || a == Algorithm::DirectWrite) && !single)
        return Algorithm::Direct;
      return a == Algorithm::DirectRead ? Algorithm::DirectWrite : a;
    case CollKind::ReduceScatter:
      if (a == Algorithm::RecursiveDoubling && !pow2) return Algorithm::Bruck;
      if (a == Algorithm::Direct || a == Algorithm::DirectWrite) return Algorithm::Ring;
      if (a == Algorithm::DirectRead && !single) return Algorithm::Ring;
      return a;
    case CollKind::AllReduce:
      if (a == Algorithm::Bruck) return Algorithm::RecursiveDoubling;
      if (a == Algorithm::Direct || a == Algorithm::DirectWrite) return Algorithm::Ring;
      if (a == Algorithm::DirectRead && !single) return Algorithm::Ring;
      return a;
    default: return a;
  }
}

std::string fmtBytes(size_t b) {
  if (b >= (1u << 20) && b % (1u << 20) == 0) return std::to_string(b >> 20) + "M";
  if (b >= 1024 && b % 1024 == 0) return std::to_string(b >> 10) + "K";
  return std::to_string(b);
}

}  // namespace

TunerParams TunerParams::defaults() {
  TunerParams p;
  p.local = kLocal;
  p.fabric = kFabric;
  p.copyGbps = kCopyGbps;
  p.reduceGbps = kReduceGbps;
  p.stepUs = kStepUs;
  p.cores = 0;
  // 4 ranks on 2 cores, sharc-perf all_gather -b 1K -e 256K under mpirun: direct (FIFO) 5.6-8.2
  // us at 4-16 KiB gathered and 15-19 us at 64 KiB, against 21-40 us for direct_write (two
  // handshake rounds), and direct at 0.3-0.5x direct_write's bandwidth from 256 KiB up.
  p.localCacheGbps = 12.0;
  p.switchUs = 4.0;
  p.fabricHalfDuplex = true;  // this machine's fabric is tcp
  return p;
}

std::string TunerParams::toText() const {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "local.alpha_us = %.3f\nlocal.gbps = %.3f\nfabric.alpha_us = %.3f\n"
                "fabric.gbps = %.3f\ncopy.gbps = %.3f\nreduce.gbps = %.3f\nstep_us = %.3f\n"
                "cores = %d\nlocal.cache_gbps = %.3f\nswitch_us = %.3f\nfabric.half_duplex = %d\n"
                "cma.gbps = %.3f\n",
                local.alphaUs, local.gbps, fabric.alphaUs, fabric.gbps, copyGbps, reduceGbps,
                stepUs, cores, localCacheGbps, switchUs, fabricHalfDuplex ? 1 : 0,
                cmaGbps > 0 ? cmaGbps : copyGbps);
  return buf;
}

bool chunkMatters(Algorithm a) {
  return a == Algorithm::Ring || a == Algorithm::Direct || a == Algorithm::Hierarchical;
}

std::vector<Algorithm> candidates(const CallShape& s) {
  const int n = s.nranks;
  const bool single = s.locality == Locality::OneHostSingleCopy && n <= kDirectMaxRanks;
  const bool oneHost = s.locality != Locality::Network && n <= kDirectMaxRanks;
  const bool hier = s.locality == Locality::Network && s.nodes && s.nodes->size() == n &&
                    s.nodes->nodes() > 1 && s.nodes->maxLocal() > 1;
  const bool fits = wholeMessage(s) <= s.maxMessageBytes;
  // Ties keep the earlier candidate: the log-step ones first (fewest messages), then Ring.
  std::vector<Algorithm> out;
  const auto logStep = [&](bool bruck) {
    if (fits && (isPowerOfTwo(n) || !bruck)) out.push_back(Algorithm::RecursiveDoubling);
    if (fits && bruck) out.push_back(Algorithm::Bruck);
    out.push_back(Algorithm::Ring);
  };
  switch (s.kind) {
    case CollKind::AllGather:
      logStep(true);
      if (oneHost) out.push_back(Algorithm::Direct);
      if (single) out.push_back(Algorithm::DirectWrite);
      break;
    case CollKind::ReduceScatter:
      logStep(true);
      if (single) out.push_back(Algorithm::DirectRead);
      break;
    case CollKind::AllReduce:
      logStep(false);
      if (single) out.push_back(Algorithm::DirectRead);
      break;
    case CollKind::Broadcast: return {Algorithm::BinomialTree};
    default: return {Algorithm::Dissemination};
  }
  if (hier) out.push_back(Algorithm::Hierarchical);
  return out;
}

double predictUs(const CallShape& shape, Algorithm a, size_t chunkBytes, const TunerParams& p,
                 std::string* breakdown) {
  const Model md(shape, p, chunkBytes);
  Cost k;
  const double x = static_cast<double>(shape.bytesPerRank);
  if (md.n() > 1) switch (shape.kind) {
      case CollKind::AllGather: allGather(md, k, a, x); break;
      case CollKind::ReduceScatter: reduceScatter(md, k, a, x); break;
      case CollKind::AllReduce: allReduce(md, k, a, x); break;
      case CollKind::Broadcast:  // binomial tree: partner r^d where it exists
        for (int d = 1; d < md.n(); d <<= 1)
          md.step(
              k, [d, &md](int r) { return (r ^ d) < md.n() ? r ^ d : r; }, x, false, true);
        break;
      default:
        for (int d = 1; d < md.n(); d <<= 1)
          md.step(
              k, [d, &md](int r) { return mod(r + d, md.n()); }, 0, false, false);
        break;
    }
  k.latency += p.stepUs;  // building and starting the schedule
  k.pipeline += md.fill();
  if (breakdown) {
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "%s: %d steps%s, latency %.1f + transfer %.1f + reduce %.1f + pipeline %.1f "
                  "(chunk %s) = %.1f us",
                  algorithmName(a), k.steps, k.fabric ? " (fabric)" : "", k.latency, k.transfer,
                  k.reduce, k.pipeline, fmtBytes(chunkBytes).c_str(), k.total());
    *breakdown = buf;
    if (k.fabric) {  // which link the prediction assumed, and where it came from
      std::snprintf(buf, sizeof buf, "; fabric %.4g GB/s, alpha %.0f us%s (%s)", p.fabric.gbps,
                    p.fabric.alphaUs, p.fabricHalfDuplex ? ", half duplex" : "",
                    p.fabricSource.c_str());
      *breakdown += buf;
    }
  }
  return k.total();
}

Plan plan(const CallShape& shape, const TunerParams& p, bool withBreakdown) {
  std::optional<Algorithm> forced;
  switch (shape.kind) {
    case CollKind::AllGather: forced = shape.override.allGather; break;
    case CollKind::ReduceScatter: forced = shape.override.reduceScatter; break;
    case CollKind::AllReduce: forced = shape.override.allReduce; break;
    default: break;
  }
  // Log-step algorithms send whole (multi-)blocks in one message: past the provider's
  // largest message the chunked ring carries the call instead.
  if (forced && unchunked(*forced) && wholeMessage(shape) > shape.maxMessageBytes)
    forced = Algorithm::Ring;
  // Two levels need several nodes and a node with several ranks; else the ring is what runs.
  if (forced == Algorithm::Hierarchical && !(shape.nodes && hierApplies(*shape.nodes)))
    forced = Algorithm::Ring;
  // A forced name that runs as another schedule keeps the chunk it had (SHARC_CHUNK_BYTES or
  // its default), as the schedule it runs is built with that chunk.
  const bool keepChunk = forced && !chunkMatters(*forced);
  if (forced) forced = runsAs(shape, *forced);
  const std::vector<Algorithm> options =
      forced ? std::vector<Algorithm>{*forced} : candidates(shape);
  const size_t cap = std::max<size_t>(4096, shape.maxMessageBytes);
  Plan best;
  best.predictedUs = -1;
  for (Algorithm a : options) {
    std::vector<size_t> chunks;
    if (shape.chunkBytesSet || keepChunk || !chunkMatters(a)) {
      chunks.push_back(std::min(shape.chunkBytes, cap));
    } else {
      for (size_t c : kChunkChoices)
        if (c <= cap) chunks.push_back(c);
      if (chunks.empty()) chunks.push_back(cap);
    }
    for (size_t c : chunks) {
      const double t = predictUs(shape, a, c, p);
      // Strictly cheaper wins, so ties keep the earlier (simpler) candidate and chunk.
      if (best.predictedUs < 0 || t < best.predictedUs) {
        best.algorithm = a;
        best.chunkBytes = c;
        best.predictedUs = t;
      }
    }
  }
  // Formatting the terms costs more than the model: only for the winner (this runs per call).
  if (withBreakdown) predictUs(shape, best.algorithm, best.chunkBytes, p, &best.breakdown);
  if (forced && withBreakdown) best.breakdown += " [SHARC_ALGO]";
  return best;
}

}  // namespace sharc::algo

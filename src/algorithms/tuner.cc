// The cost model. Notation: n ranks on N nodes, at most L on one node, m bytes per rank's
// block (AllGather/ReduceScatter: bytesPerRank; AllReduce: the vector V split n ways),
// a = alpha, b = beta (us/byte) of the link class a transfer uses, c = 1/copy.gbps,
// g = 1/reduce.gbps, s = step_us, o = max(1, L / cores) (ranks sharing a core serialise
// their local copies, reductions and wake-ups). The machinery (Cost, Model) is in
// tuner_model.hpp, the hierarchical schedules' cost in tuner_hier_cost.hpp (their geometry in
// tuner_hier.hpp); the schedule replay (src/plan/schedule_sim.hpp) checks these forms.
//
// One step in which every rank r sends `x` bytes to peer(r) costs
//   latency  a_step + s            a_step = fabric.alpha if any pair crosses nodes, else
//                                  o*local.alpha
//   transfer max(o*x*b_local [if some pair is on one node], load*b_fabric,
//                rankLoad*b_fabric/share)
//            load = most bytes any node sends or receives over its one fabric link that step
//            (a node whose ranks all have off-node peers carries L*x); rankLoad = most bytes
//            one rank sends or receives across nodes, through its own NICs only: share =
//            TunerParams::fabricRankShare of the node's (a p5 rank's 4 of 32 NICs)
//   reduce   o*x*g                 (ReduceScatter/AllReduce steps)
//   unchunked steps (recursive doubling/halving, Bruck: whole blocks in one message) add
//   o*max(0, x - chunk)*c: beyond a chunk the receive-side copy no longer overlaps the wire
//   as it does for pipelined chunks.
// Chunked (pipelined) algorithms add per step (ceil(x/chunk) - 1)*s (one more message per
// chunk) and, when a block spans several chunks, once the pipeline fill: chunk*(b + g) of the
// slowest link. Every call adds s for building its schedule.
//
// The log-step algorithms (recursive doubling/halving, Bruck) are costed along their longest
// chain of dependencies (Model::logSteps): a rank's step waits for its own last step and for
// its partner's message, so on nodes of several ranks a chain of short distances pays a
// fabric alpha only where it crosses a node boundary; each NIC shares its rate among the
// messages on it, earlier steps' bytes first.
//
//   AllGather     Ring               n-1 steps to r+1 of m (ringSteps)
//                 RecursiveDoubling  step k: partner r^2^k, 2^k*m (unchunked, n = 2^j)
//                 Bruck              step k: to r-2^k, min(2^k, n-2^k)*m (unchunked), + o*n*m*c
//                                    rotation
//                 Direct             one step, m to each of n-1 peers: a + (n-1)*s +
//                                    o*(n-1)*m*b
//                 DirectWrite        two handshakes 2*(o*a + (n-1)*s) + o*(n-1)*m*c (one copy)
//                 Hierarchical       direct to a proxy on every other node, forwarded within
//                                    the node as chunks arrive (Model::hierarchical)
//   ReduceScatter Ring               n-1 steps to r+1 of m, reducing m
//                 RecursiveDoubling  step k: distance n/2^(k+1), that many blocks (unchunked)
//                 Bruck              d = floorPow2(n-1) down to 1: to r+d, (length-d)*m,
//                                    length = d (unchunked), + o*n*m*c rotation
//                 DirectRead         2*(o*a + (n-1)*s) + o*(n-1)*m*(c + g)
//                 Hierarchical       the same transfers in reverse, plus o*(n-1)*m*g
//   AllReduce     Ring               ReduceScatter ring + AllGather ring on V/n blocks
//                 RecursiveDoubling  log2 p steps of V bytes among p = floorPow2(n) ranks,
//                                    reducing V (unchunked); the other n-p fold into r-p
//                                    first and get the result back last
//                 DirectRead         4*(o*a + (n-1)*s) + o*(n-1)*m*(2c + g)
//                 Hierarchical       its ReduceScatter then its AllGather on V/n blocks,
//                                    pipelined chunk by chunk where the bytes move by DMA
//
// Where the transport moves the bytes by DMA (TunerParams::dmaTransfers: NICs, NVLink; what
// sharc-plan's GPU clusters have), a pipelined ring overlaps its wire,
// its reductions and its posts chunk by chunk, and the hierarchical schedules are limited by
// the engine's window of posted sends (TunerParams::postedSends). On a CPU transport (tcp,
// shared memory: the host defaults) the transport's copies share the cores with the
// reductions and those terms add, as measured on the 2-core host (the replay plays both).
//
// Fabric defaults come from the host (TunerParams::fromConfig): b_fabric from the line rate
// of the NICs sharc uses (sysfs or SHARC_NIC_MBITS, summed over rails) times TCP's payload
// share of a frame; on a half-duplex fabric (tcp) a pair that exchanges over one connection
// takes turns beyond the first 64 KiB each way: max(x, 2x - 64 KiB) per message, chunk by
// chunk (fabric.half_duplex).
// On several rails a message under 32 KiB is not striped (transport/stripe_rule.hpp): it
// moves at the first rail's rate (TunerParams::fabricRailShare of b_fabric); a larger one is
// cut into pieces of at least 16 KiB, at most one per rail.
// A forced algorithm is costed as the schedule that really runs for it (runsAs). The
// single-copy algorithms' c is 1/cma.gbps where set (cross-memory attach pins the peer's
// pages: 0.65 GB/s against a 13.5 GB/s memcpy on the project's host, --calibrate -N 2).
//
// For flat algorithms on several nodes the fabric load follows from the rank order: on a
// ring numbered node by node each node has one edge out, so its link carries (n-1)/n of the
// total for AllGather; interleaved orders cross more often and load the link more.
#include "tuner.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <optional>

#include "core/config.hpp"
#include "hierarchical_pattern.hpp"
#include "patterns.hpp"
#include "tuner_hier_cost.hpp"
#include "tuner_model.hpp"

namespace sharc::algo {
namespace {

using model::Cost;
using model::Model;

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
constexpr double kCopyGbps = 8.0;
constexpr double kReduceGbps = 10.0;
constexpr double kStepUs = 1.0;

// Direct algorithms keep n-1 transfers in flight per rank: only for small groups.
constexpr int kDirectMaxRanks = 8;

bool unchunked(Algorithm a) {
  return a == Algorithm::RecursiveDoubling || a == Algorithm::Bruck;
}

// Bytes the whole call moves in one message for the unchunked algorithms.
size_t wholeMessage(const CallShape& s) {
  return s.kind == CollectiveKind::AllReduce ? s.bytesPerRank
                                             : s.bytesPerRank * static_cast<size_t>(s.nranks);
}

// The ring's n-1 steps are alike (every rank to r+1): costed once, so that the model stays
// O(n) for the thousands of ranks sharc-plan asks about. Each step moves a block of C chunks;
// chunk c of step k waits for chunk c of step k-1 from the rank before, and each rank's link
// to the next carries its (n-1)*C chunks in order. The call takes the longest of three paths:
//   - the chain: the first chunk through all n-1 hops (s + alpha + one chunk's wire and
//     reduction each; a step waits only for the hop before it, so the alphas are those of one
//     chain of n-1 consecutive edges, ringChainAlpha), then the other C-1 chunks at the pace of
//     the slower of the link and the progress thread;
//   - the link: the busiest link carries every chunk back to back, once the first is posted,
//     and the last one still has its alpha (and reduction) to go;
//   - the progress thread: it posts every chunk's send and runs every chunk's reduction,
//     while the transfers go on without it (the replay's and the engine's rule: a reduction
//     runs on the thread, the transport moves the bytes).
// Without chunks (C = 1) the chain is the whole story: the latencies, wire and reductions add.
// On a CPU transport (TunerParams::dmaTransfers unset) the copies that move the bytes run on the
// same cores as the reductions, so every step's wire, reductions and posts add (and the fill
// once): the overlap is the DMA engines'.
void ringSteps(const Model& md, Cost& k, double m, bool reduce) {
  const int n = md.n();
  if (n < 2) return;
  Cost one;
  if (!md.dmaTransfers()) {  // the transport's copies and the reductions share the cores: add
    md.step(
        one, [n](int r) { return mod(r + 1, n); }, m, reduce, true);
    k.addRepeated(one, n - 1);
    k.latency += md.ringChainAlpha(reduce) - (n - 1) * (one.latency - md.stepUs());
    return;
  }
  md.step(
      one, [n](int r) { return mod(r + 1, n); }, m, reduce, true, false);
  const int steps = n - 1;
  const double s = md.stepUs();
  const double chunks = std::max(1.0, std::ceil(m / static_cast<double>(md.chunk())));
  const double wire = one.transfer, red = one.reduce;  // one step's, the slowest link
  const double wire1 = wire / chunks, red1 = red / chunks;
  const double alpha = one.latency - s;  // the slowest link class's
  // One chunk's wire on a local edge and on a crossing one (the NIC shared by the node's
  // crossing edges, as the step's load says).
  const double wireLocal = md.localWire(m / chunks), wireCross = md.ringCrossWire(m / chunks);
  const double first = md.ringChain(wireLocal, wireCross, red1, reduce);
  const double chain = first + (chunks - 1) * std::max(wire1, red1 + s);
  const double link = s + steps * wire + alpha + red1;
  const double thread = steps * chunks * (s + red1) + alpha + wire1;
  k.steps += steps;
  k.fabric = k.fabric || one.fabric;
  if (chain >= link && chain >= thread) {
    k.latency += first;  // the first chunk through every step, its wire and reductions too
    k.transfer += (chunks - 1) * wire1;
    k.pipeline += chain - first - (chunks - 1) * wire1;
  } else if (link >= thread) {
    k.latency += s + alpha;
    k.transfer += steps * wire;
    k.reduce += red1;
  } else {
    k.latency += alpha;
    k.transfer += wire1;
    k.reduce += steps * chunks * red1;
    k.pipeline += steps * chunks * s;
  }
}

void allGather(const Model& md, Cost& k, Algorithm a, double m) {
  const int n = md.n();
  switch (a) {
    case Algorithm::RecursiveDoubling: {
      std::vector<Model::LogStep> steps;
      for (int d = 1; d < n; d <<= 1) {
        const auto partner = [d](int r) { return r ^ d; };
        steps.push_back({partner, partner, d * m, false});
      }
      md.logSteps(k, steps);
      return;
    }
    case Algorithm::Bruck: {
      std::vector<Model::LogStep> steps;
      for (int d = 1; d < n; d <<= 1)
        steps.push_back({[d, n](int r) { return mod(r - d, n); },
                         [d, n](int r) { return mod(r + d, n); }, std::min(d, n - d) * m, false});
      md.logSteps(k, steps);
      md.copy(k, n * m);
      return;
    }
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
    case Algorithm::RecursiveDoubling: {
      std::vector<Model::LogStep> steps;
      for (int d = n / 2; d >= 1; d >>= 1) {
        const auto partner = [d](int r) { return r ^ d; };
        steps.push_back({partner, partner, d * m, true});
      }
      md.logSteps(k, steps);
      return;
    }
    case Algorithm::Bruck: {
      // reduce_scatter.cc's reversed Bruck: a rotated copy of the n blocks, then distances
      // floorPow2(n-1) down to 1, each sending (and reducing) the length - d blocks beyond d.
      md.copy(k, n * m);
      std::vector<Model::LogStep> steps;
      int length = n;
      for (int d = floorPowerOfTwo(n - 1); d >= 1; d >>= 1) {
        steps.push_back({[d, n](int r) { return mod(r + d, n); },
                         [d, n](int r) { return mod(r - d, n); }, (length - d) * m, true});
        length = d;
      }
      md.logSteps(k, steps);
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
    case Algorithm::RecursiveDoubling: {
      std::vector<Model::LogStep> steps;
      // all_reduce.cc: on n = p + e ranks (p a power of two), ranks p.. first hand their
      // vector to r - p, the p ranks run recursive doubling, and ranks 0..e-1 send the
      // result back.
      const int p = floorPowerOfTwo(n), e = n - p;
      const auto down = [p](int r) { return r >= p ? r - p : r; };
      const auto up = [e, p](int r) { return r < e ? r + p : r; };
      if (e > 0) steps.push_back({down, up, v, true, true});
      for (int d = 1; d < p; d <<= 1) {
        const auto partner = [d, p](int r) { return r < p ? r ^ d : r; };
        steps.push_back({partner, partner, v, true, true});
      }
      if (e > 0) steps.push_back({up, down, v, false, true});
      md.logSteps(k, steps);
      return;
    }
    case Algorithm::DirectRead:
    case Algorithm::DirectWrite: md.singleCopy(k, 4, 2 * (n - 1) * m, (n - 1) * m); return;
    case Algorithm::Hierarchical: md.hierarchicalAllReduce(k, m); return;
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
    case CollectiveKind::AllGather:
      if (a == Algorithm::RecursiveDoubling && !pow2) return Algorithm::Bruck;
      if ((a == Algorithm::DirectRead || a == Algorithm::DirectWrite) && !single)
        return Algorithm::Direct;
      return a == Algorithm::DirectRead ? Algorithm::DirectWrite : a;
    case CollectiveKind::ReduceScatter:
      if (a == Algorithm::RecursiveDoubling && !pow2) return Algorithm::Bruck;
      if (a == Algorithm::Direct || a == Algorithm::DirectWrite) return Algorithm::Ring;
      if (a == Algorithm::DirectRead && !single) return Algorithm::Ring;
      return a;
    case CollectiveKind::AllReduce:
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
  p.dmaTransfers = false;     // tcp and shared memory copy on the ranks' cores
  p.postedSends = static_cast<int>(kMaxPostedSends);  // the engine's window
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
    case CollectiveKind::AllGather:
      logStep(true);
      if (oneHost) out.push_back(Algorithm::Direct);
      if (single) out.push_back(Algorithm::DirectWrite);
      break;
    case CollectiveKind::ReduceScatter:
      logStep(true);
      if (single) out.push_back(Algorithm::DirectRead);
      break;
    case CollectiveKind::AllReduce:
      logStep(false);
      if (single) out.push_back(Algorithm::DirectRead);
      break;
    case CollectiveKind::Broadcast: return {Algorithm::BinomialTree};
    default: return {Algorithm::Dissemination};
  }
  if (hier) out.push_back(Algorithm::Hierarchical);
  return out;
}

// The copy an out-of-place call makes before or beside its first sends: AllGather's own block
// into the output (ring, recursive doubling, Bruck's work buffer, direct: all_gather.cc) and
// recursive doubling AllReduce's vector (all_reduce.cc). The log-step schedules send from
// what it copied, so their first message waits for it on any transport (a p5 node's
// recursive-doubling AllReduce of 64 MiB: 40 us at 1,675 GB/s); the ring and direct send
// from the input, so by DMA it overlaps their wire. On a CPU transport the thread that copies
// is the one that moves the messages, so it adds there too (the replay: a 2-rank ring
// AllGather of 1 MiB waits 64 us, 512 KiB at 8 GB/s, for it).
void startCopy(const Model& md, Cost& k, CollectiveKind kind, Algorithm a, double x) {
  const bool logStep = a == Algorithm::RecursiveDoubling || a == Algorithm::Bruck;
  const bool beside = a == Algorithm::Ring || a == Algorithm::Direct;
  const bool gather =
      kind == CollectiveKind::AllGather && (logStep || (beside && !md.dmaTransfers()));
  const bool doubling = kind == CollectiveKind::AllReduce && a == Algorithm::RecursiveDoubling;
  if (gather || doubling) md.copy(k, x);
}

double predictUs(const CallShape& shape, Algorithm a, size_t chunkBytes, const TunerParams& p,
                 std::string* breakdown) {
  const Model md(shape, p, chunkBytes);
  Cost k;
  const double x = static_cast<double>(shape.bytesPerRank);
  if (md.n() > 1) switch (shape.kind) {
      case CollectiveKind::AllGather: allGather(md, k, a, x); break;
      case CollectiveKind::ReduceScatter: reduceScatter(md, k, a, x); break;
      case CollectiveKind::AllReduce: allReduce(md, k, a, x); break;
      case CollectiveKind::Broadcast:  // binomial tree: partner r^d where it exists
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
  if (md.n() > 1) startCopy(md, k, shape.kind, a, x);
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
      if (p.fabricRails > 1 && p.fabricRailShare < 1) {
        std::snprintf(buf, sizeof buf, "; %d rails of %.4g GB/s, under 32 KiB one", p.fabricRails,
                      p.fabric.gbps * p.fabricRailShare);
        *breakdown += buf;
      }
    }
  }
  return k.total();
}

Plan plan(const CallShape& shape, const TunerParams& p, bool withBreakdown) {
  std::optional<Algorithm> forced;
  switch (shape.kind) {
    case CollectiveKind::AllGather: forced = shape.override.allGather; break;
    case CollectiveKind::ReduceScatter: forced = shape.override.reduceScatter; break;
    case CollectiveKind::AllReduce: forced = shape.override.allReduce; break;
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
  const size_t cap = std::max(core::kMinChunkBytes, shape.maxMessageBytes);
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

// The tuner: an alpha-beta-gamma cost model per link class (Local: ranks of one node, over
// shared memory or single-copy reads; Fabric: between nodes) that predicts the time of each
// candidate algorithm for one call and picks the cheapest, with its pipelining chunk.
// SHARC_ALGO still overrides the algorithm, SHARC_CHUNK_BYTES (when set) the chunk, and
// SHARC_TUNER_FILE the parameters.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "algorithms.hpp"
#include "core/config.hpp"
#include "node_map.hpp"
#include "tag.hpp"
#include "transport/stripe_rule.hpp"

namespace sharc::algo {

/// Where the ranks of a communicator are.
enum class Locality {
  Network,           ///< some ranks on other hosts
  OneHost,           ///< all on this host (shared-memory provider)
  OneHostSingleCopy  ///< all on this host and able to read each other's memory (CMA)
};

/// Latency and bandwidth of one class of link.
struct LinkParams {
  double alphaUs = 0;  ///< per-message latency (us), software included
  double gbps = 1;     ///< bandwidth (1e9 bytes/s) of a message through the transport
  /// us per byte (beta)
  double usPerByte() const { return 1.0 / (gbps * 1e3); }
};

/// Where the fabric is half duplex per connection (TunerParams::fabricHalfDuplex): the bytes
/// of each direction that move together before the two directions take turns; a pair
/// exchanging x bytes each way holds its connection for max(x, 2x - this) (measured, tcp).
inline constexpr double kDuplexOverlapBytes = 64 << 10;

/// Parameters of the cost model (see tuner.cc for the formulas and how the defaults were
/// measured). Keys of SHARC_TUNER_FILE in brackets.
struct TunerParams {
  LinkParams local;       ///< [local.alpha_us, local.gbps] ranks of one node
  LinkParams fabric;      ///< [fabric.alpha_us, fabric.gbps] ranks of different nodes
  double copyGbps = 1;    ///< [copy.gbps] one core's memcpy (single-copy reads and writes)
  double reduceGbps = 1;  ///< [reduce.gbps] reduction kernel, bytes of one input per second
  double stepUs = 0;      ///< [step_us] software overhead of one schedule step or chunk
  int cores = 0;          ///< [cores] CPUs per node (0: this process's affinity mask)
  /// [local.cache_gbps] shared-memory messages small enough for the FIFO (1 MiB) stay in
  /// cache; larger ones stream at local.gbps (divided by the oversubscription: sender and
  /// receiver must both be running for a FIFO to move).
  double localCacheGbps = 1;
  /// [switch_us] with more local ranks than cores, what each round of local messages adds
  /// per rank sharing a core (the peers must be scheduled in turn).
  double switchUs = 0;
  /// Where `fabric` came from: "built-in", "sysfs: ..." or "SHARC_NIC_MBITS: ..." (NIC line
  /// rate, see fromConfig), "SHARC_TUNER_FILE" once the file sets it.
  std::string fabricSource = "built-in";
  /// [fabric.half_duplex] 1: a connection between two ranks moves both directions together
  /// only for the first kDuplexOverlapBytes of each, then one at a time, so a pair that
  /// exchanges x bytes each way across nodes (recursive doubling, a 2-rank ring, direct,
  /// hierarchical's two-way pairs) holds it for max(x, 2x - 64 KiB). Measured for tcp
  /// (libfabric tcp;ofi_rxm) on the emulated cluster (HTB-shaped links), 1 rank on each of 2
  /// nodes, recursive doubling at 100 and 200 Mbit/s, 32 KiB-4 MiB each way: 1.0, 1.1, 1.5,
  /// 1.8, 1.9 and 1.9 times the one-way time; each connection one way (a ring of 4 nodes) runs
  /// at the wire time. defaults() and fromConfig set it unless the provider is efa; a
  /// default-constructed TunerParams (sharc-plan's clusters) has 0.
  bool fabricHalfDuplex = false;
  /// [cma.gbps] what one rank's single-copy read or write of a peer's buffer moves (cross-
  /// memory attach pins the peer's pages, then copies); 0: copy.gbps. sharc-perf --calibrate
  /// measures it where it can: it differs from a memcpy by host (issue 14: a 2-rank 64 MiB
  /// direct_read ReduceScatter moved ~1.1 GB/s where memcpy runs at 8).
  double cmaGbps = 0;
  /// The transport moves the bytes by DMA (NICs, NVLink), off the ranks' progress threads:
  /// a pipelined ring's reductions and posts then overlap its transfers chunk by chunk, a
  /// whole-block message (recursive doubling, Bruck) lands in place without a receive copy,
  /// and the hierarchical schedules take the forms the schedule replay
  /// (src/plan/schedule_sim.hpp, which plays such a transport) checks. 0 (defaults(), and every
  /// TunerParams unless set): the copies run on the ranks' own cores (tcp's socket copies,
  /// shared-memory FIFOs), as the reductions do, so they add up: on the 2-core host the additive
  /// model picks the measured winners (4 ranks, one host, 1-16 MiB AllGather: direct,
  /// tests/unit/test_tuner.cc), the overlapped one the ring. Not a SHARC_TUNER_FILE key.
  bool dmaTransfers = false;
  /// Sends a rank keeps posted at once, the rest queued in the order they became ready: the
  /// engine's 32 (kMaxPostedSends, schedule.hpp). The hierarchical schedules' forwards and
  /// partials queue behind a rank's own sends, which is what limits them at large sizes with
  /// dmaTransfers (tuner_hier_cost.hpp). 0: no limit (a default-constructed TunerParams:
  /// sharc-plan's clusters until they carry it, and the NCCL backtest, whose algorithms have
  /// no such queue).
  int postedSends = 0;
  /// Share of `fabric.gbps` (the node's fabric, all its NICs) that one rank can drive in each
  /// direction: a rank stripes only over the NICs placed near it (topology/nic_mapping.hpp:
  /// R NICs over L ranks, each gets floor(R/L) of them, or L/R ranks share one), so on a p5
  /// (32 NICs, 8 GPUs) one rank reaches 4/32 of the node's 400 GB/s. A step's fabric time is
  /// the longer of the node's load at fabric.gbps and the busiest rank's own load at this
  /// share of it (egress and ingress). 1 (the default): any rank can use the whole link, as
  /// on this host, where SHARC_NICS names every rank's NICs (tuner_host.cc), and for NCCL's
  /// rings, which cross nodes on every GPU's NICs at once (one channel per GPU). Not a
  /// SHARC_TUNER_FILE key.
  double fabricRankShare = 1.0;
  /// Rails one rank stripes a message over (SHARC_NICS: one endpoint per NIC): a message
  /// of x bytes is cut into transport::stripePieces(x, fabricRails) pieces, one per rail,
  /// from 32 KiB on in pieces of at least 16 KiB, so a smaller one moves over the first rail
  /// alone. 1: one rail.
  int fabricRails = 1;
  /// Share of the fabric's rate (the node's and each rank's) that one rail carries: a
  /// message cut into k pieces moves at min(1, k x this) of it. fromConfig: the first NIC's
  /// rate over the summed one (SHARC_NICS); sharc-plan's clusters: 1 / fabricRails. Measured
  /// on the emulated cluster, 2 nodes x 2 ranks on two 200 Mbit/s rails, 64 KiB calls (16 KiB
  /// messages, one rail): 1.57-1.73x the model that summed both rails for every message.
  /// Neither is a SHARC_TUNER_FILE key.
  double fabricRailShare = 1.0;

  /// The defaults measured on the project's 2-core machine.
  static TunerParams defaults();
  /// The defaults with the fabric link the host describes (the summed line rate of the NICs
  /// of SHARC_NICS, else FI_TCP_IFACE, from sysfs or SHARC_NIC_MBITS; alpha by provider),
  /// overlaid with the SHARC_TUNER_FILE settings of `config`.
  static TunerParams fromConfig(const core::Config& config);
  /// `key = value` lines, every key (the form SHARC_TUNER_FILE takes).
  std::string toText() const;
};

/// How many times its bytes' time a message of `bytes` takes on the fabric (the node's and
/// the rank's rate) where it is cut into fewer pieces than `p` has rails: 1 / min(1, pieces x
/// fabricRailShare), pieces = transport::stripePieces(bytes, fabricRails). 1 on one rail.
inline double railScale(const TunerParams& p, double bytes) {
  if (p.fabricRails <= 1 || p.fabricRailShare >= 1) return 1.0;
  const auto pieces =
      transport::stripePieces(static_cast<size_t>(bytes), static_cast<size_t>(p.fabricRails));
  return 1.0 / std::min(1.0, static_cast<double>(pieces) * std::max(p.fabricRailShare, 1e-9));
}

/// Everything about a call the cost model looks at. Every rank derives the same shape.
struct CallShape {
  CollectiveKind kind = CollectiveKind::AllGather;
  size_t bytesPerRank = 0;  ///< count * element size (the whole vector for AllReduce)
  int nranks = 1;
  Locality locality = Locality::Network;
  const NodeMap* nodes = nullptr;       ///< rank -> node; nullptr: every rank on one node
  size_t maxMessageBytes = ~size_t{0};  ///< the provider's largest message
  size_t chunkBytes = 1u << 20;         ///< SHARC_CHUNK_BYTES (or its default)
  bool chunkBytesSet = false;           ///< SHARC_CHUNK_BYTES was set: keep it
  AlgorithmOverride override;           ///< SHARC_ALGO
};

/// The tuner's answer for one call.
struct Plan {
  Algorithm algorithm = Algorithm::Ring;
  size_t chunkBytes = 1u << 20;  ///< capped at the provider's largest message
  double predictedUs = 0;        ///< the model's time for the call
  std::string breakdown;         ///< one line: the terms of the prediction
};

/// The fabric link this host describes for `config`: bandwidth from the summed line rate of
/// the NICs of SHARC_NICS (else FI_TCP_IFACE), read from sysfs or SHARC_NIC_MBITS, times the
/// transport's payload share (tcp: 1448 of 1514 bytes a frame, capped at the built-in 1.8
/// GB/s its copies reach; efa: the line rate); alpha by provider (tcp 40 us, efa 75 us). The
/// built-in link where no NIC rate is known. `source` (if given) says which; `railShare`
/// (if given) gets TunerParams::fabricRailShare: the first rail's rate, at the same payload
/// share and cap, over the whole link's (1 on one rail or an unknown rate).
LinkParams hostFabric(const core::Config& config, std::string* source = nullptr,
                      double* railShare = nullptr);

/// The chunk sizes plan() chooses among for the algorithms whose chunk matters.
inline constexpr size_t kChunkChoices[] = {256u << 10, 512u << 10, 1u << 20, 2u << 20, 4u << 20};
/// Whether `a` is pipelined in chunks (ring, direct, hierarchical): the others send whole
/// blocks, so their chunk changes nothing.
bool chunkMatters(Algorithm a);

/// The chunk the cost model (and sharc-plan's replay of the schedules) costs a call cut in
/// `chunkBytes` pieces at: never under core::kMinChunkBytes, the engine's smallest.
inline size_t modelChunkBytes(size_t chunkBytes) {
  return std::max(chunkBytes, core::kMinChunkBytes);
}

/// The algorithms that can run `shape` (before any override), in a fixed order.
std::vector<Algorithm> candidates(const CallShape& shape);
/// The model's time for running `shape` with `a` in chunks of `chunkBytes`; fills
/// `breakdown` (if given) with the terms.
double predictUs(const CallShape& shape, Algorithm a, size_t chunkBytes, const TunerParams& p,
                 std::string* breakdown = nullptr);
/// Picks the algorithm (SHARC_ALGO first, else the cheapest candidate) and the chunk
/// (SHARC_CHUNK_BYTES when set, else the cheapest of 256K..4M). The log-step algorithms
/// (whole blocks in one message) fall back to Ring when the call exceeds maxMessageBytes, and
/// so does a forced Hierarchical where two levels do not apply.
/// Deterministic: every rank gets the same plan from the same shape and parameters.
/// `withBreakdown` fills Plan::breakdown (string formatting: not on the per-call path).
Plan plan(const CallShape& shape, const TunerParams& p, bool withBreakdown = true);

}  // namespace sharc::algo

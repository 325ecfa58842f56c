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
/// of each direction that move together before the two directions take turns (see
/// cost_model.hpp, half-duplex turns).
inline constexpr double kDuplexOverlapBytes = 64 << 10;

/// Parameters of the cost model (cost_model.hpp states how each one enters). Keys of
/// SHARC_TUNER_FILE in brackets.
struct TunerParams {
  LinkParams local;       ///< [local.alpha_us, local.gbps] ranks of one node
  LinkParams fabric;      ///< [fabric.alpha_us, fabric.gbps] ranks of different nodes
  double copyGbps = 1;    ///< [copy.gbps] one core's memcpy (single-copy reads and writes)
  double reduceGbps = 1;  ///< [reduce.gbps] reduction kernel, bytes of one input per second
  double stepUs = 0;      ///< [step_us] software overhead of one schedule step or chunk
  int cores = 0;          ///< [cores] CPUs per node (0: this process's affinity mask)
  /// [local.cache_gbps] local messages that fit one FIFO slot, which stay in cache.
  double localCacheGbps = 1;
  /// [switch_us] with more local ranks than cores, what each round of local messages adds
  /// per rank sharing a core.
  double switchUs = 0;
  /// Where `fabric` came from: "built-in", "sysfs: ..." or "SHARC_NIC_MBITS: ..." (NIC line
  /// rate, see fromConfig), "SHARC_TUNER_FILE" once the file sets it.
  std::string fabricSource = "built-in";
  /// [fabric.half_duplex] 1: a connection between two ranks takes turns between its two
  /// directions beyond kDuplexOverlapBytes (tcp; see cost_model.hpp, half-duplex turns).
  /// defaults() and fromConfig set it unless the provider is efa; a default-constructed
  /// TunerParams (sharc-plan's clusters) has 0.
  bool fabricHalfDuplex = false;
  /// [cma.gbps] what one rank's single-copy read or write of a peer's buffer moves; 0:
  /// copy.gbps. Cross-memory attach pins the peer's pages before it copies, so it differs
  /// from a memcpy by host; sharc-perf --calibrate measures it where it can.
  double cmaGbps = 0;
  /// The transport moves the bytes by DMA (NICs, NVLink), off the ranks' progress threads
  /// (cost_model.hpp, CPU and DMA transports). 0 (defaults(), and every TunerParams unless
  /// set): the copies run on the ranks' own cores (tcp's socket copies, shared-memory FIFOs),
  /// as the reductions do. Not a SHARC_TUNER_FILE key.
  bool dmaTransfers = false;
  /// The fewest sends a rank keeps posted at once, the rest queued in the order they became
  /// ready: the floor of the engine's sendWindow (schedule.hpp), which grows to two per peer.
  /// It limits the hierarchical schedules where DMA moves the bytes (cost_model.hpp,
  /// Hierarchical). 0: no limit (a default-constructed TunerParams, and the NCCL backtest,
  /// whose algorithms have no such queue).
  int postedSends = 0;
  /// Share of `fabric.gbps` (the node's fabric, all its NICs) that one rank can drive in each
  /// direction (cost_model.hpp, Links): a rank stripes only over the NICs placed near it
  /// (topology/nic_mapping.hpp: R NICs over L ranks, floor(R/L) each, or L/R ranks on one).
  /// 1 (the default): any rank can use the whole link, as on this host, where SHARC_NICS
  /// names every rank's NICs (tuner_host.cc), and for NCCL's rings, which cross nodes on
  /// every GPU's NICs at once. Not a SHARC_TUNER_FILE key.
  double fabricRankShare = 1.0;
  /// Rails one rank stripes a message over (SHARC_NICS: one endpoint per NIC; cost_model.hpp,
  /// Links). 1: one rail.
  int fabricRails = 1;
  /// Share of the fabric's rate (the node's and each rank's) that one rail carries.
  /// fromConfig: the first NIC's rate over the summed one (SHARC_NICS); sharc-plan's
  /// clusters: 1 / fabricRails. Neither is a SHARC_TUNER_FILE key.
  double fabricRailShare = 1.0;
  /// [gpu.reduce_gbps] a CUDA device queue's reduction kernel, bytes of one input per second
  /// (calls on GPU buffers: DeviceCall).
  double gpuReduceGbps = 1;
  /// [gpu.copy_gbps] a CUDA device queue's device-to-device copy.
  double gpuCopyGbps = 1;
  /// [gpu.pcie_gbps] a CUDA queue's copy between the GPU and pinned host memory, one direction
  /// (the staged links' copies).
  double pcieGbps = 1;

  /// The defaults measured on the project's 2-core machine.
  static TunerParams defaults();
  /// The defaults with the fabric link the host describes (the summed line rate of the NICs
  /// of SHARC_NICS, else FI_TCP_IFACE, from sysfs or SHARC_NIC_MBITS; alpha by provider),
  /// overlaid with the SHARC_TUNER_FILE settings of `config`.
  static TunerParams fromConfig(const core::Config& config);
  /// `key = value` lines, every key (the form SHARC_TUNER_FILE takes).
  std::string toText() const;
};

/// How many times its bytes' time a message of `bytes` takes on the fabric where it is cut
/// into fewer pieces than `p` has rails (cost_model.hpp, Links). 1 on one rail.
inline double railScale(const TunerParams& p, double bytes) {
  if (p.fabricRails <= 1 || p.fabricRailShare >= 1) return 1.0;
  const auto pieces =
      transport::stripePieces(static_cast<size_t>(bytes), static_cast<size_t>(p.fabricRails));
  return 1.0 / std::min(1.0, static_cast<double>(pieces) * std::max(p.fabricRailShare, 1e-9));
}

/// A call on device buffers (the device path, docs/gpu.md): the rates of its device queue and
/// whether its links stage each message through host memory (cost_model.hpp, Data paths).
struct DeviceCall {
  double reduceGbps = 1;      ///< the queue's reduction, bytes of one input per second
  double copyGbps = 1;        ///< the queue's device-to-device copy
  double stagingGbps = 1;     ///< the queue's copy between device and host memory
  bool stagedLocal = false;   ///< some link to a rank of the same node stages
  bool stagedFabric = false;  ///< some link to a rank of another node stages
};

/// The rates of a device queue: the host's (copyGbps, reduceGbps) for the host queue, which
/// runs the device operations on a CPU thread; the gpu.* parameters for a CUDA queue.
DeviceCall deviceCallRates(const TunerParams& p, bool hostQueue);

/// What the engine runs for `a` on device buffers: the single-copy algorithms read and write
/// peers' memory with the CPU, so the ring stands in for them.
inline Algorithm deviceAlgorithm(Algorithm a) {
  return a == Algorithm::DirectRead || a == Algorithm::DirectWrite ? Algorithm::Ring : a;
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
  const DeviceCall* device = nullptr;   ///< buffers on a device queue; nullptr: host buffers
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
/// The two-level algorithms (Hierarchical, HierarchicalBruck): they need several nodes with
/// several ranks on one, and cut every block into chunks whatever its size.
inline bool twoLevel(Algorithm a) {
  return a == Algorithm::Hierarchical || a == Algorithm::HierarchicalBruck;
}

/// The chunk the cost model (and sharc-plan's replay of the schedules) costs a call cut in
/// `chunkBytes` pieces at: never under core::kMinChunkBytes, the engine's smallest.
inline size_t modelChunkBytes(size_t chunkBytes) {
  return std::max(chunkBytes, core::kMinChunkBytes);
}

/// The algorithms that can run `shape` (before any override), in a fixed order.
std::vector<Algorithm> candidates(const CallShape& shape);
/// Those of them the model ranks on transports like `p`'s: HierarchicalBruck's model is the
/// DMA transports' (AllGather and ReduceScatter) on 8 nodes or more (cost_model.hpp), so
/// elsewhere it runs only when forced.
std::vector<Algorithm> rankedCandidates(const CallShape& shape, const TunerParams& p);
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

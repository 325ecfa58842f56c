// sharc's planner: the tuner's cost model (src/algorithms/tuner.hpp) applied to clusters that
// are not this one — predicted collective times at 1..1,024 nodes, and the hybrid-shard and
// tensor-parallel degrees for a model. `sharc-plan` (tools/sharc_plan.cc) is its command line;
// `sharc.torch.parallelize(..., hybrid_shard_degree="auto")` asks it too.
#pragma once

#include <cstddef>
#include <sharc/types.hpp>
#include <string>
#include <vector>

namespace sharc::plan {

/// A cluster's nodes as the cost model sees them. Rates are 1e9 bytes/s in one direction.
struct Cluster {
  std::string name;          ///< "p5.48xlarge", a file's name, or "this host"
  std::string source;        ///< where the figures come from (citation or file)
  int ranksPerNode = 8;      ///< GPUs (ranks) per node
  double memoryBytes = 0;    ///< memory of one rank's device (GPU HBM)
  double localAlphaUs = 0;   ///< latency of one message between ranks of a node
  double localGBps = 0;      ///< bandwidth one rank reaches to the others of its node
  double fabricAlphaUs = 0;  ///< latency of one message between nodes
  double fabricGBps = 0;     ///< injection bandwidth of one node, all its NICs together
  /// NICs per node (fabricGBps is their sum). With ranksPerNode they give what one rank can
  /// drive: it stripes over the NICs placed near it only (fabricRankShare).
  int rails = 1;
  double copyGBps = 0;    ///< one rank's memory copy rate
  double reduceGBps = 0;  ///< one rank's reduction rate (bytes of one input per second)
  double stepUs = 0;      ///< software overhead of one schedule step or chunk
  /// Share of the links' bandwidth a real collective library reaches (fitted; 1 = ideal).
  double efficiency = 1.0;
  /// A connection between two ranks of different nodes moves one direction at a time (tcp;
  /// algo::TunerParams::fabricHalfDuplex). EFA and the built-in profiles: false.
  bool fabricHalfDuplex = false;
  /// NICs and NVLink move the bytes by DMA, off the ranks' progress threads
  /// (algo::TunerParams::dmaTransfers): the built-in GPU profiles. false: a CPU transport
  /// (this host's tcp and shared memory, a calibration file).
  bool dmaTransfers = true;
  /// Sends a rank keeps posted (algo::TunerParams::postedSends): sharc's engine posts 32;
  /// 0 = no limit (the NCCL backtest's algorithms).
  int postedSends = 32;
  /// Share of fabricGBps one rank can drive (algo::TunerParams::fabricRankShare). 0: from
  /// rails and ranksPerNode as sharc places ranks on NICs (rankFabricShare: p5's 32 NICs over
  /// 8 GPUs, 4/32 each). 1: any rank the node's whole fabric (the NCCL backtest: NCCL's
  /// channels cross nodes on every GPU's NICs at once).
  double fabricRankShare = 0;
  /// NICs one rank stripes a message over (algo::TunerParams::fabricRails): sharc cuts a
  /// message of 32 KiB or more into pieces of at least 16 KiB, at most one per NIC
  /// (transport::stripePieces), and sends a smaller one over the first NIC alone. 0: from
  /// rails and ranksPerNode (railsPerRank: a p5 rank's 4). 1: every message at the rank's
  /// whole share (the NCCL backtest: NCCL's own transport).
  int railsPerRank = 0;
  /// Share of a rank's fabric rate one of its NICs carries (algo::TunerParams::
  /// fabricRailShare: a message cut into k pieces moves at min(1, k x this) of it). 0: every
  /// NIC alike, 1 / railsPerRank. This host's: the first NIC's rate over the summed one.
  double railShare = 0;
  /// One GPU's PCIe link to host memory in one direction: what the staged data path copies
  /// over (src/algorithms/cost_model.hpp, "Data paths"). 0: no staged path (a CPU cluster).
  double pcieGBps = 0;
  /// The host's reduction rate on the staged path (bytes of one input per second). 0: the
  /// tuner's host default (algo::TunerParams::defaults().reduceGbps).
  double hostReduceGBps = 0;
};

/// The NICs each of `ranksPerNode` ranks stripes over when sharc places `rails` NICs near
/// them (topology/nic_mapping.hpp): floor(rails/ranksPerNode), at least 1.
int railsPerRank(int rails, int ranksPerNode);

/// The share of a node's fabric one of its `ranksPerNode` ranks can drive when it stripes
/// over the NICs sharc places near it (topology/nic_mapping.hpp: R = `rails` NICs spread over
/// the GPUs, each gets floor(R/L) of them, or L/R ranks share one): floor(R/L)/R for R >= L,
/// 1/R below (the NIC's sharing among its ranks is the node's load). 1 for R <= 1.
double rankFabricShare(int rails, int ranksPerNode);

/// The built-in instance profiles (published NIC counts and speeds): "p4d.24xlarge",
/// "p5.48xlarge", "p5en.48xlarge".
std::vector<std::string> builtinClusterNames();
/// The profile `name`; throws sharc::Error(InvalidArgument) listing the valid names.
Cluster builtinCluster(const std::string& name);

/// The collectives the planner predicts: AllGather, ReduceScatter and AllReduce.
using Collective = CollectiveKind;
/// "all_gather", "reduce_scatter", "all_reduce".
const char* collectiveName(Collective c);

/// One predicted call.
struct Prediction {
  Collective collective = Collective::AllGather;
  int nodes = 1;
  int ranks = 1;
  size_t bytes = 0;       ///< AllGather output / ReduceScatter input / AllReduce vector
  std::string algorithm;  ///< the tuner's choice ("ring", "hierarchical", ...)
  size_t chunkBytes = 0;
  double predictedUs = 0;
  double busGBps = 0;       ///< nccl-tests' bus bandwidth of the predicted time
  double boundUs = 0;       ///< physical lower bound (see lowerBoundUs)
  double boundBusGBps = 0;  ///< bus bandwidth at the lower bound
};

/// The tuner's plan for `c` of `bytes` on `nodes` nodes of `cluster` (ranks numbered node by
/// node). `algorithm` forces one ("" = the tuner's choice).
Prediction predictCollective(const Cluster& cluster, int nodes, Collective c, size_t bytes,
                             const std::string& algorithm = "");

/// Physical lower bound of a call (us), at full link speed (efficiency 1): on N > 1 nodes
/// every node must inject (N-1)/N of the data at fabricGBps (twice for AllReduce), and for
/// AllGather and ReduceScatter each of its L ranks must also take in (send out) (n-1)/n of it
/// through its NICs and its NVLink together, L (n-1)/n of the data at fabricGBps + L x
/// localGBps per node (the tighter of the two on 2-4 p5 nodes); plus one fabric latency. On
/// one node each rank must take in (L-1)/L of it at localGBps (twice for AllReduce), plus one
/// local latency. One latency, not log2 N: a node's NICs reach all its peers at once (the
/// hierarchical algorithm sends to every other node directly). AllReduce keeps the fabric
/// term alone: NVLink SHARP reduces and multicasts in the switch.
double lowerBoundUs(const Cluster& cluster, int nodes, Collective c, size_t bytes);

/// nccl-tests' bus bandwidth (GB/s) of `bytes` in `us` on `ranks` ranks.
double busBandwidthGBps(Collective c, size_t bytes, double us, int ranks);

}  // namespace sharc::plan

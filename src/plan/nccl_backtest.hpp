// The backtest of the planner's cost model (src/algorithms/cost_model.hpp) against
// published NCCL AllReduce and AllGather bus bandwidths over EFA: sharc's model of NCCL
// (AllGather and ReduceScatter: nccl_backtest_allgather.cc). At each point it
// takes NCCL's own choice (algorithm and protocol), NCCL's own constants for that choice
// (per-channel bandwidth caps, protocol payload, the latency formula of src/graph/tuning.cc,
// the plugin's reported network latency) and NVLS as a capability of the NVSwitch, and feeds
// the bytes of the schedule through the tuner's cost model; one efficiency per instance type
// is fitted to the published AllReduce points of 128 MB and more, and two per-step costs of the
// ring (LL128, Simple) to the AllGather curve (nccl_model.hpp). Its bounds: within 15 % at >= 128
// MB, 30 % below, never above the physical ceiling of lowerBoundUs.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "sharc/plan.hpp"

namespace sharc::plan {

/// One published measurement, compiled in with its source.
struct PublishedPoint {
  std::string instance;  ///< profile it runs on ("p5.48xlarge", ...)
  int nodes = 2;
  size_t bytes = 0;                         ///< AllReduce vector (nccl-tests' "size")
  double busGBps = 0;                       ///< published nccl-tests busbw (out of place)
  std::string source;                       ///< where it is published
  Collective coll = Collective::AllReduce;  ///< AllGather: `bytes` is the gathered output
};

/// Every published point of the backtest: the published p5 curve (32 MiB, 128 MiB,
/// 1 GiB, 8 GiB at 2-32 nodes), 2 x p5 at 64 MiB and 16 GiB, p4de and p4d.
const std::vector<PublishedPoint>& publishedPoints();
/// The whole published p5 curve the table is taken from (2-32 nodes x 32 MiB .. 8 GiB): the
/// out-of-sample check (the efficiency is fitted on publishedPoints only).
const std::vector<PublishedPoint>& publishedCurve();
/// The AllGather curve of the same runs (2-32 nodes x 32 MiB .. 2 GiB, all_gather_perf): NCCL's
/// ring with the protocol NCCL's own model picks (aws-ofi-nccl's p5 regions cover AllReduce
/// only); out of sample too.
const std::vector<PublishedPoint>& publishedAllGatherCurve();

/// The published NCCL busbw of `coll` of `bytes` on `nodes` nodes of `instance`, from
/// publishedAllGatherCurve, publishedCurve and publishedPoints; 0 where none is published.
double publishedBusGBps(const std::string& instance, Collective coll, int nodes, size_t bytes);

/// NCCL's algorithm at a point (what aws-ofi-nccl's region tuner picks on p5, NCCL's
/// defaults elsewhere), and the tuner algorithm that models it.
struct NcclChoice {
  std::string algorithm;  ///< NCCL's algorithm: "Ring", "Tree" or "NVLSTree"
  std::string protocol;   ///< NCCL's protocol: "LL128" or "Simple"
  std::string sharc;      ///< "ring" or "hierarchical": the tuner's algorithm of the same bytes
  std::string nccl() const { return algorithm + " " + protocol; }  ///< "Ring LL128", ...
};
NcclChoice ncclChoice(const std::string& instance, int nodes, size_t bytes);

/// What NCCL's choice at a point adds to the tuner's model of its bytes: a cluster whose links
/// run at the rates NCCL reaches with that algorithm and protocol (and whose latencies are
/// zero), and NCCL's own latency of the call. See nccl_backtest.cc for every constant's source.
struct NcclTerms {
  NcclChoice choice;
  Cluster cluster;  ///< fed to predictCollective (efficiency folded into its rates)
  /// The latency the prediction adds to the tuner's time of the bytes. Tree and NVLSTree:
  /// NCCL's formula (formulaUs). Ring: the part of the ring's pipeline replay that its
  /// bandwidth does not cover (ringReplay: replayUs - bandwidthUs, plus NCCL's base latency).
  double latencyUs = 0;
  /// NCCL's own latency formula (tuning.cc, with the plugin's latency): what NCCL's tuner
  /// ranks algorithms and protocols by (the protocol choice of ncclTerms uses it).
  double formulaUs = 0;
  double capBusGBps = 0;  ///< NCCL's channels x per-channel bandwidth, as a bus bandwidth
  int channels = 0;       ///< NCCL channels the cap counts
};
/// `coll` other than AllReduce: ncclAllGatherChoice. `ranksPerNode` 0: the profile's (8);
/// AllReduce covers the profile's only (sharc::Error(InvalidArgument) otherwise), and
/// `nodes` < 2 throws too.
NcclTerms ncclTerms(const std::string& instance, int nodes, size_t bytes, double efficiency,
                    Collective coll = Collective::AllReduce, int ranksPerNode = 0);

/// NCCL's algorithm and protocol for AllGather or ReduceScatter of `bytes` (AllGather output,
/// ReduceScatter input) on `nodes` nodes of `ranksPerNode` ranks, as NCCL's own tuner picks
/// them (aws-ofi-nccl's p5 regions cover AllReduce only): the lowest time of NCCL's latency
/// formula plus the bytes at NCCL's bus bandwidth, among Ring LL128, Ring Simple and, with one
/// rank per node only (ncclPatEnable), PAT Simple. NVLS and CollNet AllGather need CollNet
/// across nodes, which AWS lacks. LL (19-22.5 GB/s per channel) wins only below the sizes
/// sharc-plan tables.
NcclChoice ncclAllGatherChoice(const std::string& instance, int nodes, size_t bytes,
                               int ranksPerNode);

/// NCCL's bus bandwidth at a point: the published figure where the backtest carries one,
/// else sharc's model of NCCL (predictNccl at the instance type's fitted efficiency).
struct NcclBusbw {
  double gbps = 0;         ///< nccl-tests busbw, GB/s; 0: neither published nor modelled
  bool published = false;  ///< true: a published figure; false: the model's
  std::string nccl;        ///< the model's NCCL algorithm and protocol ("Ring LL128"); "" if none
};
/// NcclBusbw of `coll` of `bytes` on `nodes` nodes of `cluster` (its name picks the
/// instance type, its ranksPerNode the ranks per node). No figure (gbps 0) where the model
/// does not reach: one node, a cluster that is not a built-in profile, AllReduce at another
/// ranks per node than the profile's. Throws nothing.
NcclBusbw ncclBusGBps(const Cluster& cluster, int nodes, Collective coll, size_t bytes);

/// One channel of NCCL's ring, step by step (src/device/prims_*.h, enqueue.cc
/// calcCollChunking): each rank sends one chunk per step; a step's data comes from the
/// previous rank's previous step (its own data at a loop's first step), so a step starts when
/// the rank's link is free and that data has arrived: over NVLink after intraUs (plus one
/// Simple slice: LL128 forwards line by line), over the network after the whole step is in
/// (store and forward by the proxy) plus netUs. Ring order is node by node, `ranksPerNode`
/// ranks each; the network hop is the one into each node's first rank.
struct RingPipe {
  int nodes = 2;
  int ranksPerNode = 8;
  bool allReduce = true;    ///< 2(n-1) steps per loop, else n-1 (AllGather, ReduceScatter)
  double channelBytes = 0;  ///< bytes of the collective one channel carries
  double chunkBytes = 0;    ///< NCCL's largest chunk per step
  double netUnit = 1;       ///< share of a chunk a network hop holds before forwarding
                            ///< (LL128 1: a step; Simple 1/2: a slice)
  double intraUnit = 0;     ///< same over NVLink (LL128 0: line by line; Simple 1/2: a slice)
  double netGBps = 0;       ///< one channel's rate through a node's NICs
  double nvlGBps = 0;       ///< one channel's rate over NVLink
  double netUs = 0;         ///< NCCL's latency of a network step (hwLat NET + plugin's)
  double intraUs = 0;       ///< NCCL's latency of an intra-node step
  double stepUs = 0;        ///< a step's cost beyond its transfer on every rank's link (fitted)
};
struct RingReplay {
  double replayUs = 0;     ///< when the last rank has the last chunk
  double bandwidthUs = 0;  ///< the network link's busy time alone (sum of chunk / netGBps)
  int loops = 0;
  int steps = 0;
};
/// The ring's recurrence, solved with the ranks of one node (every node behaves alike).
RingReplay ringReplay(const RingPipe& p);
/// The same recurrence over every rank of the ring, without that symmetry (the check).
RingReplay ringReplayAllRanks(const RingPipe& p);

/// sharc's model of NCCL's `coll` of `bytes` on `nodes` nodes of `instance` at `efficiency`:
/// NcclTerms::latencyUs plus the tuner's time for the choice's algorithm on
/// NcclTerms::cluster. Prediction::algorithm is the tuner algorithm used.
Prediction predictNccl(const std::string& instance, int nodes, size_t bytes, double efficiency,
                       Collective coll = Collective::AllReduce, int ranksPerNode = 0);

/// A profile as published, before the fitted efficiency (efficiency = 1). Throws
/// sharc::Error(InvalidArgument) listing the valid names. Profiles of instance types without
/// a fit of their own ("p4de.24xlarge" is backtest-only) are allowed here.
Cluster unfittedProfile(const std::string& instance);
/// The instance type whose fitted efficiency the `instance` profile takes ("p5en.48xlarge" has
/// no published multi-node points: p5's; "p4d.24xlarge" p4de's, whose network is the same and
/// whose point is from a current NCCL). The backtest checks each point with its own type's fit.
std::string efficiencySourceOf(const std::string& instance);

/// The efficiency in (0, 1] that minimises the sum of squared log errors of the model over
/// the published points of `instance` of 128 MB and more (golden-section search; the model's
/// time is monotone in it). Computed once per instance type.
double fittedEfficiency(const std::string& instance);

/// One row of the backtest table.
struct BacktestRow {
  std::string instance;
  int nodes = 0;
  size_t bytes = 0;
  double publishedGBps = 0;
  double predictedGBps = 0;  ///< busbw of the model's time
  double ceilingGBps = 0;    ///< busbw of lowerBoundUs (full link speed)
  double predictedUs = 0;
  double efficiency = 0;  ///< the instance type's fitted efficiency
  double latencyUs = 0;   ///< NCCL's latency term of predictedUs (NcclTerms::latencyUs)
  double formulaUs = 0;   ///< NCCL's own latency formula there (NcclTerms::formulaUs)
  double capGBps = 0;     ///< NCCL's channel cap (bus bandwidth); 0: none
  Collective coll = Collective::AllReduce;
  std::string ncclAlgorithm;
  std::string sharcAlgorithm;
  std::string source;
  /// (predicted - published) / published
  double error() const { return (predictedGBps - publishedGBps) / publishedGBps; }
  /// The allowed |error|: 0.15 at >= 128 MB, 0.30 below.
  double bound() const;
};

/// The model of every published point with its instance type's fitted efficiency.
std::vector<BacktestRow> runBacktest();
/// The same for any points (publishedCurve()).
std::vector<BacktestRow> modelRows(const std::vector<PublishedPoint>& points);

/// The rows that break a bound (|error| above bound(), or a prediction or published figure
/// above the ceiling), one line each; empty when all hold.
std::vector<std::string> boundViolations(const std::vector<BacktestRow>& rows);

/// The rows as JSON: {"rows": [...], "curve": [...], "allgather_curve": [...],
/// "efficiency": {...}} (tools/plot_backtest.py reads it).
std::string backtestJson(const std::vector<BacktestRow>& rows,
                         const std::vector<BacktestRow>& curve = {},
                         const std::vector<BacktestRow>& allGatherCurve = {});

/// Sharc's hierarchical algorithm against the tuner's ring on `cluster`: the predicted times
/// of both for `c` of `bytes` on `nodes` nodes (the tuner's own terms for both).
struct HierVsRing {
  int nodes = 0;
  size_t bytes = 0;
  double ringUs = 0;
  double hierarchicalUs = 0;
  double speedup() const { return ringUs / hierarchicalUs; }
};
std::vector<HierVsRing> hierarchicalVsRing(const Cluster& cluster, Collective c,
                                           const std::vector<int>& nodes,
                                           const std::vector<size_t>& bytes);

}  // namespace sharc::plan

// A Cluster (include/sharc/plan.hpp) as the tuner's cost model takes it: its parameters and
// the node map of N nodes numbered node by node.
#pragma once

#include "algorithms/cost_model.hpp"
#include "algorithms/node_map.hpp"
#include "algorithms/tuner.hpp"
#include "sharc/plan.hpp"

namespace sharc::plan {

/// The tuner's parameters for `c`: its links at `efficiency` of their speed, no
/// oversubscription (one core per rank), no cache effect on local messages.
algo::TunerParams tunerParams(const Cluster& c);
/// The Cluster of tuner parameters `p` (cluster_file.cc: this host, a cluster file's
/// defaults), `ranksPerNode` ranks and `memoryBytes` each; tunerParams() gives `p`'s links,
/// rails and rail share back.
Cluster fromTuner(const algo::TunerParams& p, int ranksPerNode, double memoryBytes);
/// `nodes` nodes of `ranksPerNode` ranks, numbered node by node.
algo::NodeMap nodeMap(int nodes, int ranksPerNode);
/// The override that `SHARC_ALGO=<c's prefix>:<algorithm>` makes (a forced algorithm of the
/// planner; "" forces none); throws sharc::Error naming a bad algorithm.
algo::AlgorithmOverride forcedAlgorithm(Collective c, const std::string& algorithm);
/// The tuner's shape of `c` of `bytes` on `map` (bytes: AllGather output, ReduceScatter
/// input, AllReduce vector).
algo::CallShape callShape(Collective c, size_t bytes, const algo::NodeMap& map);

/// predictCollective for a group of `nodes` nodes with `ranksPerNode` of its ranks on each,
/// while `sharing` such groups run at once on every node: each gets 1/sharing of the node's
/// fabricGBps (the rank's own local links are not shared). The bound is the group's own.
Prediction predictGroup(const Cluster& cluster, int nodes, int ranksPerNode, int sharing,
                        Collective c, size_t bytes, const std::string& algorithm = "");

/// predictCollective on data path `path` (algo::model::DataPath). DeviceDirect: predictCollective
/// itself. Staged ("Data paths" in cost_model.hpp): the host collective of one staging chunk
/// (the engine's default SHARC_GPU_STAGING_CHUNK per rank) with reductions at the host's rate,
/// pipelined with its copies over the GPU's PCIe link at `cluster`.pcieGBps; algorithm and
/// chunkBytes are that host collective's. Throws sharc::Error for Staged where pcieGBps is 0.
Prediction predictPath(const Cluster& cluster, int nodes, Collective c, size_t bytes,
                       algo::model::DataPath path, const std::string& algorithm = "");

/// Bytes the busiest node sends over the fabric for `c` of `bytes` (as in Prediction::bytes)
/// run with `a` on `nodes` x `ranksPerNode` ranks numbered node by node: the cost model's
/// (algo::model::fabricBytesPerNode). Throws sharc::Error for an algorithm without a fabric
/// pattern (the single-copy and tree forms).
double interNodeBytesPerNode(algo::Algorithm a, Collective c, double bytes, int nodes,
                             int ranksPerNode);

}  // namespace sharc::plan

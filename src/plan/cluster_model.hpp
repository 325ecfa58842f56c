// A Cluster (include/sharc/plan.hpp) as the tuner's cost model takes it: its parameters and
// the node map of N nodes numbered node by node.
#pragma once

#include "algorithms/node_map.hpp"
#include "algorithms/tuner.hpp"
#include "sharc/plan.hpp"

namespace sharc::plan {

/// The tuner's parameters for `c`: its links at `efficiency` of their speed, no
/// oversubscription (one core per rank), no cache effect on local messages.
algo::TunerParams tunerParams(const Cluster& c);
/// `nodes` nodes of `ranksPerNode` ranks, numbered node by node.
algo::NodeMap nodeMap(int nodes, int ranksPerNode);
/// The tuner's shape of `c` of `bytes` on `map` (bytes: AllGather output, ReduceScatter
/// input, AllReduce vector).
algo::CallShape callShape(Collective c, size_t bytes, const algo::NodeMap& map);

}  // namespace sharc::plan

// The layouts, clusters and sizes of the simulation check, shared by the
// CTest (test_schedule_sim.cc) and its --table sweep.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "algorithms/tuner.hpp"
#include "plan/cluster_model.hpp"
#include "plan/schedule_sim.hpp"

namespace sharc::plan::simcheck {

/// A p5-like node: 8 ranks, NVLink 450 GB/s, 400 GB/s of fabric per node over 32 NICs (each
/// rank on its 4: 50 GB/s of its own, TunerParams::fabricRankShare), 20 us per fabric
/// message; copy and reduce at H100 HBM rates (3.35 TB/s over 2 and 3 passes).
inline Cluster p5Like() {
  Cluster c;
  c.name = "p5-like";
  c.ranksPerNode = 8;
  c.rails = 32;
  c.localAlphaUs = 1.9;
  c.localGBps = 450;
  c.fabricAlphaUs = 20;
  c.fabricGBps = 400;
  c.copyGBps = 1675;
  c.reduceGBps = 1117;
  c.stepUs = 0.5;
  return c;
}

/// Ranks numbered node by node, `sizes[i]` on node i.
inline algo::NodeMap layout(const std::vector<int>& sizes) {
  std::vector<uint64_t> keys;
  for (size_t i = 0; i < sizes.size(); ++i)
    for (int j = 0; j < sizes[i]; ++j) keys.push_back(i);
  return algo::NodeMap::fromKeys(keys);
}

/// "16x8", or "8+8+4" for uneven nodes.
inline std::string layoutName(const std::vector<int>& sizes) {
  bool even = true;
  for (int s : sizes) even = even && s == sizes[0];
  if (even) return std::to_string(sizes.size()) + "x" + std::to_string(sizes[0]);
  std::string out;
  for (int s : sizes) out += (out.empty() ? "" : "+") + std::to_string(s);
  return out;
}

inline std::string sizeName(size_t b) {
  if (b >= (1u << 30)) return std::to_string(b >> 30) + "G";
  if (b >= (1u << 20)) return std::to_string(b >> 20) + "M";
  return std::to_string(b >> 10) + "K";
}

/// One comparison: the model's time and the replay's for the same call, algorithm and chunk.
struct Row {
  std::string cluster, layout;
  Collective coll = Collective::AllGather;
  algo::Algorithm algorithm = algo::Algorithm::Ring;
  size_t bytes = 0, chunk = 0;
  double modelUs = 0, simUs = 0;
  double error() const { return (modelUs - simUs) / simUs; }  ///< signed, relative to the replay
};

/// Model and replay of `c` of `bytes` on `map`, with `a` forced and the chunk the tuner picks
/// for it.
inline Row compare(const std::string& cluster, const algo::TunerParams& p,
                   const std::vector<int>& sizes, Collective c, size_t bytes, algo::Algorithm a) {
  const algo::NodeMap map = layout(sizes);
  algo::CallShape shape = simShape(c, bytes, map);
  auto& forced = c == Collective::AllGather       ? shape.override.allGather
                 : c == Collective::ReduceScatter ? shape.override.reduceScatter
                                                  : shape.override.allReduce;
  forced = a;
  const algo::Plan plan = algo::plan(shape, p, false);
  Row row{cluster,         layoutName(sizes), c, plan.algorithm, bytes,
          plan.chunkBytes, plan.predictedUs,  0};
  row.simUs = simulate(p, map, c, bytes, plan.algorithm, plan.chunkBytes).us;
  return row;
}

/// The algorithms the tuner considers for the call (what it could pick).
inline std::vector<algo::Algorithm> algorithmsFor(Collective c, size_t bytes,
                                                  const std::vector<int>& sizes) {
  const algo::NodeMap map = layout(sizes);
  return algo::candidates(simShape(c, bytes, map));
}

inline std::string rowText(const Row& r) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "| %s | %s | %s | %s | %s | %s | %.1f | %.1f | %+.1f%% |",
                r.cluster.c_str(), r.layout.c_str(), collectiveName(r.coll),
                algo::algorithmName(r.algorithm), sizeName(r.bytes).c_str(),
                sizeName(r.chunk).c_str(), r.modelUs, r.simUs, 100 * r.error());
  return buf;
}

inline const char* tableHeader() {
  return "| cluster | layout | collective | algorithm | bytes | chunk | model us | simulated us "
         "| model error |\n|---|---|---|---|---|---|---|---|---|";
}

}  // namespace sharc::plan::simcheck

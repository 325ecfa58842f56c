#include "cluster_model.hpp"

#include <cmath>
#include <cstdint>

#include "sharc/error.hpp"

namespace sharc::plan {
namespace {

algo::CollKind collKind(Collective c) {
  switch (c) {
    case Collective::ReduceScatter: return algo::CollKind::ReduceScatter;
    case Collective::AllReduce: return algo::CollKind::AllReduce;
    default: return algo::CollKind::AllGather;
  }
}

int ceilLog2(int x) {
  int k = 0;
  while ((1 << k) < x) ++k;
  return k;
}

}  // namespace

const char* collectiveName(Collective c) {
  switch (c) {
    case Collective::ReduceScatter: return "reduce_scatter";
    case Collective::AllReduce: return "all_reduce";
    default: return "all_gather";
  }
}

algo::TunerParams tunerParams(const Cluster& c) {
  algo::TunerParams p;
  p.local = {c.localAlphaUs, c.localGBps * c.efficiency};
  p.fabric = {c.fabricAlphaUs, c.fabricGBps * c.efficiency};
  p.copyGbps = c.copyGBps;
  p.reduceGbps = c.reduceGBps;
  p.stepUs = c.stepUs;
  p.cores = c.ranksPerNode;  // a GPU (or core) per rank: no oversubscription
  p.localCacheGbps = p.local.gbps;
  p.switchUs = 0;
  return p;
}

algo::NodeMap nodeMap(int nodes, int ranksPerNode) {
  std::vector<uint64_t> keys;
  keys.reserve(static_cast<size_t>(nodes) * static_cast<size_t>(ranksPerNode));
  for (int i = 0; i < nodes; ++i)
    for (int j = 0; j < ranksPerNode; ++j) keys.push_back(static_cast<uint64_t>(i));
  return algo::NodeMap::fromKeys(keys);
}

algo::CallShape callShape(Collective c, size_t bytes, const algo::NodeMap& map) {
  algo::CallShape s;
  s.kind = collKind(c);
  s.nranks = map.size();
  s.bytesPerRank = c == Collective::AllReduce ? bytes : bytes / static_cast<size_t>(s.nranks);
  s.locality = algo::Locality::Network;
  s.nodes = &map;
  return s;
}

double busBandwidthGBps(Collective c, size_t bytes, double us, int ranks) {
  if (us <= 0 || ranks < 1) return 0;
  const double factor = (c == Collective::AllReduce ? 2.0 : 1.0) * (ranks - 1) / ranks;
  return static_cast<double>(bytes) / (us * 1e3) * factor;
}

double lowerBoundUs(const Cluster& cl, int nodes, Collective c, size_t bytes) {
  const double s = static_cast<double>(bytes);
  const double times = c == Collective::AllReduce ? 2.0 : 1.0;
  if (nodes > 1)
    return times * (s * (nodes - 1) / nodes / (cl.fabricGBps * 1e3) +
                     ceilLog2(nodes) * cl.fabricAlphaUs);
  const int L = cl.ranksPerNode;
  if (L < 2) return 0;
  return times * (s * (L - 1) / L / (cl.localGBps * 1e3) + ceilLog2(L) * cl.localAlphaUs);
}

Prediction predictCollective(const Cluster& cl, int nodes, Collective c, size_t bytes,
                             const std::string& algorithm) {
  if (nodes < 1 || cl.ranksPerNode < 1)
    throw Error(Result::InvalidArgument,
                "plan: nodes (" + std::to_string(nodes) + ") and ranks per node (" +
                    std::to_string(cl.ranksPerNode) + ") must be at least 1");
  const algo::NodeMap map = nodeMap(nodes, cl.ranksPerNode);
  algo::CallShape shape = callShape(c, bytes, map);
  if (!algorithm.empty()) {
    shape.override = algo::AlgorithmOverride::parse(
        (c == Collective::AllGather       ? "allgather:"
         : c == Collective::ReduceScatter ? "reducescatter:"
                                          : "allreduce:") +
        algorithm);
  }
  const algo::Plan p = algo::plan(shape, tunerParams(cl), false);
  Prediction out;
  out.collective = c;
  out.nodes = nodes;
  out.ranks = map.size();
  out.bytes = bytes;
  out.algorithm = algo::algorithmName(p.algorithm);
  out.chunkBytes = p.chunkBytes;
  out.predictedUs = p.predictedUs;
  out.busGBps = busBandwidthGBps(c, bytes, p.predictedUs, out.ranks);
  out.boundUs = lowerBoundUs(cl, nodes, c, bytes);
  out.boundBusGBps = busBandwidthGBps(c, bytes, out.boundUs, out.ranks);
  return out;
}

}  // namespace sharc::plan

#include "cluster_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "algorithms/cost_model.hpp"
#include "core/collective.hpp"
#include "core/config.hpp"
#include "sharc/error.hpp"

namespace sharc::plan {
algo::AlgorithmOverride forcedAlgorithm(Collective c, const std::string& algorithm) {
  if (algorithm.empty()) return {};
  return algo::AlgorithmOverride::parse(core::collectiveKey(c) + ":" + algorithm);
}

const char* collectiveName(Collective c) {
  return core::collectiveToolName(c);
}

double rankFabricShare(int rails, int ranksPerNode) {
  const int R = std::max(1, rails), L = std::max(1, ranksPerNode);
  if (R >= L) return static_cast<double>(R / L) / R;  // floor(R/L) NICs of R (nic_mapping.cc)
  return 1.0 / R;                                     // one NIC, shared by about L/R ranks
}

int railsPerRank(int rails, int ranksPerNode) {
  return std::max(1, std::max(1, rails) / std::max(1, ranksPerNode));
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
  p.fabricHalfDuplex = c.fabricHalfDuplex;
  p.dmaTransfers = c.dmaTransfers;
  p.postedSends = c.postedSends;
  p.fabricRankShare = c.fabricRankShare > 0 ? std::min(1.0, c.fabricRankShare)
                                            : rankFabricShare(c.rails, c.ranksPerNode);
  // a rank's NICs (all alike unless railShare says otherwise): a message over k of them
  // moves at k / fabricRails of its share
  p.fabricRails = c.railsPerRank > 0 ? c.railsPerRank : railsPerRank(c.rails, c.ranksPerNode);
  p.fabricRailShare = c.railShare > 0 ? std::min(1.0, c.railShare) : 1.0 / p.fabricRails;
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
  s.kind = c;
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
  const int L = cl.ranksPerNode;
  // One latency: a node with several NICs can reach all its peers at once (the tuner's
  // hierarchical and direct algorithms do), so log2(N) hops are not a lower bound.
  if (nodes > 1) {
    const double fabricUs = times * s * (nodes - 1) / nodes / (cl.fabricGBps * 1e3);
    if (c == Collective::AllReduce || L < 2) return fabricUs + cl.fabricAlphaUs;
    // AllGather and ReduceScatter: each of the node's L ranks takes in (sends out) all but its
    // own block, through its NICs' share of the fabric and its NVLink together.
    const double n = static_cast<double>(nodes) * L;
    const double throughGpusUs = L * s * (n - 1) / n / ((cl.fabricGBps + L * cl.localGBps) * 1e3);
    return std::max(fabricUs, throughGpusUs) + cl.fabricAlphaUs;
  }
  if (L < 2) return 0;
  return times * s * (L - 1) / L / (cl.localGBps * 1e3) + cl.localAlphaUs;
}

Prediction predictGroup(const Cluster& cl, int nodes, int ranksPerNode, int sharing, Collective c,
                        size_t bytes, const std::string& algorithm) {
  if (nodes < 1 || ranksPerNode < 1 || sharing < 1)
    throw Error(Result::InvalidArgument, "plan: nodes (" + std::to_string(nodes) +
                                             "), ranks per node (" + std::to_string(ranksPerNode) +
                                             ") and groups sharing a node (" +
                                             std::to_string(sharing) + ") must be at least 1");
  // The group's own view of the cluster: its ranks per node, its share of each node's NICs.
  Cluster group = cl;
  group.ranksPerNode = ranksPerNode;
  group.fabricGBps = cl.fabricGBps / sharing;
  // A rank keeps its own NICs (placed for all of the node's ranks): of the group's 1/sharing
  // of the node, it drives `sharing` times its share of the whole node.
  const algo::TunerParams whole = tunerParams(cl);
  group.fabricRankShare = std::min(1.0, whole.fabricRankShare * sharing);
  group.railsPerRank = whole.fabricRails;  // still its own NICs
  const algo::NodeMap map = nodeMap(nodes, ranksPerNode);
  algo::CallShape shape = callShape(c, bytes, map);
  shape.override = forcedAlgorithm(c, algorithm);
  const algo::Plan p = algo::plan(shape, tunerParams(group), false);
  Prediction out;
  out.collective = c;
  out.nodes = nodes;
  out.ranks = map.size();
  out.bytes = bytes;
  out.algorithm = algo::algorithmName(p.algorithm);
  out.chunkBytes = p.chunkBytes;
  out.predictedUs = p.predictedUs;
  out.busGBps = busBandwidthGBps(c, bytes, p.predictedUs, out.ranks);
  out.boundUs = lowerBoundUs(group, nodes, c, bytes);
  out.boundBusGBps = busBandwidthGBps(c, bytes, out.boundUs, out.ranks);
  return out;
}

Prediction predictCollective(const Cluster& cl, int nodes, Collective c, size_t bytes,
                             const std::string& algorithm) {
  if (cl.ranksPerNode < 1)
    throw Error(
        Result::InvalidArgument,
        "plan: ranks per node (" + std::to_string(cl.ranksPerNode) + ") must be at least 1");
  return predictGroup(cl, nodes, cl.ranksPerNode, 1, c, bytes, algorithm);
}

Prediction predictPath(const Cluster& cl, int nodes, Collective c, size_t bytes,
                       algo::model::DataPath path, const std::string& algorithm) {
  if (path == algo::model::DataPath::DeviceDirect)
    return predictCollective(cl, nodes, c, bytes, algorithm);
  if (cl.pcieGBps <= 0)
    throw Error(Result::InvalidArgument,
                "plan: cluster '" + cl.name + "' has no PCIe rate (pcie_gbps) for the staged path");
  Prediction whole = predictCollective(cl, nodes, c, bytes, algorithm);  // checks the shape
  const int n = whole.ranks;
  const double block =
      c == Collective::AllReduce ? static_cast<double>(bytes) : static_cast<double>(bytes) / n;
  const size_t staging = core::Config{}.gpuStagingChunkBytes;
  const int chunks = algo::model::stagedChunks(block, staging);
  const double chunkBytes = static_cast<double>(bytes) / chunks;
  // The host collective of one chunk: the same links, the host's reductions.
  Cluster host = cl;
  host.reduceGBps =
      cl.hostReduceGBps > 0 ? cl.hostReduceGBps : algo::TunerParams::defaults().reduceGbps;
  const Prediction chunk = predictCollective(
      host, nodes, c, std::max<size_t>(1, static_cast<size_t>(std::ceil(chunkBytes))), algorithm);
  const double copyUs = algo::model::stagedCopies(c, chunkBytes, n).total() / (cl.pcieGBps * 1e3);
  whole.algorithm = chunk.algorithm;
  whole.chunkBytes = chunk.chunkBytes;
  whole.predictedUs = algo::model::stagedUs(chunk.predictedUs, copyUs, chunks);
  whole.busGBps = busBandwidthGBps(c, bytes, whole.predictedUs, n);
  return whole;
}

double interNodeBytesPerNode(algo::Algorithm a, Collective c, double bytes, int N, int L) {
  if (const auto b = algo::model::fabricBytesPerNode(c, a, bytes, N, L)) return *b;
  throw Error(Result::InvalidArgument,
              std::string("plan: no fabric pattern for algorithm '") + algo::algorithmName(a) +
                  "' (expected ring, hierarchical, recursive_doubling, bruck or direct)");
}

}  // namespace sharc::plan

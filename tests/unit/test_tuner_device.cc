// The tuner on device buffers (CallShape::device): the queue's rates, no single-copy
// algorithms, staged links bounded by the queue's host copies.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "algorithms/tuner.hpp"
#include "core/collective.hpp"

namespace sharc::algo {
namespace {

TunerParams params() {
  TunerParams p = TunerParams::defaults();
  p.cores = 2;  // the oversubscription factor must not depend on the machine
  return p;
}

CallShape shape(CollectiveKind kind, size_t total, int n, Locality loc, const NodeMap* nodes,
                const DeviceCall* device) {
  CallShape s;
  s.kind = kind;
  s.bytesPerRank = kind == CollectiveKind::AllReduce ? total : total / static_cast<size_t>(n);
  s.nranks = n;
  s.locality = loc;
  s.nodes = nodes;
  s.device = device;
  return s;
}

NodeMap layout(const std::vector<int>& perNode) {
  std::vector<uint64_t> keys;
  for (size_t i = 0; i < perNode.size(); ++i)
    for (int j = 0; j < perNode[i]; ++j) keys.push_back(i);
  return NodeMap::fromKeys(keys);
}

bool singleCopy(Algorithm a) {
  return a == Algorithm::DirectRead || a == Algorithm::DirectWrite;
}

constexpr size_t M = 1024 * 1024;
const CollectiveKind kKinds[] = {CollectiveKind::AllGather, CollectiveKind::ReduceScatter,
                                 CollectiveKind::AllReduce};

TEST(TunerDevice, NeverPlansTheSingleCopyAlgorithms) {
  const TunerParams p = params();
  const DeviceCall hostQueue = deviceCallRates(p, true);
  const NodeMap one = layout({4});
  int hostSingle = 0;
  for (CollectiveKind kind : kKinds)
    for (size_t total : {size_t{4096}, 1 * M, 64 * M}) {
      const CallShape host = shape(kind, total, 4, Locality::OneHostSingleCopy, &one, nullptr);
      const CallShape dev = shape(kind, total, 4, Locality::OneHostSingleCopy, &one, &hostQueue);
      hostSingle += singleCopy(plan(host, p).algorithm) ? 1 : 0;
      EXPECT_FALSE(singleCopy(plan(dev, p).algorithm))
          << core::collectiveName(kind) << " " << total;
      for (Algorithm a : candidates(dev)) EXPECT_FALSE(singleCopy(a)) << algorithmName(a);
      // A forced single-copy name runs as the ring on device buffers.
      CallShape forced = dev;
      forced.override.allGather = forced.override.reduceScatter = forced.override.allReduce =
          Algorithm::DirectRead;
      EXPECT_EQ(plan(forced, p).algorithm, Algorithm::Ring) << core::collectiveName(kind);
    }
  EXPECT_GT(hostSingle, 0) << "the host plans never chose a single-copy algorithm: no check";
  EXPECT_EQ(deviceAlgorithm(Algorithm::DirectWrite), Algorithm::Ring);
  EXPECT_EQ(deviceAlgorithm(Algorithm::Hierarchical), Algorithm::Hierarchical);
}

TEST(TunerDevice, HostQueueOnDirectLinksCostsAsTheHost) {
  // The host queue copies and reduces at the host's rates: across nodes, with no staged link,
  // every algorithm costs what it costs on host buffers.
  const TunerParams p = params();
  const DeviceCall hostQueue = deviceCallRates(p, true);
  const NodeMap twoByTwo = layout({2, 2});
  for (CollectiveKind kind : kKinds)
    for (size_t total : {size_t{65536}, 16 * M}) {
      const CallShape host = shape(kind, total, 4, Locality::Network, &twoByTwo, nullptr);
      const CallShape dev = shape(kind, total, 4, Locality::Network, &twoByTwo, &hostQueue);
      EXPECT_EQ(candidates(host), candidates(dev));
      for (Algorithm a : candidates(dev))
        EXPECT_DOUBLE_EQ(predictUs(dev, a, 1 * M, p), predictUs(host, a, 1 * M, p))
            << core::collectiveName(kind) << " " << algorithmName(a);
      EXPECT_EQ(plan(dev, p).algorithm, plan(host, p).algorithm);
    }
}

TEST(TunerDevice, GpuReductionsOnlyChangeTheReducingCollectives) {
  TunerParams p = params();
  const DeviceCall gpu = deviceCallRates(p, false);
  EXPECT_DOUBLE_EQ(gpu.reduceGbps, p.gpuReduceGbps);
  EXPECT_DOUBLE_EQ(gpu.stagingGbps, p.pcieGbps);
  const NodeMap twoByTwo = layout({2, 2});
  const CallShape hostRs =
      shape(CollectiveKind::ReduceScatter, 64 * M, 4, Locality::Network, &twoByTwo, nullptr);
  const CallShape gpuRs =
      shape(CollectiveKind::ReduceScatter, 64 * M, 4, Locality::Network, &twoByTwo, &gpu);
  EXPECT_LT(predictUs(gpuRs, Algorithm::Ring, 1 * M, p),
            predictUs(hostRs, Algorithm::Ring, 1 * M, p));
  // Same rates as the host: the same cost (the difference above is the queue's rates).
  TunerParams same = p;
  same.gpuReduceGbps = p.reduceGbps;
  same.gpuCopyGbps = p.copyGbps;
  const DeviceCall sameRates = deviceCallRates(same, false);
  const CallShape sameRs =
      shape(CollectiveKind::ReduceScatter, 64 * M, 4, Locality::Network, &twoByTwo, &sameRates);
  EXPECT_DOUBLE_EQ(predictUs(sameRs, Algorithm::Ring, 1 * M, same),
                   predictUs(hostRs, Algorithm::Ring, 1 * M, same));
  std::string breakdown;
  predictUs(gpuRs, Algorithm::Ring, 1 * M, p, &breakdown);
  EXPECT_NE(breakdown.find("device queue: reduce"), std::string::npos) << breakdown;
}

TEST(TunerDevice, StagedLinksCarryAtMostTheQueuesHostCopies) {
  TunerParams p = params();
  p.fabric.gbps = 10;
  p.pcieGbps = 0.5;  // far under the fabric: the staged link's rate
  DeviceCall direct = deviceCallRates(p, false);
  DeviceCall staged = direct;
  staged.stagedFabric = true;
  const NodeMap twoNodes = layout({1, 1});
  const size_t total = 64 * M;
  for (CollectiveKind kind : kKinds) {
    const CallShape d = shape(kind, total, 2, Locality::Network, &twoNodes, &direct);
    const CallShape s = shape(kind, total, 2, Locality::Network, &twoNodes, &staged);
    const Plan ps = plan(s, p);
    EXPECT_GT(ps.predictedUs, plan(d, p).predictedUs) << core::collectiveName(kind);
    // Each of the 2 ranks receives at least half the data (AllReduce: its half of the
    // vector, reduced, then the other half gathered) over its staged link.
    const double across = kind == CollectiveKind::AllReduce ? total : total / 2.0;
    EXPECT_GE(ps.predictedUs, across / (p.pcieGbps * 1e3)) << core::collectiveName(kind);
  }
}

TEST(TunerDevice, GpuRatesAreTunerFileKeys) {
  const std::string text = params().toText();
  for (const char* key : {"gpu.copy_gbps = ", "gpu.reduce_gbps = ", "gpu.pcie_gbps = 50.000"})
    EXPECT_NE(text.find(key), std::string::npos) << key << " in\n" << text;
}

}  // namespace
}  // namespace sharc::algo

// The data paths of GPU buffers (src/algorithms/cost_model.hpp, "Data paths";
// src/plan/cluster_model.hpp, predictPath): the staged path's closed forms, never faster than
// device-direct, bounded by the PCIe rate, reductions at the host's rate; and the published
// NCCL points sharc-plan collective prints beside them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cluster_model.hpp"
#include "nccl_backtest.hpp"
#include "plan_test_cluster.hpp"
#include "sharc/error.hpp"
#include "sharc/plan.hpp"

namespace sharc::plan {
namespace {

using algo::model::DataPath;

constexpr Collective kAll[] = {Collective::AllGather, Collective::ReduceScatter,
                               Collective::AllReduce};
constexpr size_t kMiB = size_t{1} << 20;

// Every cluster with a staged path: the built-in profiles and the test cluster given a
// Gen5-like PCIe link.
std::vector<Cluster> stagedClusters() {
  Cluster t = testCluster();
  t.pcieGBps = 50;
  std::vector<Cluster> out{t};
  for (const std::string& n : builtinClusterNames()) out.push_back(builtinCluster(n));
  return out;
}

TEST(PlanDataPath, StagedCopiesPerCollective) {
  const auto ag = algo::model::stagedCopies(Collective::AllGather, 800, 8);
  EXPECT_DOUBLE_EQ(ag.toHost, 100);    // its own piece out
  EXPECT_DOUBLE_EQ(ag.toDevice, 800);  // every piece back
  const auto rs = algo::model::stagedCopies(Collective::ReduceScatter, 800, 8);
  EXPECT_DOUBLE_EQ(rs.toHost, 800);
  EXPECT_DOUBLE_EQ(rs.toDevice, 100);
  const auto ar = algo::model::stagedCopies(Collective::AllReduce, 800, 8);
  EXPECT_DOUBLE_EQ(ar.total(), 1600);
}

TEST(PlanDataPath, PipelineIsTheSlowerStagePlusTheFill) {
  EXPECT_EQ(algo::model::stagedChunks(1, 4 * kMiB), 1);
  EXPECT_EQ(algo::model::stagedChunks(4.0 * kMiB, 4 * kMiB), 1);
  EXPECT_EQ(algo::model::stagedChunks(4.0 * kMiB + 1, 4 * kMiB), 2);
  // one chunk: both stages in turn; more: the slower stage per chunk plus the other once
  EXPECT_DOUBLE_EQ(algo::model::stagedUs(10, 4, 1), 14);
  EXPECT_DOUBLE_EQ(algo::model::stagedUs(10, 4, 5), 4 * 10 + 14);
  EXPECT_DOUBLE_EQ(algo::model::stagedUs(3, 7, 5), 4 * 7 + 10);
}

TEST(PlanDataPath, StagedIsNeverFasterThanDeviceDirect) {
  for (const Cluster& cl : stagedClusters())
    for (Collective c : kAll)
      for (int nodes : {1, 2, 8, 64})
        for (size_t b = kMiB; b <= (size_t{16} << 30); b *= 4) {
          const Prediction d = predictPath(cl, nodes, c, b, DataPath::DeviceDirect);
          const Prediction s = predictPath(cl, nodes, c, b, DataPath::Staged);
          EXPECT_GE(s.predictedUs, d.predictedUs)
              << cl.name << " " << collectiveName(c) << " " << nodes << " nodes " << b << " B";
          EXPECT_LE(s.busGBps, d.busGBps * (1 + 1e-9)) << cl.name << " " << nodes << " " << b;
        }
}

TEST(PlanDataPath, StagedLargeCallsAreBoundedByPcie) {
  for (const Cluster& cl : stagedClusters())
    for (Collective c : kAll)
      for (int nodes : {1, 2, 16})
        for (size_t b : {size_t{256} * kMiB, size_t{4} << 30, size_t{16} << 30}) {
          const Prediction s = predictPath(cl, nodes, c, b, DataPath::Staged);
          EXPECT_GT(s.busGBps, 0);
          EXPECT_LE(s.busGBps, cl.pcieGBps)
              << cl.name << " " << collectiveName(c) << " " << nodes << " nodes " << b << " B";
        }
  // On one p5 node AllGather's device-direct path runs at NVLink speed, far above PCIe: the
  // staged one is held near the PCIe rate (every byte back over H2D, 1/n of it out).
  const Cluster p5 = builtinCluster("p5.48xlarge");
  const size_t b = size_t{4} << 30;
  const Prediction d = predictPath(p5, 1, Collective::AllGather, b, DataPath::DeviceDirect);
  const Prediction s = predictPath(p5, 1, Collective::AllGather, b, DataPath::Staged);
  EXPECT_GT(d.busGBps, 2 * p5.pcieGBps);
  EXPECT_GT(s.busGBps, 0.5 * p5.pcieGBps);
  EXPECT_LE(s.busGBps, p5.pcieGBps * 7 / 9);  // (n-1)/(n+1) of it at most
}

TEST(PlanDataPath, StagedReducesAtTheHostRate) {
  Cluster cl = builtinCluster("p5.48xlarge");
  const size_t b = size_t{1} << 30;
  const double arDirect =
      predictPath(cl, 2, Collective::AllReduce, b, DataPath::DeviceDirect).predictedUs;
  cl.hostReduceGBps = 1;  // a slow host: AllReduce slows down, AllGather does not
  const double slowAr = predictPath(cl, 2, Collective::AllReduce, b, DataPath::Staged).predictedUs;
  const double slowAg = predictPath(cl, 2, Collective::AllGather, b, DataPath::Staged).predictedUs;
  cl.hostReduceGBps = 1000;
  const double fastAr = predictPath(cl, 2, Collective::AllReduce, b, DataPath::Staged).predictedUs;
  const double fastAg = predictPath(cl, 2, Collective::AllGather, b, DataPath::Staged).predictedUs;
  EXPECT_GT(slowAr, 2 * fastAr);
  EXPECT_DOUBLE_EQ(slowAg, fastAg);
  // the GPU's own reduce rate is not what the staged path uses
  cl.reduceGBps = 1e6;
  EXPECT_DOUBLE_EQ(predictPath(cl, 2, Collective::AllReduce, b, DataPath::Staged).predictedUs,
                   fastAr);
  EXPECT_LT(arDirect, slowAr);
}

TEST(PlanDataPath, DeviceDirectIsPredictCollective) {
  const Cluster cl = builtinCluster("p4d.24xlarge");
  const Prediction a = predictPath(cl, 4, Collective::AllGather, 64 * kMiB, DataPath::DeviceDirect);
  const Prediction b = predictCollective(cl, 4, Collective::AllGather, 64 * kMiB);
  EXPECT_EQ(a.predictedUs, b.predictedUs);
  EXPECT_EQ(a.algorithm, b.algorithm);
}

TEST(PlanDataPath, StagedNeedsAPcieRate) {
  const Cluster cl = testCluster();  // pcieGBps 0
  EXPECT_THROW(predictPath(cl, 2, Collective::AllGather, kMiB, DataPath::Staged), Error);
  EXPECT_STREQ(algo::model::dataPathName(DataPath::Staged), "staged");
  EXPECT_STREQ(algo::model::dataPathName(DataPath::DeviceDirect), "device-direct");
}

TEST(PlanDataPath, PublishedPointsAtTheirShape) {
  // the AllGather curve's 8-node 32 MiB point, the AllReduce curve's, a p4d point; none at 64
  EXPECT_DOUBLE_EQ(publishedBusGBps("p5.48xlarge", Collective::AllGather, 8, 32 * kMiB), 46.29);
  EXPECT_DOUBLE_EQ(publishedBusGBps("p5.48xlarge", Collective::AllReduce, 8, 32 * kMiB), 86.74);
  EXPECT_DOUBLE_EQ(publishedBusGBps("p4d.24xlarge", Collective::AllReduce, 2, 1024 * kMiB), 57.17);
  EXPECT_EQ(publishedBusGBps("p5.48xlarge", Collective::AllGather, 64, 32 * kMiB), 0);
  EXPECT_EQ(publishedBusGBps("p5.48xlarge", Collective::ReduceScatter, 8, 32 * kMiB), 0);
  for (const PublishedPoint& p : publishedAllGatherCurve())
    EXPECT_EQ(publishedBusGBps(p.instance, p.coll, p.nodes, p.bytes), p.busGBps);
}

}  // namespace
}  // namespace sharc::plan

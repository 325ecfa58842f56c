// sharc's model of NCCL's AllGather and ReduceScatter (src/plan/nccl_backtest_allgather.cc):
// the published p5 AllGather table within its bounds, NCCL's choice among its ring and PAT,
// and NCCL's busbw as the `collective` subcommand takes it (published, else the model).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "plan/nccl_backtest.hpp"
#include "sharc/error.hpp"
#include "sharc/plan.hpp"

namespace sharc::plan {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// The published p5 AllGather busbw (GB/s, nccl-tests all_gather_perf, out of place), copied
// from shared/reference/efa-published-busbw.md: nodes x 32 MiB .. 2 GiB.
const struct {
  int nodes;
  double gbps[7];
} kP5AllGather[] = {{2, {131.30, 200.43, 234.54, 215.58, 275.52, 322.00, 328.58}},
                    {4, {83.56, 138.94, 211.73, 253.36, 220.57, 288.53, 330.92}},
                    {8, {46.29, 86.80, 143.66, 215.43, 261.26, 224.47, 293.71}},
                    {16, {24.90, 46.99, 87.68, 144.05, 219.97, 261.88, 265.15}},
                    {32, {12.38, 24.96, 45.65, 86.30, 146.38, 222.40, 262.77}}};

// The done-when of the AllGather backtest: every published p5 point within 15 % at 128 MiB
// and more, 30 % below, and below the physical ceiling (every node injecting (N-1)/N of the
// output at 400 GB/s, plus one 4 us fabric latency).
TEST(BacktestAllGather, P5TableWithinItsBounds) {
  const double eff = fittedEfficiency("p5.48xlarge");
  int points = 0;
  for (const auto& row : kP5AllGather)
    for (int i = 0; i < 7; ++i) {
      const size_t bytes = (32 * kMiB) << i;
      SCOPED_TRACE(std::to_string(row.nodes) + " nodes " + std::to_string(bytes / kMiB) + " MiB");
      ASSERT_DOUBLE_EQ(publishedBusGBps("p5.48xlarge", Collective::AllGather, row.nodes, bytes),
                       row.gbps[i]);
      const double predicted =
          predictNccl("p5.48xlarge", row.nodes, bytes, eff, Collective::AllGather).busGBps;
      const double err = (predicted - row.gbps[i]) / row.gbps[i];
      EXPECT_LE(std::fabs(err), bytes >= 128 * kMiB ? 0.15 : 0.30)
          << "published " << row.gbps[i] << " predicted " << predicted;
      const int n = 8 * row.nodes;
      const double s = static_cast<double>(bytes);
      const double ceilingUs = s * (row.nodes - 1) / row.nodes / (400 * 1e3) + 4.0;
      EXPECT_LT(predicted, s / (ceilingUs * 1e3) * (n - 1) / n);
      ++points;
    }
  EXPECT_EQ(points, 35);
  EXPECT_EQ(modelRows(publishedAllGatherCurve()).size(), 35u);
}

// The ring latency of the AllGather model rebuilt here from NCCL's constants on p5 (16
// channels; LL128: 576,000 B chunks, whole steps over the network, line by line over NVLink,
// 4 + 75 us a network step, max(1.9, 2.0) an NVLink one, base 14; Simple: 4 MiB chunks in
// slices of half, 14 + 2 x 75 and max(3.4, 3 x 2.0), base 8.4) with a step cost of `stepUs`.
double ringLatencyUs(const NcclTerms& t, int nodes, size_t bytes, double stepUs) {
  const bool simple = t.choice.protocol == "Simple";
  RingPipe p;
  p.nodes = nodes;
  p.ranksPerNode = 8;
  p.allReduce = false;
  p.channelBytes = static_cast<double>(bytes) / 16;
  p.chunkBytes = simple ? 4.0 * (8 << 20) / 8 : 576000;
  p.netUnit = simple ? 0.5 : 1.0;
  p.intraUnit = simple ? 0.5 : 0.0;
  p.netGBps = t.cluster.fabricGBps / 16;
  p.nvlGBps = simple ? t.cluster.localGBps / 16 : std::min(t.cluster.localGBps / 16, 36.7);
  p.netUs = simple ? 164 : 79;
  p.intraUs = simple ? 6 : 2;
  p.stepUs = stepUs;
  const RingReplay r = ringReplay(p);
  return (simple ? 8.4 : 14) + std::max(0.0, r.replayUs - r.bandwidthUs);
}

// The ring's two fitted step costs (3 us LL128, 19.5 us Simple on p5) are the least-squares fit
// of the log error over the published AllGather table on a 0.5 us grid: the model's latency is
// the replay rebuilt above, and moving either constant by 0.5 us does not lower the sum.
TEST(BacktestAllGather, StepCostsAreTheLeastSquaresFit) {
  const double eff = fittedEfficiency("p5.48xlarge");
  const auto cost = [&](double ll128, double simple) {
    double sum = 0;
    for (const auto& row : kP5AllGather)
      for (int i = 0; i < 7; ++i) {
        const size_t bytes = (32 * kMiB) << i;
        const NcclTerms t = ncclTerms("p5.48xlarge", row.nodes, bytes, eff, Collective::AllGather);
        const bool isSimple = t.choice.protocol == "Simple";
        const double us =
            predictNccl("p5.48xlarge", row.nodes, bytes, eff, Collective::AllGather).predictedUs;
        EXPECT_NEAR(t.latencyUs, ringLatencyUs(t, row.nodes, bytes, isSimple ? 19.5 : 3), 1e-6);
        const double other =
            us - t.latencyUs + ringLatencyUs(t, row.nodes, bytes, isSimple ? simple : ll128);
        const int n = 8 * row.nodes;
        const double busbw = static_cast<double>(bytes) * (n - 1) / n / (other * 1e3);
        sum += std::pow(std::log(busbw / row.gbps[i]), 2);
      }
    return sum;
  };
  const double at = cost(3, 19.5);
  EXPECT_LE(at, cost(2.5, 19.5));
  EXPECT_LE(at, cost(3.5, 19.5));
  EXPECT_LE(at, cost(3, 19));
  EXPECT_LE(at, cost(3, 20));
  EXPECT_LT(at, cost(0, 0));  // and the step costs help: 25 of 35 within their bounds without
}

// NCCL's time model for AllGather at full line rate, by hand (tuning.cc constants on p5:
// plugin latency 75 us, AMD net overhead 2 us): Ring LL128 14 + (n-N) 2 + (N-1)(4 + 75) at
// min(0.92 x 400, 8 x 36.7) GB/s; Ring Simple 8.4 + (n-N) 6 + (N-1)(14 + 150) at 400;
// PAT (one rank per node) 8 + log2 N (14 + 150) / 3.5 + 2.8 n at 0.75 x 400.
std::string handChoice(int nodes, int perNode, size_t bytes) {
  const int n = nodes * perNode;
  const double s = static_cast<double>(bytes) * (n - 1) / n / 1e3;  // bytes / 1e3: us at GB/s
  const double ll128 = 14 + (n - nodes) * 2.0 + (nodes - 1) * 79.0 + s / 293.6;
  const double simple = 8.4 + (n - nodes) * 6.0 + (nodes - 1) * 164.0 + s / 400;
  const double pat = 8 + std::log2(nodes) * 164.0 / 3.5 + 2.8 * n + s / 300;
  if (perNode == 1 && pat < std::min(ll128, simple)) return "PAT Simple";
  return ll128 < simple ? "Ring LL128" : "Ring Simple";
}

TEST(BacktestAllGather, NcclsChoiceAmongRingAndPat) {
  for (int perNode : {8, 1})
    for (int nodes : {2, 4, 16, 64, 256, 1024})
      for (size_t mib : {1, 16, 256, 4096}) {
        SCOPED_TRACE(std::to_string(nodes) + " x " + std::to_string(perNode) + ", " +
                     std::to_string(mib) + " MiB");
        const NcclChoice c = ncclAllGatherChoice("p5.48xlarge", nodes, mib * kMiB, perNode);
        EXPECT_EQ(c.nccl(), handChoice(nodes, perNode, mib * kMiB));
        if (perNode != 1) {
          EXPECT_NE(c.algorithm, "PAT");  // ncclPatEnable: nNodes == nRanks
        }
      }
  // PAT's log2 N latency wins small calls on many single-GPU nodes, the ring large ones on few.
  EXPECT_EQ(ncclAllGatherChoice("p5.48xlarge", 64, kMiB, 1).nccl(), "PAT Simple");
  EXPECT_EQ(ncclAllGatherChoice("p5.48xlarge", 2, 4096 * kMiB, 1).nccl(), "Ring Simple");
  EXPECT_EQ(ncclAllGatherChoice("p5.48xlarge", 64, kMiB, 8).nccl(), "Ring LL128");
}

TEST(BacktestAllGather, PatTermsFromNcclsConstants) {
  const double e = fittedEfficiency("p5.48xlarge");
  const NcclTerms t = ncclTerms("p5.48xlarge", 64, kMiB, e, Collective::AllGather, 1);
  ASSERT_EQ(t.choice.nccl(), "PAT Simple");
  EXPECT_NEAR(t.formulaUs, 8 + 6 * 164.0 / 3.5 + 2.8 * 64, 1e-9);
  EXPECT_DOUBLE_EQ(t.latencyUs, t.formulaUs);  // no ring pipeline to hide it
  EXPECT_NEAR(t.cluster.fabricGBps, e * 400 * 0.75, 1e-9);
  EXPECT_EQ(t.cluster.ranksPerNode, 1);
  // The prediction: the formula plus the bytes through each node's link at that rate.
  const double us = predictNccl("p5.48xlarge", 64, kMiB, e, Collective::AllGather, 1).predictedUs;
  EXPECT_NEAR(us, t.formulaUs + kMiB * 63.0 / 64 / (e * 300 * 1e3), 0.02 * us);
  // NCCL's AllReduce model is the profile's 8 ranks per node only.
  EXPECT_THROW(ncclTerms("p5.48xlarge", 4, kMiB, e, Collective::AllReduce, 1), Error);
}

// ReduceScatter runs the same ring as AllGather (n-1 steps, the reduction fused into NCCL's
// copy): the same time at the same bytes.
TEST(BacktestAllGather, ReduceScatterIsAllGathersRing) {
  const double e = fittedEfficiency("p5.48xlarge");
  for (int nodes : {2, 16, 128})
    for (size_t mib : {32, 1024}) {
      const Prediction ag = predictNccl("p5.48xlarge", nodes, mib * kMiB, e, Collective::AllGather);
      const Prediction rs =
          predictNccl("p5.48xlarge", nodes, mib * kMiB, e, Collective::ReduceScatter);
      EXPECT_NEAR(rs.predictedUs, ag.predictedUs, 0.01 * ag.predictedUs) << nodes << " " << mib;
    }
}

TEST(BacktestAllGather, NcclBusbwPublishedElseModelled) {
  const Cluster p5 = builtinCluster("p5.48xlarge");
  const double e = fittedEfficiency("p5.48xlarge");
  // Published where the backtest carries the run (8 nodes, 1 GiB: 224.47 GB/s).
  const NcclBusbw pub = ncclBusGBps(p5, 8, Collective::AllGather, 1024 * kMiB);
  EXPECT_TRUE(pub.published);
  EXPECT_DOUBLE_EQ(pub.gbps, 224.47);
  EXPECT_DOUBLE_EQ(ncclBusGBps(p5, 16, Collective::AllReduce, 8192 * kMiB).gbps, 356.27);
  // The model at 64-1,024 nodes.
  for (int nodes : {64, 1024}) {
    const NcclBusbw m = ncclBusGBps(p5, nodes, Collective::AllGather, 256 * kMiB);
    EXPECT_FALSE(m.published);
    EXPECT_DOUBLE_EQ(
        m.gbps, predictNccl("p5.48xlarge", nodes, 256 * kMiB, e, Collective::AllGather).busGBps);
    EXPECT_EQ(m.nccl, "Ring LL128");
    EXPECT_GT(m.gbps, 0);
  }
  // None: one node, a cluster that is not a profile, AllReduce at 1 rank per node.
  EXPECT_EQ(ncclBusGBps(p5, 1, Collective::AllGather, kMiB).gbps, 0);
  Cluster other = p5;
  other.name = "my-cluster";
  EXPECT_EQ(ncclBusGBps(other, 64, Collective::AllGather, kMiB).gbps, 0);
  Cluster single = p5;
  single.ranksPerNode = 1;
  EXPECT_EQ(ncclBusGBps(single, 64, Collective::AllReduce, kMiB).gbps, 0);
  const NcclBusbw pat = ncclBusGBps(single, 64, Collective::AllGather, kMiB);
  EXPECT_EQ(pat.nccl, "PAT Simple");
  EXPECT_FALSE(pat.published);
}

}  // namespace
}  // namespace sharc::plan

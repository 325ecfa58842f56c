// The simulation check of the cost model: the engine's real schedules
// replayed over a modelled fabric (src/plan/schedule_sim.hpp) against the tuner's analytic
// prediction (algo::plan) with the same parameters. Closed forms first (the replay itself),
// then model against replay on the layouts where the model holds.
//
//   test_schedule_sim --table [--quick]   prints the whole sweep as a markdown table
//     [--layout 8+4] [--algorithm hierarchical] [--collective all_gather] [--min-bytes 16 (MiB)]
//                                         only the rows that match (to rerun part of it)
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <utility>

#include "sharc/error.hpp"
#include "sim_cases.hpp"

namespace sharc::plan {
namespace {

using algo::Algorithm;
using simcheck::compare;
using simcheck::layout;

// The p5-like cluster's parameters with the transport and the posting window the replay
// plays: bytes moved by DMA, the engine's 32 posted sends.
algo::TunerParams p5Params() {
  algo::TunerParams p = tunerParams(simcheck::p5Like());
  p.dmaTransfers = true;
  p.postedSends = static_cast<int>(algo::kMinPostedSends);  // the engine's window's floor
  return p;
}

algo::TunerParams fabricOnly(double alphaUs, double gbps, double stepUs) {
  algo::TunerParams p = algo::TunerParams::defaults();
  p.fabric = {alphaUs, gbps};
  p.stepUs = stepUs;
  p.copyGbps = 1e6;  // copies and reductions too fast to matter
  p.reduceGbps = 1e6;
  p.fabricHalfDuplex = false;
  p.dmaTransfers = true;  // and no thread holds a message up (a CPU transport's rule)
  return p;
}

// Two nodes, one message each way: build, post, the bytes at the link rate, one latency.
TEST(ScheduleSim, OneMessageIsAlphaPlusBytesOverBandwidth) {
  const auto p = fabricOnly(40, 2, 1);
  const size_t bytes = 8 << 20;  // AllGather output: 4 MiB per rank
  const double want = 1 + 1 + (4 << 20) / 2e3 + 40;
  const SimResult r =
      simulate(p, layout({1, 1}), Collective::AllGather, bytes, Algorithm::Ring, 64 << 20);
  EXPECT_NEAR(r.us, want, 1e-6 * want);
  EXPECT_EQ(r.messages, 2u);
  // Rank 0's message to the other node: starts after the build and its post, moves alone.
  const double wire = (4 << 20) / 2e3;
  EXPECT_NEAR(r.fabricFirstUs, 2, 1e-9);
  EXPECT_NEAR(r.fabricBusyUs, wire, 1e-6 * wire);
  EXPECT_NEAR(r.fabricLastUs, 2 + wire, 1e-6 * wire);
}

// Rank 0's fabric times: a ring of 3 single-rank nodes sends 2 steps, each after the last
// step's message arrived (one latency with nothing moving); on one node none.
TEST(ScheduleSim, RankZerosFabricTimesCountItsIdleGaps) {
  const auto p = fabricOnly(40, 2, 1);
  const size_t block = 1 << 20;
  const SimResult r =
      simulate(p, layout({1, 1, 1}), Collective::AllGather, 3 * block, Algorithm::Ring, 64 << 20);
  const double wire = block / 2e3;
  EXPECT_NEAR(r.fabricFirstUs, 2, 1e-9);
  EXPECT_NEAR(r.fabricBusyUs, 2 * wire, 1e-6 * wire);
  // between the steps: the latency, then the post of the next send
  EXPECT_NEAR(r.fabricLastUs - r.fabricFirstUs - r.fabricBusyUs, 40 + 1, 1e-6 * wire);
  const SimResult one =
      simulate(p, layout({2}), Collective::AllGather, 2 * block, Algorithm::Ring, 64 << 20);
  EXPECT_EQ(one.fabricFirstUs, 0);
  EXPECT_EQ(one.fabricBusyUs, 0);
  EXPECT_EQ(one.fabricLastUs, 0);
}

// Half duplex (tcp): the two directions of one connection move together for their first
// kDuplexOverlapBytes, then take turns, so an exchange of x each way between two ranks holds
// the connection for max(x, 2x - 64 KiB); up to 64 KiB each way, both at the link rate.
TEST(ScheduleSim, HalfDuplexConnectionCarriesBothDirections) {
  auto p = fabricOnly(40, 2, 1);
  p.fabricHalfDuplex = true;
  for (const double x : {4.0 * (1 << 20), 128.0 * 1024, 64.0 * 1024, 16.0 * 1024}) {
    const SimResult r = simulate(p, layout({1, 1}), Collective::AllGather,
                                 static_cast<size_t>(2 * x), Algorithm::Ring, 64 << 20);
    const double want = 1 + 1 + std::max(x, 2 * x - algo::kDuplexOverlapBytes) / 2e3 + 40;
    EXPECT_NEAR(r.us, want, 1e-6 * want) << x << " bytes each way";
  }
}

// Four rails: a message under 32 KiB is not striped, so it moves at one rail's rate
// (fabricRailShare of the link); from 32 KiB on it is cut into pieces of at least 16 KiB,
// one per rail (32 KiB: 2 of the 4 rails, 48 KiB: 3), from 64 KiB on all 4. The model agrees.
TEST(ScheduleSim, MessagesUnderTheStripeSizeUseOneRail) {
  auto p = fabricOnly(40, 2, 1);
  p.fabricRails = 4;
  p.fabricRailShare = 0.25;
  for (const auto& [x, rails] : {std::pair{16.0 * 1024, 1}, std::pair{32.0 * 1024, 2},
                                 std::pair{48.0 * 1024, 3}, std::pair{64.0 * 1024, 4}}) {
    const SimResult r = simulate(p, layout({1, 1}), Collective::AllGather,
                                 static_cast<size_t>(2 * x), Algorithm::Ring, 64 << 20);
    const double rate = 2e3 * 0.25 * rails;
    const double want = 1 + 1 + x / rate + 40;
    EXPECT_NEAR(r.us, want, 1e-6 * want) << x << " bytes each way";
    algo::CallShape s;
    s.kind = CollectiveKind::AllGather;
    s.bytesPerRank = static_cast<size_t>(x);
    s.nranks = 2;
    const algo::NodeMap map = layout({1, 1});
    s.nodes = &map;
    EXPECT_NEAR(algo::predictUs(s, Algorithm::Ring, 64 << 20, p), want, 0.02 * want) << x;
  }
}

// The transport's rule: by DMA a message moves while its ranks reduce; on a CPU transport it
// stands still while either rank's thread reduces. A 2-rank ring AllReduce in chunks of c
// (full duplex, no latency or posting cost, reductions at G): each rank sends its two
// chunks of the ReduceScatter in order, reduces the first while the second flies, then
// sends each reduced chunk behind them. By DMA the link never waits: 4c/B. On a CPU
// transport the second chunk and the first reduced one each wait one reduction: 4c/B + 2c/G.
TEST(ScheduleSim, ACpuTransportsMessagesWaitForTheThreadsReductions) {
  algo::TunerParams p = fabricOnly(0, 1, 0);
  p.local = {0, 1};
  p.reduceGbps = 4;  // a reduction takes a quarter of the chunk's wire time
  const double c = 256 << 10;
  const size_t bytes = 4 * static_cast<size_t>(c);  // the vector: two chunks per rank's half
  const SimResult dma = simulate(p, layout({1, 1}), Collective::AllReduce, bytes, Algorithm::Ring,
                                 static_cast<size_t>(c));
  p.dmaTransfers = false;
  const SimResult cpu = simulate(p, layout({1, 1}), Collective::AllReduce, bytes, Algorithm::Ring,
                                 static_cast<size_t>(c));
  const double B = 1e3, G = 4e3;  // bytes per us
  EXPECT_NEAR(dma.us, 4 * c / B, 1e-6 * dma.us) << "cpu " << cpu.us;
  EXPECT_NEAR(cpu.us, 4 * c / B + 2 * c / G, 1e-6 * cpu.us) << "dma " << dma.us;
}

// A whole block longer than the call's chunk (recursive doubling's one message each way):
// the message leaves from the output, after the out-of-place copy of the rank's own block
// (all_gather.cc), x/C + x/B by DMA, where the bytes land in place. On a CPU transport the
// receive copy beyond one chunk follows the last byte at the copy rate: x/C + x/B + (x - c)/C.
// The model (startCopy, step()) gives both.
TEST(ScheduleSim, ACpuTransportCopiesWholeBlocksBeyondAChunk) {
  algo::TunerParams p = fabricOnly(0, 1, 0);
  p.copyGbps = 4;
  const double x = 1 << 20, c = 256 << 10;
  const size_t bytes = 2 << 20, chunk = 256 << 10;
  const SimResult dma = simulate(p, layout({1, 1}), Collective::AllGather, bytes,
                                 Algorithm::RecursiveDoubling, chunk);
  p.dmaTransfers = false;
  const SimResult cpu = simulate(p, layout({1, 1}), Collective::AllGather, bytes,
                                 Algorithm::RecursiveDoubling, chunk);
  const double B = 1e3, C = 4e3;  // bytes per us
  EXPECT_NEAR(dma.us, x / C + x / B, 1e-6 * dma.us) << "cpu " << cpu.us;
  EXPECT_NEAR(cpu.us, x / C + x / B + (x - c) / C, 1e-6 * cpu.us) << "dma " << dma.us;
  const algo::NodeMap map = layout({1, 1});  // the shape points at it
  const algo::CallShape shape = simShape(Collective::AllGather, bytes, map);
  EXPECT_NEAR(algo::predictUs(shape, Algorithm::RecursiveDoubling, chunk, p), cpu.us,
              1e-6 * cpu.us);
  p.dmaTransfers = true;  // the model's start copy on DMA too: the send reads what it copied
  EXPECT_NEAR(algo::predictUs(shape, Algorithm::RecursiveDoubling, chunk, p), dma.us,
              1e-6 * dma.us);
}

// A ring of single-chunk steps on one rank per node: each step waits for the last, so the
// call is the build plus n-1 times (post + bytes + latency).
TEST(ScheduleSim, RingStepsAddUp) {
  const auto p = fabricOnly(20, 4, 2);
  for (int n : {3, 5, 8}) {
    const size_t perRank = 1 << 20;
    const SimResult r = simulate(p, layout(std::vector<int>(n, 1)), Collective::AllGather,
                                 perRank * n, Algorithm::Ring, 4 << 20);
    const double want = 2 + (n - 1) * (2 + perRank / 4e3 + 20);
    EXPECT_NEAR(r.us, want, 1e-6 * want) << n << " ranks";
  }
}

// Messages that leave one NIC at the same time share it: direct AllGather on 3 nodes sends two
// blocks out of every node at once, each at half the rate.
TEST(ScheduleSim, ConcurrentMessagesShareTheNic) {
  const auto p = fabricOnly(10, 1, 0);
  const size_t perRank = 1 << 20;
  const SimResult r = simulate(p, layout({1, 1, 1}), Collective::AllGather, 3 * perRank,
                               Algorithm::Direct, 64 << 20);
  const double want = 2 * perRank / 1e3 + 10;
  EXPECT_NEAR(r.us, want, 1e-6 * want);
}

// Ranks of one node talk over their own links, in parallel with the node's NIC: a 2x2 ring
// step is bounded by the slower of the two.
TEST(ScheduleSim, LocalAndFabricLinksAreSeparate) {
  algo::TunerParams p = fabricOnly(10, 1, 0);
  p.local = {1, 4};
  const size_t perRank = 1 << 20;
  const SimResult r =
      simulate(p, layout({2, 2}), Collective::AllGather, 4 * perRank, Algorithm::Ring, 64 << 20);
  // Three steps: every chain of three hops crosses the node boundary once or twice, and
  // node 0's NIC carries all three of rank 1's blocks.
  const double fabricHop = perRank / 1e3 + 10, localHop = perRank / 4e3 + 1;
  EXPECT_GE(r.us, 2 * fabricHop + localHop - 1e-6);
  EXPECT_LE(r.us, 3 * fabricHop + localHop + 1e-6);
}

// A rank drives only its share of its node's NICs (TunerParams::fabricRankShare): direct
// AllGather on 2 nodes of 2 ranks sends each rank's block to the 2 ranks of the other node at
// once. The node's NICs carry 4 blocks each way at 1 GB/s (4 m / 1e3 us), each rank's own
// 2 blocks at 0.25 GB/s (8 m / 1e3 us): the rank's link is the bottleneck.
TEST(ScheduleSim, EachRankDrivesItsShareOfTheNodesNics) {
  auto p = fabricOnly(10, 1, 0);
  p.local = {1, 1000};
  p.fabricRankShare = 0.25;
  const size_t perRank = 1 << 20;
  const SimResult r =
      simulate(p, layout({2, 2}), Collective::AllGather, 4 * perRank, Algorithm::Direct, 64 << 20);
  const double want = 8.0 * perRank / 1e3 + 10;
  EXPECT_NEAR(r.us, want, 1e-6 * want);
  // At a share of 1 the node's NICs are the bottleneck again.
  p.fabricRankShare = 1;
  const double node = 4.0 * perRank / 1e3 + 10;
  EXPECT_NEAR(
      simulate(p, layout({2, 2}), Collective::AllGather, 4 * perRank, Algorithm::Direct, 64 << 20)
          .us,
      node, 1e-6 * node);
}

TEST(ScheduleSim, RejectsCallsWithNoElementPerRank) {
  const auto p = fabricOnly(1, 1, 1);
  try {
    simulate(p, layout({2, 2}), Collective::AllGather, 8, Algorithm::Ring, 1 << 20);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Result::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("no float32 element"), std::string::npos) << e.what();
  }
}

// The engine once posted receives in the order they became ready, at most 256: a ring
// AllReduce of 100+ chunks per block filled them with its all-gather receives and its
// reduce-scatter never got one (the replay deadlocked at 128 chunks on 4 ranks, 43 on 8, 5 on
// 64; real ranks too). Receives now go oldest first (schedule.cc): these complete, also where
// a block has more chunks than the 1,024 places of today's window (4 x 2,400, 64 x 32).
TEST(ScheduleSim, RingAllReduceOfManyChunksCompletes) {
  const auto p = fabricOnly(10, 1, 1);
  const size_t chunk = 4096;
  for (const auto& [ranks, blocks] :
       {std::pair{4, 128}, {4, 600}, {4, 2400}, {8, 64}, {8, 256}, {64, 8}, {64, 32}}) {
    const std::vector<int> oneEach(static_cast<size_t>(ranks), 1);
    EXPECT_GT(simulate(p, layout(oneEach), Collective::AllReduce,
                       static_cast<size_t>(ranks) * blocks * chunk, Algorithm::Ring, chunk)
                  .us,
              0)
        << ranks << " ranks, " << blocks << " chunks per block";
  }
}

// sharc-plan's hook: a cluster, a node count and an algorithm name, the tuner's chunk.
TEST(ScheduleSim, SimulateUsReplaysTheClusterAsTheTunerPlansIt) {
  const Cluster c = simcheck::p5Like();
  const size_t bytes = 16 << 20;
  const algo::NodeMap map = nodeMap(2, c.ranksPerNode);
  EXPECT_DOUBLE_EQ(
      simulateCall(c, 2, Collective::AllGather, bytes, "ring", 1 << 20).us,
      simulate(tunerParams(c), map, Collective::AllGather, bytes, Algorithm::Ring, 1 << 20).us);
  EXPECT_GT(simulateCall(c, 2, Collective::AllReduce, bytes, "", 0).us, 0);
  EXPECT_THROW(simulateCall(c, 2, Collective::AllGather, bytes, "rings", 0), Error);
}

// ---- the model against the replay ----------------------------------------------------------
// Where the tuner's model holds within 10 % of the replay (same parameters, same algorithm and
// chunk). Where it does not is listed with the reason in docs/planning.md's "Simulation
// check".
struct Holds {
  std::vector<std::vector<int>> layouts;
  std::vector<Algorithm> algorithms;
  std::vector<Collective> collectives;
  std::vector<size_t> sizes;
};

void expectAgreement(const std::string& name, const algo::TunerParams& p, const Holds& h) {
  for (const auto& sizes : h.layouts)
    for (Algorithm a : h.algorithms)
      for (Collective c : h.collectives)
        for (size_t b : h.sizes) {
          const simcheck::Row r = compare(name, p, sizes, c, b, a);
          EXPECT_LE(std::abs(r.error()), 0.10) << simcheck::rowText(r);
        }
}

const std::vector<Collective> kAll = {Collective::AllGather, Collective::ReduceScatter,
                                      Collective::AllReduce};

TEST(ScheduleSim, ModelAgreesOnOneRankPerNode) {
  algo::TunerParams p = algo::TunerParams::defaults();
  p.cores = 1;
  expectAgreement("2-core defaults", p,
                  {{{1, 1, 1, 1}, std::vector<int>(8, 1), std::vector<int>(64, 1)},
                   {Algorithm::Ring},
                   {Collective::AllGather, Collective::AllReduce},
                   {64u << 10, 1u << 20, 16u << 20}});
  // Two ranks, one connection: tcp's turns chunk by chunk, and the start copy of the rank's
  // own block (AllGather) or vector (recursive-doubling AllReduce) before the first send.
  expectAgreement("2-core defaults", p,
                  {{{1, 1}},
                   {Algorithm::Ring, Algorithm::RecursiveDoubling},
                   kAll,
                   {64u << 10, 1u << 20, 16u << 20}});
  expectAgreement("2-core defaults", p,
                  {{{1, 1, 1, 1}, std::vector<int>(8, 1), std::vector<int>(64, 1)},
                   {Algorithm::Ring},
                   {Collective::ReduceScatter},
                   {64u << 10, 1u << 20}});
  expectAgreement("2-core defaults", p,
                  {{{1, 1, 1, 1}, std::vector<int>(16, 1)},
                   {Algorithm::RecursiveDoubling},
                   kAll,
                   {64u << 10, 1u << 20}});
  // Whole blocks beyond one chunk: the receive copy after the last byte, in both.
  expectAgreement("2-core defaults", p,
                  {{std::vector<int>(8, 1)},
                   {Algorithm::Bruck},
                   {Collective::AllGather, Collective::ReduceScatter},
                   {64u << 20}});
  expectAgreement("2-core defaults", p,
                  {{{1, 1, 1, 1}}, {Algorithm::RecursiveDoubling}, kAll, {64u << 20}});
}

TEST(ScheduleSim, ModelAgreesOnOneP5Node) {
  // The pipelined ring to 1 GiB: its reductions overlap the next chunk's transfer.
  expectAgreement(
      "p5-like", p5Params(),
      {{{8}}, {Algorithm::Ring}, kAll, {64u << 10, 1u << 20, 16u << 20, 256u << 20, 1u << 30}});
  // Whole-block messages beyond one chunk land in place (DMA): no receive copy.
  expectAgreement(
      "p5-like", p5Params(),
      {{{8}}, {Algorithm::RecursiveDoubling}, kAll, {64u << 10, 1u << 20, 16u << 20, 64u << 20}});
  expectAgreement("p5-like", p5Params(),
                  {{{8}},
                   {Algorithm::Bruck},
                   {Collective::AllGather, Collective::ReduceScatter},
                   {16u << 20, 64u << 20}});
}

TEST(ScheduleSim, ModelAgreesOnP5NodesWithRecursiveDoubling) {
  expectAgreement("p5-like", p5Params(),
                  {{{8, 8}, {8, 8, 8, 8}, std::vector<int>(32, 8)},
                   {Algorithm::RecursiveDoubling},
                   kAll,
                   {64u << 10, 1u << 20, 16u << 20}});
}

// The ring on nodes of several ranks, even and uneven: the latency of one chain of n-1 edges,
// then the slowest of the chain, the busiest link and the progress thread. Large calls are
// bound by the one rank per node whose edge crosses: its own 4 of the node's 32 NICs.
TEST(ScheduleSim, ModelAgreesOnP5NodesWithTheRing) {
  expectAgreement("p5-like", p5Params(),
                  {{{8, 8}, {8, 8, 8, 8}, {8, 4}, {8, 8, 4}},
                   {Algorithm::Ring},
                   kAll,
                   {64u << 10, 1u << 20, 16u << 20}});
  expectAgreement(
      "p5-like", p5Params(),
      {{{8, 8}, {8, 8, 8, 8}, std::vector<int>(16, 8)}, {Algorithm::Ring}, kAll, {256u << 20}});
  expectAgreement("p5-like", p5Params(),
                  {{std::vector<int>(16, 8)}, {Algorithm::Ring}, kAll, {64u << 10, 16u << 20}});
}

// Bruck on nodes of several ranks: a fabric latency only where the chain crosses nodes, the
// NICs shared among the messages on them.
TEST(ScheduleSim, ModelAgreesOnP5NodesWithBruck) {
  expectAgreement("p5-like", p5Params(),
                  {{{8, 8}, {8, 8, 8, 8}},
                   {Algorithm::Bruck},
                   {Collective::AllGather, Collective::ReduceScatter},
                   {64u << 10, 1u << 20, 16u << 20, 64u << 20}});
  expectAgreement("p5-like", p5Params(),
                  {{std::vector<int>(16, 8)},
                   {Algorithm::Bruck},
                   {Collective::AllGather, Collective::ReduceScatter},
                   {64u << 10, 1u << 20, 16u << 20}});
}

TEST(ScheduleSim, ModelAgreesOnP5NodesWithHierarchical) {
  expectAgreement("p5-like", p5Params(),
                  {{{8, 8}, {8, 8, 8, 8}},
                   {Algorithm::Hierarchical},
                   kAll,
                   {64u << 10, 1u << 20, 16u << 20, 64u << 20, 256u << 20}});
  // ReduceScatter's partials behind the window of local sends, AllReduce's two phases on
  // the rank's NICs back to back.
  expectAgreement("p5-like", p5Params(),
                  {{{8, 8, 8, 8}},
                   {Algorithm::Hierarchical},
                   {Collective::ReduceScatter, Collective::AllReduce},
                   {1u << 30}});
  expectAgreement("p5-like", p5Params(),
                  {{std::vector<int>(16, 8)},
                   {Algorithm::Hierarchical},
                   {Collective::AllGather, Collective::ReduceScatter},
                   {64u << 10, 16u << 20}});
}

// Uneven nodes: a small node's ranks proxy for several ranks of each larger node, and their
// own NICs carry those blocks (hierarchical); a rank at a node boundary crosses step after
// step and its messages share its NICs (Bruck); recursive doubling on 2^k + e ranks folds e
// of them in first and sends them the result last.
TEST(ScheduleSim, ModelAgreesOnUnevenP5Nodes) {
  expectAgreement("p5-like", p5Params(),
                  {{{8, 4}, {8, 8, 4}},
                   {Algorithm::Hierarchical},
                   {Collective::AllGather, Collective::ReduceScatter},
                   {64u << 10, 1u << 20, 16u << 20, 64u << 20, 256u << 20}});
  // The hierarchical AllReduce of one chunk per block on 8+8+4 runs 11-12 % faster than the
  // model at 1 and 4 MiB (docs/planning.md, "Against the replay of the real schedules").
  expectAgreement("p5-like", p5Params(),
                  {{{8, 4}}, {Algorithm::Hierarchical}, {Collective::AllReduce},
                   {64u << 10, 1u << 20, 16u << 20, 64u << 20, 256u << 20}});
  expectAgreement("p5-like", p5Params(),
                  {{{8, 8, 4}}, {Algorithm::Hierarchical}, {Collective::AllReduce},
                   {64u << 10, 16u << 20, 64u << 20, 256u << 20}});
  expectAgreement("p5-like", p5Params(),
                  {{{8, 4}, {8, 8, 4}},
                   {Algorithm::Bruck},
                   {Collective::AllGather, Collective::ReduceScatter},
                   {64u << 10, 1u << 20, 16u << 20, 64u << 20}});
  expectAgreement("p5-like", p5Params(),
                  {{{8, 4}, {8, 8, 4}},
                   {Algorithm::RecursiveDoubling},
                   {Collective::AllReduce},
                   {64u << 10, 1u << 20, 16u << 20}});
  // The uneven ring runs chunk-major at its fast ranks while the engine posts receives
  // step-major: with 256 places rank 8's were all held by the all-gather's first step and
  // its second step's messages waited up to 26 ms (-19 %); 1,024 places (the window on a
  // provider that holds 2,048) cover it.
  expectAgreement("p5-like", p5Params(),
                  {{{8, 4}}, {Algorithm::Ring}, {Collective::AllReduce}, {1u << 30}});
}

}  // namespace

// ---- the sweep --------------------------------------------------------------------------

namespace simcheck {

struct ClusterCase {
  std::string name;
  algo::TunerParams params;
  std::vector<std::vector<int>> layouts;
};

inline std::vector<ClusterCase> clusters(bool quick) {
  algo::TunerParams defaults = algo::TunerParams::defaults();
  defaults.cores = 1;
  std::vector<ClusterCase> out;
  out.push_back({"p5-like", p5Params(),
                 quick ? std::vector<std::vector<int>>{{8, 8}, {8, 8, 8, 8}, {8, 8, 4}}
                       : std::vector<std::vector<int>>{{8},
                                                       {8, 8},
                                                       {8, 8, 8, 8},
                                                       std::vector<int>(16, 8),
                                                       std::vector<int>(32, 8),
                                                       {8, 4},
                                                       {8, 8, 4}}});
  out.push_back({"2-core defaults", defaults,
                 quick ? std::vector<std::vector<int>>{{1, 1}, {1, 1, 1, 1}}
                       : std::vector<std::vector<int>>{{1, 1},
                                                       {1, 1, 1, 1},
                                                       std::vector<int>(8, 1),
                                                       std::vector<int>(16, 1),
                                                       std::vector<int>(64, 1)}});
  return out;
}

/// Rows of the sweep to print (empty: all).
struct Filter {
  std::string layout, algorithm, collective;
  size_t minBytes = 0;
};

inline int table(bool quick, const Filter& f) {
  std::cout << tableHeader() << "\n";
  const std::vector<size_t> sizes =
      quick ? std::vector<size_t>{64u << 10, 1u << 20, 16u << 20}
            : std::vector<size_t>{64u << 10, 256u << 10, 1u << 20,   4u << 20,
                                  16u << 20, 64u << 20,  256u << 20, 1u << 30};
  for (const auto& cl : clusters(quick))
    for (const auto& sizes_ : cl.layouts)
      for (Collective c : {Collective::AllGather, Collective::ReduceScatter, Collective::AllReduce})
        for (size_t b : sizes) {
          int n = 0;
          for (int s : sizes_) n += s;
          if (c != Collective::AllReduce && b / n < 4) continue;
          if ((!f.layout.empty() && f.layout != layoutName(sizes_)) ||
              (!f.collective.empty() && f.collective != collectiveName(c)) || b < f.minBytes)
            continue;
          for (Algorithm a : algorithmsFor(c, b, sizes_)) {
            if (!f.algorithm.empty() && f.algorithm != algo::algorithmName(a)) continue;
            // Log-step algorithms send whole vectors: beyond 64 MiB they only cost time here.
            if ((a == Algorithm::RecursiveDoubling || a == Algorithm::Bruck) && b > (64u << 20))
              continue;
            const auto t0 = std::chrono::steady_clock::now();
            Row r;
            try {
              r = compare(cl.name, cl.params, sizes_, c, b, a);
            } catch (const Error& e) {
              std::cout << "| " << cl.name << " | " << layoutName(sizes_) << " | "
                        << collectiveName(c) << " | " << algo::algorithmName(a) << " | "
                        << sizeName(b) << " | | | | " << e.what() << " |\n";
              continue;
            }
            const double s =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            std::cout << rowText(r) << (s > 1 ? "  (" + std::to_string(s) + " s)" : "") << "\n"
                      << std::flush;
          }
        }
  return 0;
}

}  // namespace simcheck
}  // namespace sharc::plan

int main(int argc, char** argv) {
  bool tableMode = false, quick = false;
  sharc::plan::simcheck::Filter f;
  for (int i = 1; i < argc; ++i) {
    const bool more = i + 1 < argc;
    if (std::strcmp(argv[i], "--table") == 0) tableMode = true;
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    if (std::strcmp(argv[i], "--layout") == 0 && more) f.layout = argv[++i];
    if (std::strcmp(argv[i], "--algorithm") == 0 && more) f.algorithm = argv[++i];
    if (std::strcmp(argv[i], "--collective") == 0 && more) f.collective = argv[++i];
    if (std::strcmp(argv[i], "--min-bytes") == 0 && more)
      f.minBytes = std::strtoull(argv[++i], nullptr, 10) << 20;  // MiB
  }
  if (tableMode) return sharc::plan::simcheck::table(quick, f);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

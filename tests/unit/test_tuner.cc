// The tuner: choices for representative shapes, overrides, SHARC_TUNER_FILE parsing and the
// shape of its predictions.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sharc/error.hpp>
#include <string>
#include <vector>

#include "algorithms/cost_model.hpp"
#include "algorithms/patterns.hpp"
#include "algorithms/tuner.hpp"
#include "core/collective.hpp"
#include "core/config.hpp"

namespace sharc::algo {
namespace {

// Fixed parameters (cores pinned so the oversubscription factor does not depend on the
// machine running the test).
TunerParams params(int cores = 2) {
  TunerParams p = TunerParams::defaults();
  p.cores = cores;
  return p;
}

CallShape shape(CollectiveKind kind, size_t total, int n, Locality loc,
                const NodeMap* nodes = nullptr) {
  CallShape s;
  s.kind = kind;
  s.bytesPerRank = kind == CollectiveKind::AllReduce ? total : total / static_cast<size_t>(n);
  s.nranks = n;
  s.locality = loc;
  s.nodes = nodes;
  return s;
}

NodeMap layout(const std::vector<int>& perNode) {
  std::vector<uint64_t> keys;
  for (size_t i = 0; i < perNode.size(); ++i)
    for (int j = 0; j < perNode[i]; ++j) keys.push_back(i);
  return NodeMap::fromKeys(keys);
}

Algorithm pick(const CallShape& s, const TunerParams& p = params()) {
  return plan(s, p).algorithm;
}

constexpr size_t K = 1024, M = 1024 * 1024;
const Locality kCma = Locality::OneHostSingleCopy, kHost = Locality::OneHost,
               kNet = Locality::Network;

TEST(Tuner, OneHostSingleCopyMatchesMeasuredWinners) {
  // The winners measured on the 2-core host (docs/tuner.md, "Why the constants are what they
  // are"): log-step for tiny calls, DirectWrite for AllGather from a few tens of KiB,
  // DirectRead for ReduceScatter from a few hundred KiB.
  EXPECT_EQ(pick(shape(CollectiveKind::AllGather, 1 * K, 2, kCma)), Algorithm::RecursiveDoubling);
  // Four ranks on two cores: Direct's single round of messages may beat recursive doubling.
  EXPECT_NE(pick(shape(CollectiveKind::AllGather, 1 * K, 4, kCma)), Algorithm::DirectWrite);
  EXPECT_NE(pick(shape(CollectiveKind::AllGather, 1 * K, 4, kCma)), Algorithm::Ring);
  for (size_t total : {256 * K, 1 * M, 16 * M, 64 * M}) {
    EXPECT_EQ(pick(shape(CollectiveKind::AllGather, total, 2, kCma)), Algorithm::DirectWrite)
        << total;
    EXPECT_EQ(pick(shape(CollectiveKind::AllGather, total, 4, kCma)), Algorithm::DirectWrite)
        << total;
  }
  EXPECT_EQ(pick(shape(CollectiveKind::ReduceScatter, 1 * K, 4, kCma)),
            Algorithm::RecursiveDoubling);
  for (size_t total : {1 * M, 16 * M, 64 * M}) {
    EXPECT_EQ(pick(shape(CollectiveKind::ReduceScatter, total, 2, kCma)), Algorithm::DirectRead);
    EXPECT_EQ(pick(shape(CollectiveKind::ReduceScatter, total, 4, kCma)), Algorithm::DirectRead);
  }
  EXPECT_EQ(pick(shape(CollectiveKind::AllReduce, 1 * K, 4, kCma)), Algorithm::RecursiveDoubling);
  EXPECT_EQ(pick(shape(CollectiveKind::AllReduce, 16 * M, 4, kCma)), Algorithm::DirectRead);
  // Without single copy: Direct AllGather for large calls, never the single-copy forms.
  EXPECT_EQ(pick(shape(CollectiveKind::AllGather, 16 * M, 4, kHost)), Algorithm::Direct);
  EXPECT_EQ(pick(shape(CollectiveKind::ReduceScatter, 16 * M, 4, kHost)), Algorithm::Ring);
}

TEST(Tuner, NetworkLogStepSmallRingLarge) {
  const NodeMap one = layout({1, 1, 1, 1});
  for (int n : {4, 8}) {
    const NodeMap m = layout(std::vector<int>(static_cast<size_t>(n), 1));
    EXPECT_EQ(pick(shape(CollectiveKind::AllGather, 16 * K, n, kNet, &m)),
              Algorithm::RecursiveDoubling);
    EXPECT_EQ(pick(shape(CollectiveKind::AllGather, 16 * M, n, kNet, &m)), Algorithm::Ring);
    EXPECT_EQ(pick(shape(CollectiveKind::ReduceScatter, 16 * K, n, kNet, &m)),
              Algorithm::RecursiveDoubling);
    EXPECT_EQ(pick(shape(CollectiveKind::ReduceScatter, 16 * M, n, kNet, &m)), Algorithm::Ring);
    EXPECT_EQ(pick(shape(CollectiveKind::AllReduce, 4 * K, n, kNet, &m)),
              Algorithm::RecursiveDoubling);
    EXPECT_EQ(pick(shape(CollectiveKind::AllReduce, 16 * M, n, kNet, &m)), Algorithm::Ring);
  }
  const NodeMap seven = layout({1, 1, 1, 1, 1, 1, 1});
  EXPECT_EQ(pick(shape(CollectiveKind::AllGather, 8 * K, 7, kNet, &seven)), Algorithm::Bruck);
  EXPECT_EQ(pick(shape(CollectiveKind::AllGather, 64 * M, 7, kNet, &seven)), Algorithm::Ring);
  (void)one;
}

TEST(Tuner, HierarchicalOnSeveralNodesForLargeCalls) {
  const NodeMap twoByTwo = layout({2, 2});
  TunerParams slow = params(4);
  slow.fabric.gbps = 0.25;  // 2 Gbit/s links, local far faster
  for (CollectiveKind k : {CollectiveKind::AllGather, CollectiveKind::ReduceScatter}) {
    EXPECT_EQ(pick(shape(k, 64 * M, 4, kNet, &twoByTwo), slow), Algorithm::Hierarchical);
    EXPECT_EQ(pick(shape(k, 64 * M, 4, kNet, &twoByTwo)), Algorithm::Hierarchical);
  }
  // One rank per node, or a single node: nothing to gain, not a candidate.
  const NodeMap spread = layout({1, 1, 1, 1});
  EXPECT_NE(pick(shape(CollectiveKind::AllGather, 64 * M, 4, kNet, &spread), slow),
            Algorithm::Hierarchical);
  EXPECT_NE(pick(shape(CollectiveKind::AllGather, 64 * M, 4, kCma, &twoByTwo), slow),
            Algorithm::Hierarchical);
  // The flat ring loads each node's link with (n-1)/n of the total, hierarchical (N-1)/N.
  const CallShape s = shape(CollectiveKind::AllGather, 64 * M, 4, kNet, &twoByTwo);
  EXPECT_GT(predictUs(s, Algorithm::Ring, M, slow) / predictUs(s, Algorithm::Hierarchical, M, slow),
            1.3);
}

TEST(Tuner, InterleavedRanksLoadTheFabricMore) {
  const NodeMap byNode = NodeMap::fromKeys({0, 0, 1, 1});
  const NodeMap interleaved = NodeMap::fromKeys({0, 1, 0, 1});
  const TunerParams p = params(4);
  const double a =
      predictUs(shape(CollectiveKind::AllGather, 64 * M, 4, kNet, &byNode), Algorithm::Ring, M, p);
  const double b = predictUs(shape(CollectiveKind::AllGather, 64 * M, 4, kNet, &interleaved),
                             Algorithm::Ring, M, p);
  EXPECT_GT(b, a * 1.5);
}

// A rank stripes only over its own NICs (fabricRankShare: a p5 rank's 4 of the node's 32): a
// ring crosses each node on one rank, so its wire is that rank's link, while the two-level
// algorithm sends from all 8 ranks at once and still fills the node's NICs.
TEST(Tuner, RankDrivesOnlyItsShareOfTheFabric) {
  const NodeMap nodes = layout({8, 8, 8, 8});
  TunerParams p;
  p.local = {1.9, 450};
  p.fabric = {20, 400};
  p.copyGbps = 1675;
  p.reduceGbps = 1117;
  p.stepUs = 0.5;
  p.cores = 8;
  p.dmaTransfers = true;
  p.postedSends = 32;
  TunerParams capped = p;
  capped.fabricRankShare = 4.0 / 32;
  const size_t total = 1024 * M;
  const CallShape s = shape(CollectiveKind::AllGather, total, 32, kNet, &nodes);
  const double ring = predictUs(s, Algorithm::Ring, M, p);
  const double ringCapped = predictUs(s, Algorithm::Ring, M, capped);
  // (n-1)/n of the data through one rank's 50 GB/s at least.
  EXPECT_GE(ringCapped, 31.0 / 32 * static_cast<double>(total) / (50 * 1e3));
  EXPECT_GT(ringCapped, 4 * ring);
  EXPECT_DOUBLE_EQ(predictUs(s, Algorithm::Hierarchical, M, capped),
                   predictUs(s, Algorithm::Hierarchical, M, p));
  EXPECT_EQ(plan(s, capped, false).algorithm, Algorithm::Hierarchical);
}

// The tuner ranks the Bruck two-level form for ReduceScatter from 4 equal nodes and for
// AllGather from 8, and only where transfers are DMA.
TEST(Tuner, RanksHierarchicalBruckFromItsNodeCounts) {
  TunerParams p = params(8);
  p.dmaTransfers = true;
  auto ranked = [&](CollectiveKind k, const NodeMap& nodes, const TunerParams& q) {
    const std::vector<Algorithm> c =
        rankedCandidates(shape(k, 256 * M, nodes.size(), kNet, &nodes), q);
    return std::find(c.begin(), c.end(), Algorithm::HierarchicalBruck) != c.end();
  };
  const NodeMap three = layout({8, 8, 8});
  const NodeMap four = layout({8, 8, 8, 8});
  const NodeMap eight = layout({8, 8, 8, 8, 8, 8, 8, 8});
  EXPECT_FALSE(ranked(CollectiveKind::ReduceScatter, three, p));
  EXPECT_TRUE(ranked(CollectiveKind::ReduceScatter, four, p));
  EXPECT_FALSE(ranked(CollectiveKind::AllGather, four, p));
  EXPECT_TRUE(ranked(CollectiveKind::AllGather, eight, p));
  TunerParams cpu = p;
  cpu.dmaTransfers = false;
  EXPECT_FALSE(ranked(CollectiveKind::ReduceScatter, four, cpu));
}

// A message under 32 KiB is not striped (transport/stripe_rule.hpp): on two rails it moves
// at the first rail's rate; from 32 KiB on it is cut into pieces of at least 16 KiB. Large
// calls, whose messages are all striped, cost the same as on one link of both rails' rate.
TEST(Tuner, MessagesUnderTheStripeSizeUseTheFirstRailOnly) {
  EXPECT_EQ(transport::stripePieces(32 * K - 1, 2), 1u);
  EXPECT_EQ(transport::stripePieces(32 * K, 2), 2u);
  EXPECT_EQ(transport::stripePieces(32 * K, 4), 2u);
  EXPECT_EQ(transport::stripePieces(48 * K, 4), 3u);
  EXPECT_EQ(transport::stripePieces(64 * K, 4), 4u);
  EXPECT_EQ(transport::stripePieces(M, 4), 4u);
  EXPECT_EQ(transport::stripePieces(M, 1), 1u);
  EXPECT_EQ(transport::stripePieces(0, 4), 1u);
  const NodeMap twoByTwo = layout({2, 2});
  TunerParams twoRails = params();
  twoRails.fabric = {40, 0.05};  // 400 Mbit/s summed: the fabric dominates
  twoRails.fabricHalfDuplex = false;
  TunerParams firstRail = twoRails;
  firstRail.fabricRails = 2;
  firstRail.fabricRailShare = 0.5;
  const Algorithm algorithms[] = {Algorithm::Ring, Algorithm::Hierarchical,
                                  Algorithm::RecursiveDoubling, Algorithm::Bruck};
  for (CollectiveKind k :
       {CollectiveKind::AllGather, CollectiveKind::ReduceScatter, CollectiveKind::AllReduce})
    for (Algorithm a : algorithms) {
      const CallShape small = shape(k, 16 * K, 4, kNet, &twoByTwo);  // every message < 32 KiB
      EXPECT_GT(predictUs(small, a, M, firstRail), 1.3 * predictUs(small, a, M, twoRails))
          << static_cast<int>(k) << " " << static_cast<int>(a);
      const CallShape large = shape(k, 64 * M, 4, kNet, &twoByTwo);
      EXPECT_DOUBLE_EQ(predictUs(large, a, M, firstRail), predictUs(large, a, M, twoRails))
          << static_cast<int>(k) << " " << static_cast<int>(a);
    }
  // A message of 32 KiB is striped: recursive doubling's AllReduce of 32 KiB costs the same.
  const CallShape ar = shape(CollectiveKind::AllReduce, 32 * K, 4, kNet, &twoByTwo);
  EXPECT_DOUBLE_EQ(predictUs(ar, Algorithm::RecursiveDoubling, M, firstRail),
                   predictUs(ar, Algorithm::RecursiveDoubling, M, twoRails));
  // Hierarchical AllGather of 64 KiB moves a node's 32 KiB across in 16 KiB messages: twice
  // as long.
  const CallShape ag = shape(CollectiveKind::AllGather, 64 * K, 4, kNet, &twoByTwo);
  const double wire = 32.0 * K / (0.05 * 1e3);  // us at the summed rate
  EXPECT_NEAR(predictUs(ag, Algorithm::Hierarchical, M, firstRail) -
                  predictUs(ag, Algorithm::Hierarchical, M, twoRails),
              wire, 0.05 * wire);
}

// Hierarchical AllReduce over tcp (half duplex per connection): the first 32 KiB of a block
// leave in posting order, so for that share the ReduceScatter's partials and the AllGather's
// blocks share the links and the busiest node link carries its blocks of both phases each
// way: 3+1's 4 blocks, not the phases' 3 + 3. Even nodes carry the sum either way.
TEST(Tuner, HierarchicalAllReducePhasesShareTcpLinksForSmallBlocks) {
  const NodeMap threeOne = layout({3, 1}), twoOneOne = layout({2, 1, 1}), twoTwo = layout({2, 2});
  EXPECT_EQ(model::hierBothPhasesBlocks(threeOne), 4);
  EXPECT_EQ(model::hierBothPhasesBlocks(twoOneOne), 6);
  EXPECT_EQ(model::hierBothPhasesBlocks(twoTwo), 4);
  EXPECT_EQ(model::hierBothPhasesBlocks(layout({8, 8, 4})), 28);  // 8 x 2 + 20 - 8
  TunerParams tcp = params();
  tcp.fabric = {40, 0.0234};  // 200 Mbit/s: the fabric dominates
  tcp.fabricHalfDuplex = true;
  TunerParams fullDuplex = tcp;
  fullDuplex.fabricHalfDuplex = false;
  const auto ar = [](size_t total, const NodeMap& m) {
    return shape(CollectiveKind::AllReduce, total, 4, kNet, &m);
  };
  // 3+1, 64 KiB: 16 KiB blocks, 2 of the 6 fewer.
  const double block = 16.0 * K / (0.0234 * 1e3);
  EXPECT_NEAR(predictUs(ar(64 * K, threeOne), Algorithm::Hierarchical, M, fullDuplex) -
                  predictUs(ar(64 * K, threeOne), Algorithm::Hierarchical, M, tcp),
              2 * block, 0.05 * block);
  // 2+1+1: 6 blocks of 16 KiB against 8.
  EXPECT_NEAR(predictUs(ar(64 * K, twoOneOne), Algorithm::Hierarchical, M, fullDuplex) -
                  predictUs(ar(64 * K, twoOneOne), Algorithm::Hierarchical, M, tcp),
              2 * block, 0.05 * block);
  EXPECT_DOUBLE_EQ(predictUs(ar(64 * K, twoTwo), Algorithm::Hierarchical, M, tcp),
                   predictUs(ar(64 * K, twoTwo), Algorithm::Hierarchical, M, fullDuplex));
  // 64 KiB blocks: half of each overlaps, one block of the two.
  EXPECT_NEAR(predictUs(ar(256 * K, threeOne), Algorithm::Hierarchical, M, fullDuplex) -
                  predictUs(ar(256 * K, threeOne), Algorithm::Hierarchical, M, tcp),
              4 * block, 0.05 * block);
}

TEST(Tuner, OverrideWinsAndMaxMessageFallsBackToRing) {
  CallShape s = shape(CollectiveKind::AllGather, 64 * M, 4, kCma);
  s.override = AlgorithmOverride::parse("ring");
  EXPECT_EQ(pick(s), Algorithm::Ring);
  s.override = AlgorithmOverride::parse("allgather:bruck");
  EXPECT_EQ(pick(s), Algorithm::Bruck);
  EXPECT_NE(plan(s, params()).breakdown.find("SHARC_ALGO"), std::string::npos);
  s.maxMessageBytes = 8 * M;  // Bruck would send the whole 64 MiB in messages up to 48 MiB
  EXPECT_EQ(pick(s), Algorithm::Ring);
  CallShape t = shape(CollectiveKind::AllGather, 64 * K, 4, kNet);
  t.maxMessageBytes = 16 * K;
  EXPECT_EQ(pick(t), Algorithm::Ring);
  EXPECT_LE(plan(t, params()).chunkBytes, 16 * K);
}

TEST(Tuner, ChunkFromTheModelUnlessSet) {
  const NodeMap m = layout({1, 1, 1, 1});
  CallShape s = shape(CollectiveKind::AllGather, 64 * M, 4, kNet, &m);
  const Plan p = plan(s, params());
  EXPECT_GE(p.chunkBytes, 256 * K);
  EXPECT_LE(p.chunkBytes, 4 * M);
  s.chunkBytes = 64 * K;
  s.chunkBytesSet = true;
  EXPECT_EQ(plan(s, params()).chunkBytes, 64 * K);
  EXPECT_FALSE(plan(s, params()).breakdown.empty());
}

TEST(Tuner, PredictionsGrowWithSize) {
  const NodeMap m = layout({2, 2});
  for (Locality loc : {kCma, kHost, kNet}) {
    for (CollectiveKind k :
         {CollectiveKind::AllGather, CollectiveKind::ReduceScatter, CollectiveKind::AllReduce}) {
      double last = 0;
      for (size_t total = 1 * K; total <= 256 * M; total *= 2) {
        const CallShape s = shape(k, total, 4, loc, &m);
        for (Algorithm a : candidates(s)) {
          const double t = predictUs(s, a, M, params());
          EXPECT_GT(t, 0);
          const double smaller = predictUs(shape(k, total / 2, 4, loc, &m), a, M, params());
          EXPECT_GE(t, smaller) << algorithmName(a) << " " << total;
        }
        const double best = plan(s, params()).predictedUs;
        EXPECT_GE(best, last);
        last = best;
      }
    }
  }
}

// A forced Hierarchical runs as the ring where two levels do not apply (one node, or one rank
// per node), and the plan says so.
TEST(Tuner, ForcedHierarchicalIsTheRingWithoutTwoLevels) {
  const NodeMap twoByTwo = NodeMap::fromKeys({0, 0, 1, 1}), spread = NodeMap::fromKeys({0, 1, 2});
  CallShape s = shape(CollectiveKind::AllGather, 64 * M, 4, kNet, &twoByTwo);
  s.override = AlgorithmOverride::parse("hierarchical");
  EXPECT_EQ(plan(s, TunerParams::defaults()).algorithm, Algorithm::Hierarchical);
  s = shape(CollectiveKind::AllGather, 64 * M, 3, kNet, &spread);
  s.override = AlgorithmOverride::parse("hierarchical");
  EXPECT_EQ(plan(s, TunerParams::defaults()).algorithm, Algorithm::Ring);
  s = shape(CollectiveKind::AllGather, 64 * M, 4, kCma);
  s.override = AlgorithmOverride::parse("hierarchical");
  EXPECT_EQ(plan(s, TunerParams::defaults()).algorithm, Algorithm::Ring);
}

// Every collective on every group size up to 9 (a binomial tree's partner r^d may not exist
// when n is not a power of two): a finite, positive prediction.
TEST(Tuner, EveryCollectiveAndGroupSizeHasAFinitePrediction) {
  for (CollectiveKind kind :
       {CollectiveKind::AllGather, CollectiveKind::ReduceScatter, CollectiveKind::AllReduce,
        CollectiveKind::Broadcast, CollectiveKind::Barrier})
    for (int n = 1; n <= 9; ++n)
      for (Locality loc : {kCma, kHost, kNet}) {
        const Plan p = plan(shape(kind, 4 * K, n, loc), TunerParams::defaults());
        EXPECT_TRUE(std::isfinite(p.predictedUs) && p.predictedUs > 0)
            << core::collectiveName(kind) << " n=" << n;
        // Forced algorithms are predicted too, whatever the group size.
        for (const char* forced : {"rd", "bruck", "ring", "direct", "hierarchical"}) {
          CallShape s = shape(kind, 4 * K, n, loc);
          s.override = AlgorithmOverride::parse(forced);
          EXPECT_TRUE(std::isfinite(plan(s, TunerParams::defaults()).predictedUs))
              << forced << " n=" << n;
        }
      }
}

// Expects parseTunerText to throw InvalidArgument naming the variable and every part.
void expectBad(const std::string& text, const std::vector<std::string>& parts) {
  try {
    core::parseTunerText(text, "/tmp/t.txt");
    ADD_FAILURE() << "accepted: " << text;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Result::InvalidArgument);
    const std::string what = e.what();
    EXPECT_NE(what.find("SHARC_TUNER_FILE"), std::string::npos) << what;
    for (const auto& part : parts) EXPECT_NE(what.find(part), std::string::npos) << what;
  }
}

TEST(TunerFile, ParsesKeysCommentsAndBlanks) {
  const auto v = core::parseTunerText(
      "# measured\n\nlocal.alpha_us = 2.5\n  fabric.gbps=12.5  # 100 Gbit/s\ncores = 0\n", "f");
  EXPECT_DOUBLE_EQ(v.at("local.alpha_us"), 2.5);
  EXPECT_DOUBLE_EQ(v.at("fabric.gbps"), 12.5);
  core::Config c;
  c.tuner = v;
  const TunerParams p = TunerParams::fromConfig(c);
  EXPECT_DOUBLE_EQ(p.local.alphaUs, 2.5);
  EXPECT_DOUBLE_EQ(p.fabric.gbps, 12.5);
  EXPECT_DOUBLE_EQ(p.copyGbps, TunerParams::defaults().copyGbps);
  // toText round-trips.
  core::Config d;
  d.tuner = core::parseTunerText(p.toText(), "text");
  EXPECT_NEAR(TunerParams::fromConfig(d).fabric.gbps, 12.5, 1e-9);
}

// Without calibration the fabric is what the NICs say: line rate x rails x TCP's payload
// share of a link busy both ways (1448 of 1514 bytes a frame, a 66-byte ACK per two),
// capped at the built-in host limit; the file wins.
TEST(TunerFile, FabricFromTheNicRateUnlessTheFileSetsIt) {
  const double builtIn = TunerParams::defaults().fabric.gbps;
  core::Config c;
  c.tcpIface = "eth0";
  c.nicMbits = 200;
  const double share = 2 * 1448.0 / (2 * 1514 + 66);
  EXPECT_NEAR(TunerParams::fromConfig(c).fabric.gbps, 200e6 / 8 * share / 1e9, 1e-9);
  EXPECT_NE(TunerParams::fromConfig(c).fabricSource.find("SHARC_NIC_MBITS"), std::string::npos);
  EXPECT_DOUBLE_EQ(TunerParams::fromConfig(c).fabricRailShare, 1.0);
  EXPECT_EQ(TunerParams::fromConfig(c).fabricRails, 1);
  c.nics = {"eth0", "eth1"};  // SHARC_NICS: two rails
  EXPECT_NEAR(TunerParams::fromConfig(c).fabric.gbps, 400e6 / 8 * share / 1e9, 1e-9);
  // a message under 32 KiB uses the first rail alone: half the link
  EXPECT_EQ(TunerParams::fromConfig(c).fabricRails, 2);
  EXPECT_DOUBLE_EQ(TunerParams::fromConfig(c).fabricRailShare, 0.5);
  c.nicMbits = 1e6;  // 1 Tbit/s of tcp: the progress thread's copies limit it
  EXPECT_DOUBLE_EQ(TunerParams::fromConfig(c).fabric.gbps, builtIn);
  EXPECT_DOUBLE_EQ(TunerParams::fromConfig(c).fabricRailShare, 1.0);  // one rail as fast
  c.nicMbits = 200;
  c.tuner = {{"fabric.gbps", 3.0}};
  EXPECT_DOUBLE_EQ(TunerParams::fromConfig(c).fabric.gbps, 3.0);
  EXPECT_EQ(TunerParams::fromConfig(c).fabricSource, "SHARC_TUNER_FILE");
  core::Config none;  // no NIC named: the built-in link
  EXPECT_DOUBLE_EQ(TunerParams::fromConfig(none).fabric.gbps, builtIn);
}

TEST(TunerFile, BadInputNamesVariableLineAndKey) {
  expectBad("local.gbps = 3\nlocal.speed = 4\n", {"line 2", "local.speed", "/tmp/t.txt"});
  expectBad("local.gbps 3\n", {"line 1", "key = value"});
  expectBad("\n\nfabric.gbps = fast\n", {"line 3", "fabric.gbps", "'fast'"});
  expectBad("fabric.gbps = 0\n", {"line 1", "fabric.gbps"});
  expectBad("step_us = -1\n", {"line 1", "step_us"});
  expectBad("cores = 1.5\n", {"line 1", "cores"});
  expectBad("reduce.gbps = 4x\n", {"line 1", "reduce.gbps"});
}

TEST(TunerFile, ConfigReadsTheFile) {
  char path[] = "/tmp/sharc_tuner_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string text = "copy.gbps = 3\nbogus = 1\n";
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  ::setenv("SHARC_TUNER_FILE", path, 1);
  try {
    core::Config::load();
    ADD_FAILURE() << "bad file accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("SHARC_TUNER_FILE"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("bogus"), std::string::npos);
  }
  ::setenv("SHARC_TUNER_FILE", "/nonexistent/sharc.tuner", 1);
  EXPECT_THROW(core::Config::load(), Error);
  ::unsetenv("SHARC_TUNER_FILE");
  std::remove(path);
}

// tcp's turns (a pair exchanging over one connection on a half-duplex fabric) are charged per
// piece the builders cut, the ring's exchange and hierarchical's two-way pair alike: a block
// of 384 KiB in 256 KiB chunks is two pieces of 192 KiB, each overlapping its first 64 KiB,
// 2 x (2 x 192 - 64) = 640 KiB (whole 256 KiB chunks would charge 768 KiB).
TEST(TunerModel, TcpTurnsAreChargedPerPieceTheBuildersCut) {
  TunerParams p = params();
  p.fabricHalfDuplex = true;
  const NodeMap map = layout({2, 1});
  const size_t chunk = 256u << 10;
  const model::Model m(shape(CollectiveKind::ReduceScatter, 3u << 20, 3, Locality::Network, &map),
                       p, chunk);
  EXPECT_DOUBLE_EQ(m.chunkedDuplexLoad(384.0 * 1024), 640.0 * 1024);
  for (size_t bytes : {size_t{32} << 10, size_t{64} << 10, size_t{200} << 10, size_t{384} << 10,
                       size_t{1000} << 10, size_t{4} << 20, size_t{5000} << 10}) {
    const size_t elems = bytes / 4;  // float32, as the builders count
    const size_t pieces = chunksFor(bytes, chunk, 1);
    double expected = 0;
    for (size_t i = 0; i < pieces; ++i)
      expected += m.duplexLoad(
          4.0 * static_cast<double>(
                    evenBlock(elems, static_cast<int>(pieces), static_cast<int>(i)).count));
    // equal pieces against the builders' (which differ by at most one element)
    EXPECT_NEAR(m.chunkedDuplexLoad(static_cast<double>(bytes)), expected, 8.0 * pieces) << bytes;
  }
  p.fabricHalfDuplex = false;  // full duplex: no turns
  const model::Model full(
      shape(CollectiveKind::ReduceScatter, 3u << 20, 3, Locality::Network, &map), p, chunk);
  EXPECT_DOUBLE_EQ(full.chunkedDuplexLoad(384.0 * 1024), 384.0 * 1024);
}

}  // namespace
}  // namespace sharc::algo

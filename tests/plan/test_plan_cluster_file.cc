// loadClusterFile and thisHostCluster (include/sharc/plan_fsdp.hpp): every key, a sharc-perf
// --calibrate file, and the errors naming file, line, key and what was expected.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "algorithms/tuner.hpp"
#include "cluster_model.hpp"
#include "core/config.hpp"
#include "sharc/error.hpp"
#include "sharc/plan_fsdp.hpp"

namespace sharc::plan {
namespace {

class ClusterFile : public ::testing::Test {
 protected:
  std::string write(const std::string& text) {
    char tmpl[] = "/tmp/sharc-plan-test-XXXXXX";
    const int fd = mkstemp(tmpl);
    EXPECT_GE(fd, 0);
    close(fd);
    std::ofstream(tmpl) << text;
    paths_.push_back(tmpl);
    return tmpl;
  }
  void TearDown() override {
    for (const auto& p : paths_) unlink(p.c_str());
  }
  // The message of loadClusterFile(path)'s InvalidArgument error ("" if none).
  static std::string error(const std::string& path) {
    try {
      loadClusterFile(path);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Result::InvalidArgument);
      return e.what();
    }
    ADD_FAILURE() << "no error for " << path;
    return "";
  }
  std::vector<std::string> paths_;
};

TEST_F(ClusterFile, EveryClusterKey) {
  const Cluster c = loadClusterFile(
      write("# a p5-like node\n"
            "name = my-p5\n"
            "source = measured by hand, 2026\n"
            "ranks_per_node = 8\n"
            "memory_gib = 80   # H100\n"
            "local_alpha_us = 2.5\nlocal_gbps = 350\n"
            "fabric_alpha_us = 6\n  fabric_gbps = 400\nrails = 32\n\n"
            "copy_gbps = 1600\nreduce_gbps = 1100\nstep_us = 0.75\nefficiency = 0.8\n"
            "fabric_half_duplex = 1\n"));
  EXPECT_EQ(c.name, "my-p5");
  EXPECT_EQ(c.source, "measured by hand, 2026");
  EXPECT_EQ(c.ranksPerNode, 8);
  EXPECT_EQ(c.memoryBytes, 80.0 * 1024 * 1024 * 1024);
  EXPECT_EQ(c.localAlphaUs, 2.5);
  EXPECT_EQ(c.localGBps, 350);
  EXPECT_EQ(c.fabricAlphaUs, 6);
  EXPECT_EQ(c.fabricGBps, 400);
  EXPECT_EQ(c.rails, 32);
  EXPECT_EQ(c.copyGBps, 1600);
  EXPECT_EQ(c.reduceGBps, 1100);
  EXPECT_EQ(c.stepUs, 0.75);
  EXPECT_EQ(c.efficiency, 0.8);
  EXPECT_TRUE(c.fabricHalfDuplex);
  // 32 NICs over 8 ranks, as the built-in p5 profile: each rank stripes over its 4, alike
  const algo::TunerParams p = tunerParams(c);
  EXPECT_EQ(p.fabricRails, 4);
  EXPECT_DOUBLE_EQ(p.fabricRailShare, 0.25);
  EXPECT_DOUBLE_EQ(p.fabricRankShare, 4.0 / 32);
}

// A sharc-perf --calibrate file: the tuner's keys; the rest keeps the tuner's defaults.
TEST_F(ClusterFile, CalibrationFile) {
  algo::TunerParams t = algo::TunerParams::defaults();
  t.local = {3.25, 4.5};
  t.fabric = {41.5, 1.75};
  t.copyGbps = 7.5;
  t.reduceGbps = 9.25;
  t.stepUs = 1.5;
  t.cores = 2;
  t.fabricHalfDuplex = true;
  // Every line sharc-perf --calibrate writes (core::kTunerKeys), and a learned choice.
  const std::string path = write(t.toText() + "choice.allgather.1048576.4.2 = ring chunk=262144\n");
  const Cluster c = loadClusterFile(path);
  EXPECT_EQ(c.localAlphaUs, 3.25);
  EXPECT_EQ(c.localGBps, 4.5);
  EXPECT_EQ(c.fabricAlphaUs, 41.5);
  EXPECT_EQ(c.fabricGBps, 1.75);
  EXPECT_EQ(c.copyGBps, 7.5);
  EXPECT_EQ(c.reduceGBps, 9.25);
  EXPECT_EQ(c.stepUs, 1.5);
  EXPECT_EQ(c.ranksPerNode, 8);
  EXPECT_EQ(c.efficiency, 1.0);
  EXPECT_TRUE(c.fabricHalfDuplex);
  EXPECT_NE(c.source.find(path), std::string::npos);
  for (const char* key : core::kTunerKeys) {
    const auto keys = clusterFileKeys();
    EXPECT_NE(std::find(keys.begin(), keys.end(), key), keys.end()) << key;
  }
}

TEST_F(ClusterFile, ErrorsNameFileLineKeyAndExpectation) {
  std::string p = write("fabric_gbps = 400\n\nfabric_gibps = 3\n");
  std::string e = error(p);
  for (const char* part :
       {"line 3", "unknown key 'fabric_gibps'", "valid keys", "fabric_gbps", "local.alpha_us"})
    EXPECT_NE(e.find(part), std::string::npos) << part << " in: " << e;
  EXPECT_NE(e.find(p), std::string::npos) << e;

  e = error(write("fabric_gbps = fast\n"));
  EXPECT_NE(e.find("line 1"), std::string::npos) << e;
  EXPECT_NE(e.find("fabric_gbps = 'fast': expected GB/s"), std::string::npos) << e;
  e = error(write("ranks_per_node = 2.5\n"));
  EXPECT_NE(e.find("expected a whole number >= 1"), std::string::npos) << e;
  e = error(write("efficiency = 1.5\n"));
  EXPECT_NE(e.find("expected a number in (0, 1]"), std::string::npos) << e;
  e = error(write("local.gbps = 0\n"));
  EXPECT_NE(e.find("local.gbps"), std::string::npos) << e;
  e = error(write("just words\n"));
  EXPECT_NE(e.find("is not `key = value`"), std::string::npos) << e;
  e = error("/nonexistent/cluster.txt");
  EXPECT_NE(e.find("'/nonexistent/cluster.txt': cannot read"), std::string::npos) << e;
}

// A profile written as a cluster file (what `sharc-plan cluster` prints) loads back to the
// same cluster, field by field, and predicts the same for every collective, size and node
// count; so does the JSON's cluster object, which carries the same keys and values.
void expectSameCluster(const Cluster& a, const Cluster& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.ranksPerNode, b.ranksPerNode);
  EXPECT_EQ(a.memoryBytes, b.memoryBytes);
  EXPECT_EQ(a.localAlphaUs, b.localAlphaUs);
  EXPECT_EQ(a.localGBps, b.localGBps);
  EXPECT_EQ(a.fabricAlphaUs, b.fabricAlphaUs);
  EXPECT_EQ(a.fabricGBps, b.fabricGBps);
  EXPECT_EQ(a.rails, b.rails);
  EXPECT_EQ(a.copyGBps, b.copyGBps);
  EXPECT_EQ(a.reduceGBps, b.reduceGBps);
  EXPECT_EQ(a.stepUs, b.stepUs);
  EXPECT_EQ(a.efficiency, b.efficiency);
  EXPECT_EQ(a.fabricHalfDuplex, b.fabricHalfDuplex);
  EXPECT_EQ(a.dmaTransfers, b.dmaTransfers);
  EXPECT_EQ(a.postedSends, b.postedSends);
  EXPECT_EQ(a.fabricRankShare, b.fabricRankShare);
  EXPECT_EQ(a.railsPerRank, b.railsPerRank);
  EXPECT_EQ(a.railShare, b.railShare);
  EXPECT_EQ(a.pcieGBps, b.pcieGBps);
  EXPECT_EQ(a.hostReduceGBps, b.hostReduceGBps);
}

TEST_F(ClusterFile, EveryProfileRoundTripsToTheSamePredictions) {
  std::vector<Cluster> clusters;
  for (const std::string& name : builtinClusterNames()) clusters.push_back(builtinCluster(name));
  Cluster odd = thisHostCluster(3, 5.5 * (1u << 30));
  odd.source = "a # in the source, and\na second line";
  odd.railShare = 0.3;
  odd.fabricRankShare = 0.7;
  odd.postedSends = 0;
  odd.hostReduceGBps = 12.345678901234567;
  clusters.push_back(odd);
  for (const Cluster& c : clusters) {
    SCOPED_TRACE(c.name);
    const std::string text = clusterFileText(c);
    Cluster back = loadClusterFile(write(text));
    if (&c == &clusters.back()) {
      EXPECT_EQ(back.source, "a   in the source, and a second line");  // one line, no comment
      back.source = c.source;
    }
    expectSameCluster(c, back);
    for (Collective coll :
         {Collective::AllGather, Collective::ReduceScatter, Collective::AllReduce})
      for (int nodes : {1, 2, 16, 128})
        for (size_t bytes : {size_t{1} << 20, size_t{64} << 20, size_t{2} << 30}) {
          const Prediction p = predictCollective(c, nodes, coll, bytes);
          const Prediction q = predictCollective(back, nodes, coll, bytes);
          EXPECT_EQ(p.predictedUs, q.predictedUs) << collectiveName(coll) << " " << nodes;
          EXPECT_EQ(p.algorithm, q.algorithm);
          EXPECT_EQ(p.boundUs, q.boundUs);
        }
    // every key the file writes is one the loader takes, and every cluster key (not the
    // tuner file's, which a cluster derives: cores = ranks per node, switch_us = 0) is written
    const auto keys = clusterFileKeys();
    for (const ClusterField& f : clusterFileFields(c))
      EXPECT_NE(std::find(keys.begin(), keys.end(), f.key), keys.end()) << f.key;
    for (const std::string& k : keys) {
      const bool tunerOnly = k.find('.') != std::string::npos ||
                             (std::find(std::begin(core::kTunerKeys), std::end(core::kTunerKeys),
                                        k) != std::end(core::kTunerKeys) &&
                              k != "step_us");
      if (!tunerOnly) {
        EXPECT_NE(text.find("\n" + k + " = "), std::string::npos) << k;
      }
    }
  }
}

TEST_F(ClusterFile, NewKeysAreCheckedLikeTheOthers) {
  std::string e = error(write("dma_transfers = 2\n"));
  EXPECT_NE(e.find("dma_transfers = '2': expected 0 or 1"), std::string::npos) << e;
  e = error(write("posted_sends = -1\n"));
  EXPECT_NE(e.find("expected a whole number >= 0"), std::string::npos) << e;
  e = error(write("rail_share = 1.5\n"));
  EXPECT_NE(e.find("expected a number in [0, 1]"), std::string::npos) << e;
  const Cluster c =
      loadClusterFile(write("dma_transfers = 1\nposted_sends = 0\nrails_per_rank = 2\n"
                            "fabric_rank_share = 0.25\nrail_share = 0.5\n"));
  EXPECT_TRUE(c.dmaTransfers);
  EXPECT_EQ(c.postedSends, 0);
  EXPECT_EQ(c.railsPerRank, 2);
  EXPECT_EQ(c.fabricRankShare, 0.25);
  EXPECT_EQ(c.railShare, 0.5);
}

// This host: the tuner's parameters of this process (defaults, the host's NICs,
// SHARC_TUNER_FILE), field by field.
TEST(ThisHost, TheTunersParameters) {
  const algo::TunerParams t = algo::TunerParams::fromConfig(core::Config::get());
  const Cluster c = thisHostCluster(4, 8e9);
  EXPECT_EQ(c.ranksPerNode, 4);
  EXPECT_EQ(c.memoryBytes, 8e9);
  EXPECT_EQ(c.localAlphaUs, t.local.alphaUs);
  EXPECT_EQ(c.localGBps, t.local.gbps);
  EXPECT_EQ(c.fabricAlphaUs, t.fabric.alphaUs);
  EXPECT_EQ(c.fabricGBps, t.fabric.gbps);
  EXPECT_EQ(c.copyGBps, t.copyGbps);
  EXPECT_EQ(c.reduceGBps, t.reduceGbps);
  EXPECT_EQ(c.stepUs, t.stepUs);
  EXPECT_EQ(c.fabricHalfDuplex, t.fabricHalfDuplex);
  EXPECT_EQ(c.efficiency, 1.0);
  EXPECT_EQ(c.name, "this host");
  // and what the planner makes of it: the same rails and rail share as the tuner
  const algo::TunerParams back = tunerParams(c);
  EXPECT_EQ(back.fabricRails, t.fabricRails);
  EXPECT_DOUBLE_EQ(back.fabricRailShare, t.fabricRailShare);
}

// The rail share goes through a Cluster as the tuner has it: two NICs whose summed rate is
// capped (tcp on fast NICs: the first carries it all) or unequal, not 1 / rails; a cluster
// that sets none keeps every NIC alike.
TEST(ThisHost, RailShareIsTheTunersNotOneOverRails) {
  for (double share : {1.0, 0.8, 0.5}) {
    algo::TunerParams t = algo::TunerParams::defaults();
    t.fabricRails = 2;
    t.fabricRailShare = share;
    const algo::TunerParams back = tunerParams(fromTuner(t, 4, 0));
    EXPECT_EQ(back.fabricRails, 2);
    EXPECT_DOUBLE_EQ(back.fabricRailShare, share);
  }
  Cluster alike = fromTuner(algo::TunerParams::defaults(), 4, 0);
  alike.railsPerRank = 4;
  alike.railShare = 0;
  EXPECT_DOUBLE_EQ(tunerParams(alike).fabricRailShare, 0.25);
}

}  // namespace
}  // namespace sharc::plan

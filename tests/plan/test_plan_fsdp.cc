// planFsdp (include/sharc/plan_fsdp.hpp): the two closed forms of inter-node bytes, the valid
// degrees as sharc.torch's mesh.py defines them, ZeRO's memory formula, link sharing between
// groups, and the ranking's properties for the Llama presets on p4d and p5.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <utility>

#include "plan_test_cluster.hpp"
#include "sharc/error.hpp"
#include "sharc/plan.hpp"
#include "sharc/plan_fsdp.hpp"

namespace sharc::plan {
namespace {

const FsdpCandidate& find(const std::vector<FsdpCandidate>& v, int s, int tp) {
  for (const auto& c : v)
    if (c.hybridShardDegree == s && c.tensorParallelDegree == tp) return c;
  throw std::runtime_error("no candidate s=" + std::to_string(s) + " tp=" + std::to_string(tp));
}

double relErr(double a, double b) {
  return b == 0 ? std::fabs(a) : std::fabs(a - b) / b;
}

// Full sharding moves 3P(N-1)/N bytes per node per step, no sharding 2P(N-1)/N (P =
// parameter bytes in the communication dtype).
TEST(PlanFsdp, ClosedFormsOfInterNodeBytes) {
  for (const std::string& name : builtinModelNames()) {
    const ModelSpec m = builtinModel(name);
    const double P = m.parameters * m.paramBytes;
    for (int L : {8, 1, 4})
      for (int N : {1, 2, 3, 4, 8, 16, 64}) {
        const auto plan = planFsdp(m, testCluster(L), N);
        const FsdpCandidate& full = find(plan, N * L, 1);
        const FsdpCandidate& none = find(plan, 1, 1);
        EXPECT_LE(relErr(full.interNodeBytesPerNode, 3 * P * (N - 1) / N), 1e-12)
            << name << " L=" << L << " N=" << N << " " << full.allGatherAlgorithm << "/"
            << full.reduceScatterAlgorithm;
        EXPECT_LE(relErr(none.interNodeBytesPerNode, 2 * P * (N - 1) / N), 1e-12)
            << name << " L=" << L << " N=" << N << " " << none.allReduceAlgorithm;
        EXPECT_EQ(none.allGatherUs + none.reduceScatterUs, 0);
        EXPECT_EQ(full.allReduceUs, 0);
      }
  }
}

// The valid pairs, enumerated independently as the mesh's rule is stated in parallelize.py:
// tp divides L; s * tp * replicas = world; s <= L / tp divides L / tp, a larger s is a
// multiple of L / tp.
TEST(PlanFsdp, ExactlyTheDegreesTheTorchMeshAccepts) {
  const ModelSpec m = builtinModel("llama2-7b");
  for (int L : {8, 6, 4, 1})
    for (int N : {1, 2, 3, 6, 16}) {
      const int W = N * L;
      std::set<std::pair<int, int>> expected, got;
      for (int tp = 1; tp <= L; ++tp)
        for (int s = 1; s <= W; ++s) {
          if (L % tp != 0 || W % (s * tp) != 0) continue;
          const int perNode = L / tp;
          if (s <= perNode ? perNode % s == 0 : s % perNode == 0) expected.insert({s, tp});
        }
      for (const auto& c : planFsdp(m, testCluster(L), N)) {
        EXPECT_TRUE(got.insert({c.hybridShardDegree, c.tensorParallelDegree}).second)
            << "duplicate s=" << c.hybridShardDegree << " tp=" << c.tensorParallelDegree;
        EXPECT_EQ(c.replicas * c.hybridShardDegree * c.tensorParallelDegree, W);
      }
      EXPECT_EQ(got, expected) << "L=" << L << " N=" << N;
    }
}

// ZeRO (arXiv 1910.02054): 16 bytes per parameter of model state with mixed-precision Adam,
// split over s * tp; memory falls as s grows.
TEST(PlanFsdp, MemoryFollowsZeroAndFallsWithTheShardDegree) {
  const ModelSpec m = builtinModel("llama2-13b");
  const auto plan = planFsdp(m, testCluster(), 4);
  for (const auto& c : plan) {
    const double shard = c.hybridShardDegree * c.tensorParallelDegree;
    EXPECT_LE(relErr(c.paramBytes + c.gradBytes + c.optimizerBytes, 16 * m.parameters / shard),
              1e-12);
    EXPECT_DOUBLE_EQ(c.totalBytes, c.paramBytes + c.gradBytes + c.optimizerBytes +
                                       c.gatheredLayerBytes + c.activationBytes);
    EXPECT_EQ(c.fits, c.totalBytes <= 0.9 * 80.0 * (1u << 30));  // 10 % kept for CUDA
    EXPECT_EQ(c.gatheredLayerBytes == 0, c.hybridShardDegree == 1);
    for (const auto& d : plan)
      if (d.tensorParallelDegree == c.tensorParallelDegree &&
          d.hybridShardDegree > c.hybridShardDegree) {
        EXPECT_LT(d.totalBytes, c.totalBytes)
            << "tp=" << c.tensorParallelDegree << " s=" << c.hybridShardDegree << " -> "
            << d.hybridShardDegree;
      }
  }
}

// tp = L = 8 with s = N: each shard group has one rank per node, and the 8 groups of a node
// cross its NICs together: each AllGather runs at 1/8 of the node's fabric.
TEST(PlanFsdp, ShardGroupsShareTheNodesNics) {
  const ModelSpec m = builtinModel("llama2-70b");
  const Cluster cl = testCluster();
  Cluster slice = cl;
  slice.ranksPerNode = 1;
  slice.fabricGBps = cl.fabricGBps / 8;
  for (int N : {2, 8, 32}) {
    const std::vector<FsdpCandidate> plan = planFsdp(m, cl, N);  // find() points into it
    const FsdpCandidate& c = find(plan, N, 8);
    const double pb = m.paramBytes;
    auto ag = [&](const Cluster& k, double params) {
      return predictCollective(k, N, Collective::AllGather,
                               static_cast<size_t>(std::llround(params * pb / 8)))
          .predictedUs;
    };
    const double expected =
        2 * (m.layers * ag(slice, m.blockParameters()) + ag(slice, m.rootParameters()));
    EXPECT_LE(relErr(c.allGatherUs, expected), 1e-12) << N;
    Cluster alone = slice;
    alone.fabricGBps = cl.fabricGBps;
    EXPECT_GT(c.allGatherUs,
              2 * (m.layers * ag(alone, m.blockParameters()) + ag(alone, m.rootParameters())));
    // The eight groups together still move 3P(N-1)/N through each node.
    const double P = m.parameters * pb;
    EXPECT_LE(relErr(c.interNodeBytesPerNode, 3 * P * (N - 1) / N), 1e-12);
    EXPECT_GT(c.tpUs, 0);
  }
}

void checkRanking(const ModelSpec& m, const Cluster& cl, int nodes) {
  const auto plan = planFsdp(m, cl, nodes);
  const std::string what = m.name + " on " + std::to_string(nodes) + " x " + cl.name;
  ASSERT_FALSE(plan.empty()) << what;
  const FsdpCandidate& best = plan[0];
  EXPECT_FALSE(best.reason.empty()) << what;
  bool anyFits = false, seenUnfit = false;
  for (const auto& c : plan) {
    anyFits = anyFits || c.fits;
    if (!c.fits) seenUnfit = true;
    EXPECT_FALSE(c.fits && seenUnfit) << what << ": a fitting candidate after one that does not";
    if (c.fits) {
      EXPECT_GE(c.commUs, best.commUs) << what;
    }
    EXPECT_GE(c.commUs, 0);
    EXPECT_NEAR(c.commUs, c.allGatherUs + c.reduceScatterUs + c.allReduceUs + c.tpUs,
                1e-9 * c.commUs);
    if (nodes == 1) {
      EXPECT_EQ(c.interNodeBytesPerNode, 0);
    }
  }
  EXPECT_EQ(best.fits, anyFits) << what;
  if (best.fits && plan.size() > 1 && plan[1].fits) {
    EXPECT_NE(best.reason.find("hybrid_shard_degree=" + std::to_string(plan[1].hybridShardDegree)),
              std::string::npos)
        << what << ": " << best.reason;
  }
  if (!anyFits) {
    EXPECT_NE(best.reason.find("nothing fits"), std::string::npos) << best.reason;
    for (const auto& c : plan) EXPECT_GE(c.totalBytes, best.totalBytes);
  }
}

TEST(PlanFsdp, RankingOfTheLlamaPresetsOnP4dAndP5) {
  for (const char* inst : {"p4d.24xlarge", "p5.48xlarge"})
    for (const char* model : {"llama2-7b", "llama2-13b", "llama2-70b"})
      for (int nodes : {1, 2, 4, 16, 64})
        checkRanking(builtinModel(model), builtinCluster(inst), nodes);
  checkRanking(builtinModel("gpt-175b"), builtinCluster("p5.48xlarge"), 32);
}

TEST(PlanFsdp, SeventyBDoesNotFitUnshardedOnP4d) {
  const Cluster p4d = builtinCluster("p4d.24xlarge");
  ASSERT_GT(p4d.memoryBytes, 0);
  for (int nodes : {1, 4, 16}) {
    const auto plan = planFsdp(builtinModel("llama2-70b"), p4d, nodes);
    EXPECT_FALSE(find(plan, 1, 1).fits);
    if (nodes == 16) {
      EXPECT_TRUE(plan[0].fits) << plan[0].reason;  // 128 A100s of 40 GB
    }
    if (plan[0].fits) {
      EXPECT_GT(plan[0].hybridShardDegree * plan[0].tensorParallelDegree, 8);
    }
  }
}

TEST(PlanFsdp, PresetsAndErrors) {
  const auto names = builtinModelNames();
  EXPECT_EQ(names, (std::vector<std::string>{"llama2-7b", "llama2-13b", "llama2-70b", "gpt-175b"}));
  for (const auto& n : names) {
    const ModelSpec m = builtinModel(n);
    EXPECT_EQ(m.name, n);
    EXPECT_GT(m.blockParameters(), 0);
    // A block of a dense transformer holds about 12 h^2 parameters (Llama's GQA and wider MLP
    // move it by tens of percent, not more).
    EXPECT_NEAR(m.blockParameters() / (12.0 * m.hidden * m.hidden), 1.0, 0.35) << n;
  }
  try {
    builtinModel("llama3");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Result::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("llama2-70b"), std::string::npos) << e.what();
  }
  ModelSpec bad = builtinModel("llama2-7b");
  EXPECT_THROW(planFsdp(bad, testCluster(), 0), Error);
  bad.vocab = 10000000;  // embeddings larger than the model
  try {
    planFsdp(bad, testCluster(), 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tied embeddings?"), std::string::npos) << e.what();
  }
}

// What sharc.torch's "auto" plans: a small module without embeddings (vocab 0) on this host's
// parameters, 2 nodes of 2 ranks; the closed forms hold there too.
TEST(PlanFsdp, ToyModelWithoutEmbeddingsOnThisHost) {
  const ModelSpec toy{"toy", 1e6, 4, 256, 128, 2, 0, 4};
  const Cluster host = thisHostCluster(2, 8e9);
  const auto plan = planFsdp(toy, host, 2);
  ASSERT_FALSE(plan.empty());
  EXPECT_TRUE(plan[0].fits) << plan[0].reason;
  const double P = 1e6 * 4;
  EXPECT_LE(relErr(find(plan, 4, 1).interNodeBytesPerNode, 3 * P / 2), 1e-12);
  EXPECT_LE(relErr(find(plan, 1, 1).interNodeBytesPerNode, 2 * P / 2), 1e-12);
  EXPECT_GT(find(plan, 4, 1).allGatherUs, 0);
}

}  // namespace
}  // namespace sharc::plan

// The learning tuner (src/api/learned_tuner.hpp): every rank settles on the same plan, results
// stay right while it explores, exploring is bounded and happens once, SHARC_ALGO and
// SHARC_TUNER_LEARN=0 stop it, and learned choices survive a SHARC_TUNER_SAVE /
// SHARC_TUNER_FILE round trip.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <sharc/communicator.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "collective_check.hpp"
#include "core/config.hpp"
#include "multiprocess.hpp"

namespace sharc::testing {
namespace {

constexpr size_t kCount = 4096;  // float32 elements: 16 KiB per rank
constexpr int kAfter = 4;        // SHARC_TUNER_LEARN_AFTER in these tests
constexpr int kCalls = 60;       // > kAfter + 8 plans * 3 rounds + 1

RunOptions opts() {
  RunOptions o;
  o.env["SHARC_FI_PROVIDER"] = "tcp;ofi_rxm";
  o.env["SHARC_TIMEOUT_MS"] = "30000";
  o.env["SHARC_TUNER_LEARN_AFTER"] = std::to_string(kAfter);
  return o;
}

struct Entry {
  std::string collective, internal, algorithm;
  size_t count = 0, chunk = 0;
};

// The entries of the flight record of this process (one communicator in these tests).
std::vector<Entry> record(const Communicator& comm) {
  const std::string json = comm.traceJson();
  static const std::regex re(
      R"re("collective":"(\w+)","internal":"(\w*)","dtype":"\w+","count":(\d+),.*?"algorithm":"(\w*)","chunk_bytes":(\d+))re");
  std::vector<Entry> out;
  for (auto it = std::sregex_iterator(json.begin(), json.end(), re); it != std::sregex_iterator();
       ++it) {
    const std::smatch& m = *it;
    out.push_back({m[1], m[2], m[4], std::stoul(m[3]), std::stoul(m[5])});
  }
  return out;
}

const char* kindName(Coll c) {
  return c == Coll::AllGather       ? "AllGather"
         : c == Coll::ReduceScatter ? "ReduceScatter"
                                    : "AllReduce";
}
CollectiveKind planKind(Coll c) {
  return c == Coll::AllGather       ? CollectiveKind::AllGather
         : c == Coll::ReduceScatter ? CollectiveKind::ReduceScatter
                                    : CollectiveKind::AllReduce;
}

// The plan of `c` as one string, gathered from every rank: all must be equal.
void expectSameOnEveryRank(Communicator& comm, const std::string& mine) {
  std::vector<char> buf(64, '\0'), all(64 * static_cast<size_t>(comm.size()));
  mine.copy(buf.data(), buf.size() - 1);
  comm.allGather(buf.data(), all.data(), buf.size(), DataType::Uint8);
  for (int r = 0; r < comm.size(); ++r)
    EXPECT_EQ(std::string(all.data() + 64 * r), mine) << "rank " << r << " chose differently";
}

// Runs kCalls checked calls of each collective, then checks what the tuner did.
void learnAndCheck(Communicator& comm) {
  for (Coll coll : {Coll::ReduceScatter, Coll::AllGather, Coll::AllReduce}) {
    for (int i = 0; i < kCalls; ++i)
      ASSERT_EQ(runAndCheck(comm, coll, DataType::Float32, RedOp::Sum, kCount, i % 2 == 1), "")
          << collName(coll) << " call " << i;
    const CallPlan p = comm.plan(planKind(coll), kCount, DataType::Float32);
    EXPECT_NE(p.breakdown.find("learned"), std::string::npos) << p.breakdown;
    expectSameOnEveryRank(comm, p.algorithm + "/" + std::to_string(p.chunkBytes));
    // The record: one agreement per collective; before the first (ReduceScatter's), its
    // kAfter calls with the model's plan then 3 rounds of at most 8 plans; after it, one call
    // with the model's plan (it issued the agreement), then the choice.
    int agreements = 0, before = 0, after = 0, otherAfter = 0;
    std::set<std::string> tried;
    for (const Entry& e : record(comm)) {
      if (e.internal == "tuner") {
        ++agreements;
      } else if (e.collective == kindName(coll) && e.internal.empty() && e.count == kCount) {
        if (agreements == 0) {
          ++before;
          tried.insert(e.algorithm + "/" + std::to_string(e.chunk));
        } else if (agreements == 1) {
          // The call that issues the agreement still runs the incumbent (the model's plan).
          if (after++ > 0 && (e.algorithm != p.algorithm || e.chunk != p.chunkBytes)) ++otherAfter;
        }
      }
    }
    const int expectedAgreements = coll == Coll::ReduceScatter ? 1
                                   : coll == Coll::AllGather   ? 2
                                                               : 3;
    EXPECT_EQ(agreements, expectedAgreements) << collName(coll);
    if (coll == Coll::ReduceScatter) {
      const int explored = before - kAfter;
      EXPECT_GE(explored, 2 * 3);
      EXPECT_LE(explored, 8 * 3);
      EXPECT_EQ(explored % 3, 0) << "3 rounds of each plan";
      EXPECT_GE(tried.size(), 2u);
      EXPECT_TRUE(tried.count(p.algorithm + "/" + std::to_string(p.chunkBytes)))
          << "the choice is one of the plans tried";
      EXPECT_EQ(after, kCalls - before);
      EXPECT_EQ(otherAfter, 0) << "after the decision every call runs the choice";
    }
  }
}

TEST(LearnedTuner, EveryRankChoosesTheSameAndResultsStayRight) {
  for (int n : {2, 3, 4}) {
    SCOPED_TRACE(std::to_string(n) + " ranks");
    runRanks(
        n,
        [](const RankContext&) {
          auto comm = Communicator::createFromEnvironment();
          learnAndCheck(*comm);
        },
        opts());
  }
}

TEST(LearnedTuner, SplitCommunicatorsAndCallsInFlightAgree) {
  runRanks(
      4,
      [](const RankContext& ctx) {
        auto world = Communicator::createFromEnvironment();
        auto pair = world->split(ctx.rank / 2, ctx.rank);  // {0,1} and {2,3}
        // Two calls in flight at a time on the pair (the agreement must not wait for them),
        // the world's calls interleaved; every result checked.
        const int n = pair->size();
        std::vector<std::vector<float>> send(2, std::vector<float>(kCount * n)),
            recv(2, std::vector<float>(kCount));
        std::vector<Request> inFlight(2);
        const auto check = [&](int i) {
          const std::vector<float>& got = recv[static_cast<size_t>(i % 2)];
          for (size_t j = 0; j < kCount; ++j) {  // float64 reference: every rank's input
            double want = 0;
            for (int q = 0; q < n; ++q)
              want += static_cast<double>(
                  (kCount * static_cast<size_t>(pair->rank()) + j + static_cast<size_t>(i + q)) %
                  97);
            ASSERT_EQ(static_cast<double>(got[j]), want) << "call " << i << " element " << j;
          }
        };
        for (int i = 0; i < kCalls; ++i) {
          const size_t b = static_cast<size_t>(i % 2);
          for (size_t j = 0; j < send[b].size(); ++j)
            send[b][j] = static_cast<float>((j + static_cast<size_t>(i + pair->rank())) % 97);
          inFlight[b] = pair->ireduceScatter(send[b].data(), recv[b].data(), kCount,
                                             DataType::Float32, RedOp::Sum);
          if (i % 5 == 0) {
            ASSERT_EQ(
                runAndCheck(*world, Coll::AllReduce, DataType::Float32, RedOp::Sum, 1000, false),
                "");
          }
          if (i > 0) {
            inFlight[1 - b].wait();
            check(i - 1);
          }
        }
        inFlight[static_cast<size_t>((kCalls - 1) % 2)].wait();
        check(kCalls - 1);
        const CallPlan p = pair->plan(CollectiveKind::ReduceScatter, kCount, DataType::Float32);
        EXPECT_NE(p.breakdown.find("learned"), std::string::npos) << p.breakdown;
        expectSameOnEveryRank(*pair, p.algorithm + "/" + std::to_string(p.chunkBytes));
      },
      opts());
}

TEST(LearnedTuner, SharcAlgoAndLearnOffStopExploring) {
  for (const auto& [var, value] :
       {std::pair<std::string, std::string>{"SHARC_ALGO", "ring"}, {"SHARC_TUNER_LEARN", "0"}}) {
    SCOPED_TRACE(var + "=" + value);
    RunOptions o = opts();
    o.env[var] = value;
    runRanks(
        3,
        [&](const RankContext&) {
          auto comm = Communicator::createFromEnvironment();
          const CallPlan model =
              comm->plan(CollectiveKind::ReduceScatter, kCount, DataType::Float32);
          for (int i = 0; i < kCalls; ++i)
            ASSERT_EQ(runAndCheck(*comm, Coll::ReduceScatter, DataType::Float32, RedOp::Sum, kCount,
                                  false),
                      "");
          if (var == "SHARC_ALGO") {
            EXPECT_EQ(model.algorithm, "ring");
          }
          for (const Entry& e : record(*comm)) {
            EXPECT_NE(e.internal, "tuner");
            if (e.collective == "ReduceScatter") {
              EXPECT_EQ(e.algorithm, model.algorithm);
              EXPECT_EQ(e.chunk, model.chunkBytes);
            }
          }
        },
        o);
  }
}

std::string tempPath(const char* name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/sharc-learn-" + std::to_string(getpid()) +
         "-" + name;
}

TEST(LearnedTuner, SavedChoicesAreReadBackAndHonoured) {
  const std::string path = tempPath("tuner.txt");
  std::remove(path.c_str());
  // Job 1 learns and saves.
  RunOptions first = opts();
  first.env["SHARC_TUNER_SAVE"] = path;
  runRanks(
      2,
      [](const RankContext&) {
        auto comm = Communicator::createFromEnvironment();
        for (int i = 0; i < kCalls; ++i)
          ASSERT_EQ(
              runAndCheck(*comm, Coll::AllReduce, DataType::Float32, RedOp::Sum, kCount, false),
              "");
        const CallPlan p = comm->plan(CollectiveKind::AllReduce, kCount, DataType::Float32);
        // The choice, as job 2 must see it, next to the file.
        std::ofstream(std::string(std::getenv("SHARC_TUNER_SAVE")) + ".expected")
            << p.algorithm << " " << p.chunkBytes;
        comm->destroy();
      },
      first);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const auto choices = core::parseTunerChoices(text.str(), path);
  ASSERT_EQ(choices.size(), 1u) << text.str();
  EXPECT_EQ(choices[0].collective, CollectiveKind::AllReduce);
  EXPECT_EQ(choices[0].bytes, kCount * 4);
  EXPECT_EQ(choices[0].ranks, 2);
  EXPECT_EQ(choices[0].nodes, 1);
  std::string expectedAlgorithm;
  size_t expectedChunk = 0;
  std::ifstream(path + ".expected") >> expectedAlgorithm >> expectedChunk;
  EXPECT_EQ(algo::algorithmName(choices[0].algorithm), expectedAlgorithm);
  EXPECT_EQ(choices[0].chunkBytes, expectedChunk);

  // Job 2 reads it: that plan from the first call on, and nothing explored.
  RunOptions second = opts();
  second.env["SHARC_TUNER_FILE"] = path;
  runRanks(
      2,
      [&](const RankContext&) {
        auto comm = Communicator::createFromEnvironment();
        const CallPlan p = comm->plan(CollectiveKind::AllReduce, kCount, DataType::Float32);
        EXPECT_EQ(p.algorithm, expectedAlgorithm);
        EXPECT_EQ(p.chunkBytes, expectedChunk);
        EXPECT_NE(p.breakdown.find("SHARC_TUNER_FILE"), std::string::npos) << p.breakdown;
        for (int i = 0; i < kCalls; ++i)
          ASSERT_EQ(
              runAndCheck(*comm, Coll::AllReduce, DataType::Float32, RedOp::Sum, kCount, true), "");
        for (const Entry& e : record(*comm)) {
          EXPECT_NE(e.internal, "tuner");
          if (e.collective == "AllReduce") {
            EXPECT_EQ(e.algorithm, expectedAlgorithm);
          }
        }
      },
      second);
  std::remove(path.c_str());
  std::remove((path + ".expected").c_str());
}

TEST(LearnedTuner, AHandWrittenChoiceWinsOverTheModel) {
  // bruck for a 3-rank AllGather of 16 KiB: not what the model picks on one host.
  const std::string path = tempPath("hand.txt");
  std::ofstream(path) << "choice.allgather." << kCount * 4 << ".3.1 = bruck chunk=65536\n"
                      << "choice.reducescatter.12345.3.1 = ring chunk=4096  # another shape\n";
  RunOptions o = opts();
  o.env["SHARC_TUNER_FILE"] = path;
  runRanks(
      3,
      [](const RankContext&) {
        auto comm = Communicator::createFromEnvironment();
        EXPECT_EQ(comm->plan(CollectiveKind::AllGather, kCount, DataType::Float32).algorithm,
                  "bruck");
        for (int i = 0; i < 10; ++i)
          ASSERT_EQ(
              runAndCheck(*comm, Coll::AllGather, DataType::Float32, RedOp::Sum, kCount, false),
              "");
        for (const Entry& e : record(*comm))
          if (e.collective == "AllGather" && e.internal.empty()) {
            EXPECT_EQ(e.algorithm, "bruck");
          }
      },
      o);
  std::remove(path.c_str());
}

TEST(LearnedTuner, MalformedChoiceLinesAreRejected) {
  for (const char* line :
       {"choice.allgather.16384.3 = ring chunk=65536", "choice.gather.16384.3.1 = ring chunk=65536",
        "choice.allgather.16384.3.1 = fastest chunk=65536",
        "choice.allgather.16384.3.1 = ring chunk=100", "choice.allgather.16384.3.1 = ring"}) {
    try {
      core::parseTunerChoices(std::string(line) + "\n", "t.txt");
      ADD_FAILURE() << "accepted: " << line;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("t.txt' line 1"), std::string::npos) << e.what();
    }
  }
  // The parameters' parser leaves the choice lines to it.
  EXPECT_EQ(
      core::parseTunerText("step_us = 2\nchoice.allgather.8.2.1 = ring chunk=4096\n", "t").size(),
      1u);
}

}  // namespace
}  // namespace sharc::testing

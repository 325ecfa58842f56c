// Communicator::shrink over real processes: survivors of a rank killed mid-collective build a
// working communicator without it, on every transport; misuse is refused; and shrinking over
// and over leaves no descriptor, thread, mapping or /dev/shm entry behind.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <sharc/communicator.hpp>
#include <string>
#include <thread>
#include <vector>

#include "multiprocess.hpp"
#include "p2p_check.hpp"

namespace sharc::testing {
namespace {

size_t entries(const std::string& dir) {
  size_t n = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (readdir(d) != nullptr) ++n;
    closedir(d);
  }
  return n;
}

size_t mappings() {
  std::ifstream maps("/proc/self/maps");
  size_t n = 0;
  for (std::string line; std::getline(maps, line);) ++n;
  return n;
}

// An AllReduce on `comm` whose every rank contributes (old rank + 1) * i at element i: checks
// the sum over `oldRanks` (the ranks of the original communicator that take part).
void expectSum(Communicator& comm, int oldRank, const std::vector<int>& oldRanks) {
  const size_t n = 100003;
  std::vector<double> send(n), recv(n);
  for (size_t i = 0; i < n; ++i) send[i] = static_cast<double>((oldRank + 1) * i);
  comm.allReduce(send.data(), recv.data(), n, DataType::Float64, RedOp::Sum);
  double factor = 0;
  for (int r : oldRanks) factor += r + 1;
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += recv[i] != factor * static_cast<double>(i);
  EXPECT_EQ(wrong, 0u) << "rank " << comm.rank() << " of " << comm.size();
}

class ShrinkTransports : public ::testing::TestWithParam<std::string> {};

// Rank 3 of 4 is killed in the middle of an AllReduce; the others see the call fail, shrink
// to ranks 0..2 (renumbered 0..2), and their AllReduce and a split of the new communicator
// give exact sums.
TEST_P(ShrinkTransports, SurvivorsOfAKillMidCollectiveGoOn) {
  RunOptions o = transportOptions(GetParam());
  o.env["SHARC_TIMEOUT_MS"] = "15000";
  o.mayFail = {3};
  runRanks(
      4,
      [](const RankContext& ctx) {
        auto world = Communicator::createFromEnvironment();
        const size_t n = size_t{1} << 22;
        std::vector<float> send(n, 1.0f), recv(n);
        world->allReduce(send.data(), recv.data(), n, DataType::Float32, RedOp::Sum);
        if (ctx.rank == 3) {
          auto req = world->iallReduce(send.data(), recv.data(), n, DataType::Float32, RedOp::Sum);
          std::this_thread::sleep_for(std::chrono::milliseconds(30));
          raise(SIGKILL);
        }
        // The first call may finish before the kill lands (rank 3 may have done its part);
        // the next ones cannot.
        const auto [code, what] = errorOf([&] {
          for (int i = 0; i < 3; ++i)
            world->allReduce(send.data(), recv.data(), n, DataType::Float32, RedOp::Sum);
        });
        EXPECT_NE(code, Result::Success) << "three AllReduces beside the kill succeeded";
        auto survivors = world->shrink({3}, {}, /*abortFirst=*/true);
        ASSERT_TRUE(survivors);
        EXPECT_EQ(survivors->size(), 3);
        EXPECT_EQ(survivors->rank(), ctx.rank);
        expectSum(*survivors, ctx.rank, {0, 1, 2});
        auto pair = survivors->split(ctx.rank == 1 ? -1 : 0, 0);  // ranks 0 and 2
        if (pair) expectSum(*pair, ctx.rank, {0, 2});
        // The failed communicator stays failed.
        EXPECT_NE(world->failure(), Result::Success);
      },
      o);
}

INSTANTIATE_TEST_SUITE_P(, ShrinkTransports, ::testing::Values("tcp;ofi_rxm", "sharc-shm"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return std::string(info.param == "tcp;ofi_rxm" ? "tcp" : "sharcshm");
                         });

// The middle rank is excluded (alive, taking no part): the others are renumbered densely,
// and the world, not aborted, still works for its closing barrier.
TEST(Shrink, ExcludingALiveRankRenumbersTheRest) {
  runRanks(
      3,
      [](const RankContext& ctx) {
        auto world = Communicator::createFromEnvironment();
        if (ctx.rank == 1) return;  // excluded: it leaves without a word
        auto rest = world->shrink({1});
        EXPECT_EQ(rest->size(), 2);
        EXPECT_EQ(rest->rank(), ctx.rank == 0 ? 0 : 1);
        expectSum(*rest, ctx.rank, {0, 2});
      },
      tcpOptions());
}

TEST(Shrink, RefusalsNameTheRankAndTheProblem) {
  runRanks(
      2,
      [](const RankContext& ctx) {
        auto world = Communicator::createFromEnvironment();
        auto [code, what] = errorOf([&] { world->shrink({ctx.rank}); });
        EXPECT_EQ(code, Result::InvalidArgument);
        EXPECT_TRUE(contains(what, "rank " + std::to_string(ctx.rank) +
                                       ": shrink: this rank "
                                       "excludes itself"))
            << what;
        std::tie(code, what) = errorOf([&] { world->shrink({5}); });
        EXPECT_EQ(code, Result::InvalidArgument);
        EXPECT_TRUE(contains(what, "excluded rank 5 is out of range")) << what;
        // Refused before anything changed: the communicator still works.
        world->barrier();
      },
      tcpOptions());
}

// A survivor whose peers never shrink (they excluded nobody and went on) times out with an
// error naming the survivors instead of waiting forever.
TEST(Shrink, AgreementIsBoundedByTheTimeout) {
  runRanks(
      2,
      [](const RankContext& ctx) {
        auto world = Communicator::createFromEnvironment();
        if (ctx.rank == 0) {
          const auto start = std::chrono::steady_clock::now();
          const auto [code, what] =
              errorOf([&] { world->shrink({}, std::chrono::milliseconds(1500)); });
          EXPECT_EQ(code, Result::Timeout) << what;
          EXPECT_TRUE(contains(what, "rank 0: shrink: agreeing with the survivors (ranks 0,1)"))
              << what;
          EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
        } else {
          std::this_thread::sleep_for(std::chrono::seconds(3));
        }
      },
      shortTimeout());
}

// Shrinking 20 times (a fresh communicator each time, split from the world, shrunk to ranks
// 0 and 1, aborted first every other time, used, destroyed) leaves descriptors, threads, /dev/shm
// and mappings as they were after the first round.
TEST(Shrink, TwentyCyclesLeakNothing) {
  RunOptions o = transportOptions("sharc-shm");
  runRanks(
      3,
      [](const RankContext& ctx) {
        auto world = Communicator::createFromEnvironment();
        size_t fds = 0, threads = 0, shm = 0, maps = 0;
        for (int cycle = 0; cycle < 21; ++cycle) {
          {
            auto sub = world->split(0, ctx.rank);
            if (ctx.rank < 2) {
              auto pair = sub->shrink({2}, {}, /*abortFirst=*/cycle % 2 == 1);
              expectSum(*pair, ctx.rank, {0, 1});
            }
          }
          world->barrier();  // every rank has destroyed this round's communicators
          if (cycle == 0) {
            fds = entries("/proc/self/fd");
            threads = entries("/proc/self/task");
            shm = entries("/dev/shm");
            maps = mappings();
          }
        }
        EXPECT_EQ(entries("/proc/self/fd"), fds);
        EXPECT_EQ(entries("/proc/self/task"), threads);
        EXPECT_EQ(entries("/dev/shm"), shm);
        EXPECT_LE(mappings(), maps + 2) << "mappings grew (from " << maps << ")";
      },
      o);
}

}  // namespace
}  // namespace sharc::testing

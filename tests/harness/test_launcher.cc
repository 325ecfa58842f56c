// The shared launcher (tools/launcher/launcher.hpp) that the test harness and sharc-perf -N
// run their ranks with: environment, messages, stopping on a failure, the timeout.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

#include "launcher.hpp"

namespace {

using namespace std::chrono_literals;
using sharc::launcher::Options;
using sharc::launcher::Result;
using sharc::launcher::run;
using Clock = std::chrono::steady_clock;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "<unset>";
}

// Sleeps long past any bound below: only the launcher ends it.
int sleepLong() {
  std::this_thread::sleep_for(60s);
  return 0;
}

TEST(Launcher, EachRankGetsItsRankWorldAndEnvironment) {
  setenv("MASTER_ADDR", "outer.example", 1);  // an outer launcher's: not for these ranks
  setenv("RANK", "7", 1);
  Options o;
  o.env["SHARC_LAUNCHER_TEST"] = "all";
  o.rankEnv.resize(2);
  o.rankEnv[1]["SHARC_NODE_ID"] = "nodeB";
  const Result result = run(
      3,
      [](int rank) {
        const std::string root = env("SHARC_ROOT");
        if (root.rfind("127.0.0.1:", 0) != 0) return 10;
        if (env("SHARC_RANK") != std::to_string(rank)) return 11;
        if (env("SHARC_WORLD_SIZE") != "3") return 12;
        if (env("SHARC_LAUNCHER_TEST") != "all") return 13;
        if ((env("SHARC_NODE_ID") == "nodeB") != (rank == 1)) return 14;
        if (env("MASTER_ADDR") != "<unset>" || env("RANK") != "<unset>") return 15;
        return 0;
      },
      o);
  unsetenv("MASTER_ADDR");
  unsetenv("RANK");
  ASSERT_EQ(result.ranks.size(), 3u);
  for (const auto& r : result.ranks) EXPECT_EQ(r.exitCode(), 0) << r.message;
  EXPECT_TRUE(result.ok);
  EXPECT_FALSE(result.timedOut);
  EXPECT_EQ(result.firstFailure, -1);
}

TEST(Launcher, AnExceptionsMessageReachesTheParentAndStopsTheOthers) {
  const auto start = Clock::now();
  const Result result = run(3, [](int rank) -> int {
    if (rank == 2) throw std::runtime_error("rank two gave up\nsecond line");
    return sleepLong();
  });
  EXPECT_LT(Clock::now() - start, 20s);
  EXPECT_FALSE(result.ok);
  EXPECT_EQ(result.firstFailure, 2);
  EXPECT_EQ(result.ranks[2].exitCode(), 1);
  EXPECT_EQ(result.ranks[2].message, "rank two gave up\nsecond line");
  EXPECT_FALSE(result.ranks[2].stopped);
  for (int r : {0, 1}) {
    EXPECT_TRUE(result.ranks[r].stopped);
    EXPECT_EQ(result.ranks[r].exitCode(), -1);  // SIGTERM
    EXPECT_EQ(result.ranks[r].message, "");
  }
}

TEST(Launcher, RanksAllowedToFailAndNonFatalStatusesStopNobody) {
  Options o;
  o.mayFail = {1};
  o.nonFatalExitCodes = {3};
  const Result result = run(
      3,
      [](int rank) {
        if (rank == 1) _exit(9);  // allowed to fail
        if (rank == 2) return 3;  // finished with a wrong result
        std::this_thread::sleep_for(300ms);
        return 0;
      },
      o);
  EXPECT_EQ(result.ranks[0].exitCode(), 0);
  EXPECT_FALSE(result.ranks[0].stopped);
  EXPECT_EQ(result.ranks[1].exitCode(), 9);
  EXPECT_EQ(result.ranks[2].exitCode(), 3);
  EXPECT_EQ(result.firstFailure, -1);
  EXPECT_FALSE(result.ok);  // rank 2's status is still a failure
}

TEST(Launcher, AFailureStopsNobodyWhenAskedNotTo) {
  Options o;
  o.stopOnFailure = false;
  const Result result = run(
      2,
      [](int rank) {
        if (rank == 1) return 4;
        std::this_thread::sleep_for(300ms);
        return 0;
      },
      o);
  EXPECT_EQ(result.ranks[0].exitCode(), 0);
  EXPECT_EQ(result.ranks[1].exitCode(), 4);
  EXPECT_EQ(result.firstFailure, 1);
  EXPECT_FALSE(result.ok);
}

TEST(Launcher, TheTimeoutStopsEveryRankAndSigkillsThoseIgnoringSigterm) {
  Options o;
  o.timeout = 300ms;
  o.grace = 200ms;
  const auto start = Clock::now();
  const Result result = run(
      2,
      [](int rank) {
        if (rank == 1) signal(SIGTERM, SIG_IGN);
        return sleepLong();
      },
      o);
  EXPECT_LT(Clock::now() - start, 20s);
  EXPECT_TRUE(result.timedOut);
  EXPECT_FALSE(result.ok);
  for (const auto& r : result.ranks) EXPECT_TRUE(r.stopped);
  EXPECT_EQ(sharc::launcher::describeStatus(result.ranks[0].status),
            "was killed by signal 15 (Terminated)");
  EXPECT_EQ(sharc::launcher::describeStatus(result.ranks[1].status),
            "was killed by signal 9 (Killed)");
}

TEST(Launcher, LongMessagesOfManyRanksArriveWholeOrCutButNeverMixed) {
  Options o;
  o.stopOnFailure = false;
  const Result result = run(
      6,
      [](int rank) -> int {
        throw std::runtime_error(std::string(rank % 2 ? 100000 : 1000, char('a' + rank)));
      },
      o);
  for (int r = 0; r < 6; ++r) {
    const std::string& m = result.ranks[static_cast<size_t>(r)].message;
    EXPECT_EQ(m.find_first_not_of(char('a' + r)), std::string::npos) << "rank " << r;
    if (r % 2 == 0)
      EXPECT_EQ(m.size(), 1000u);
    else
      EXPECT_GT(m.size(), 1000u);  // cut to what one atomic pipe write holds
  }
}

TEST(Launcher, FreeLoopbackPortIsAPort) {
  const int port = sharc::launcher::freeLoopbackPort();
  EXPECT_GT(port, 0);
  EXPECT_LT(port, 65536);
}

}  // namespace

// Faults injected through SHARC_FAULT (core::FaultPlan, transport::FaultyEndpoint) at a
// chosen collective: a killed, stopped, failing, slow or cut-off rank. Each ends with correct
// results (delay) or an error on every surviving rank in bounded time, never a hang. The
// harness forks the ranks and sets SHARC_FAULT before each child reads its configuration, so
// every test has its own plan.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ostream>
#include <set>
#include <sharc/communicator.hpp>
#include <string>
#include <thread>
#include <vector>

#include "multiprocess.hpp"

namespace sharc::testing {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kRanks = 4;
constexpr size_t kCount = size_t{1} << 16;  // 256 KiB of float32 per rank: several transfers

// A transport of the job: the fabric between one-rank "nodes", or sharc's shared memory; or
// the device path over the fabric (SHARC_DEVICE_PATH=host: the host device queue reduces and
// copies, each message staged through host memory since tcp has no FI_HMEM). Not libfabric's
// shm: it does not notice a dead peer, so which survivor times out first, and whom it names,
// is a race there (docs/faults.md).
struct Transport {
  const char* name;
  bool sharedMemory;
  bool devicePath = false;
};
void PrintTo(const Transport& t, std::ostream* os) {
  *os << t.name;
}
const Transport kTcp{"tcp", false};
const Transport kSharcShm{"sharc-shm", true};
const Transport kDeviceTcp{"device-path-tcp", false, true};

RunOptions faultOptions(const Transport& t, const std::string& fault, int timeoutMs) {
  RunOptions o;
  o.env["SHARC_FAULT"] = fault;
  o.env["SHARC_TIMEOUT_MS"] = std::to_string(timeoutMs);
  const char* debug = std::getenv("SHARC_DEBUG");  // quiet unless asked for
  o.env["SHARC_DEBUG"] = debug ? debug : "NONE";
  o.env["SHARC_CMA"] = "0";  // messages carry the data: the collectives have many transfers
  if (t.devicePath) {
    o.env["SHARC_DEVICE_PATH"] = "host";
    o.env["SHARC_FI_PROVIDER"] = "tcp;ofi_rxm";
    o.oneRankPerNode = true;
  } else if (t.sharedMemory) {
    o.env["SHARC_SHM"] = "1";
  } else {
    o.env["SHARC_FI_PROVIDER"] = "tcp;ofi_rxm";
    o.oneRankPerNode = true;
  }
  o.timeout = std::chrono::seconds(120);
  return o;
}

// Rank r's element j in call `call`: small multiples of 1/4, so float32 sums are exact.
float value(int rank, int call, size_t j) {
  return static_cast<float>(0.5 * (rank + 1) + call + 0.25 * static_cast<double>(j % 97));
}

// All-reduce number `call` (sum of value() over the ranks), checked element by element
// against the float64 sum. Throws what the call throws.
void checkedAllReduce(Communicator& comm, int call) {
  std::vector<float> send(kCount), recv(kCount, -1.0f);
  for (size_t j = 0; j < kCount; ++j) send[j] = value(comm.rank(), call, j);
  comm.allReduce(send.data(), recv.data(), kCount, DataType::Float32, RedOp::Sum);
  size_t wrong = 0;
  for (size_t j = 0; j < kCount; ++j) {
    double expected = 0.0;
    for (int r = 0; r < comm.size(); ++r) expected += static_cast<double>(value(r, call, j));
    if (static_cast<double>(recv[j]) != expected && wrong++ < 3)
      ADD_FAILURE() << "rank " << comm.rank() << ": call " << call << ": element " << j << " is "
                    << recv[j] << ", expected " << expected;
  }
}

// Runs calls 1, 2, ... until one throws: calls before `faultCall` must succeed, and one of
// the next `slack` calls must fail (a rank that needs nothing from the faulty one may finish
// the faulty call; it fails at the next). Returns that error and the time from the start of
// call `faultCall` to it.
Error failingCall(Communicator& comm, int faultCall, Clock::duration& took, int slack = 3) {
  // A rank still finishing the call before the fault (its last message in flight) may hear
  // the faulty rank's abort notice first: that call may fail too.
  for (int call = 1; call < faultCall - 1; ++call) checkedAllReduce(comm, call);
  const auto start = Clock::now();
  for (int call = std::max(1, faultCall - 1); call <= faultCall + slack; ++call) {
    try {
      checkedAllReduce(comm, call);
    } catch (const Error& e) {
      took = Clock::now() - start;
      return e;
    }
  }
  throw std::runtime_error("calls " + std::to_string(faultCall) + ".." +
                           std::to_string(faultCall + slack) + " succeeded despite the fault");
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// sharc's segments in /dev/shm (other jobs on the machine may come and go meanwhile).
std::set<std::string> devShmEntries() {
  std::set<std::string> names;
  if (DIR* d = opendir("/dev/shm")) {
    while (const dirent* e = readdir(d))
      if (std::string(e->d_name).rfind("sharc-", 0) == 0) names.insert(e->d_name);
    closedir(d);
  }
  return names;
}

class FaultInjection : public ::testing::TestWithParam<Transport> {};

// Rank 1 dies at the start of call 3, or after two of its transfers in it: the survivors fail
// with an error naming peer 1 within their timeout (5 s) plus 2 s (shared memory notices the
// death at once; tcp only at the timeout), and /dev/shm keeps nothing.
TEST_P(FaultInjection, KilledRankFailsTheSurvivorsNamingIt) {
  for (const char* fault : {"kill:rank=1,seq=3", "kill:rank=1,seq=3,after=2"}) {
    SCOPED_TRACE(fault);
    const std::set<std::string> before = devShmEntries();
    RunOptions o = faultOptions(GetParam(), fault, 5000);
    o.mayFail = {1};
    runRanks(
        kRanks,
        [](const RankContext& ctx) {
          auto comm = Communicator::createFromEnvironment();
          Clock::duration took{};
          const Error e = failingCall(*comm, 3, took);
          if (ctx.rank == 1)
            throw std::runtime_error("rank 1 survived its kill: " + std::string(e.what()));
          EXPECT_TRUE(contains(e.what(), "peer 1") || contains(e.what(), "rank 1")) << e.what();
          EXPECT_LT(seconds(took), 5.0 + 2.0) << e.what();
        },
        o);
    std::vector<std::string> left;
    for (const std::string& name : devShmEntries())
      if (!before.count(name)) left.push_back(name);
    EXPECT_TRUE(left.empty()) << "left in /dev/shm: " << ::testing::PrintToString(left);
  }
}

// Rank 1 stops (SIGSTOP) in call 3: nothing tells the others, who fail at their timeout
// (3 s) plus at most 2 s. Rank 0 then kills the stopped rank.
TEST_P(FaultInjection, StoppedRankTimesTheSurvivorsOut) {
  RunOptions o = faultOptions(GetParam(), "stop:rank=1,seq=3,after=1", 3000);
  o.mayFail = {1};
  runRanks(
      kRanks,
      [](const RankContext& ctx) {
        auto comm = Communicator::createFromEnvironment();
        std::vector<int32_t> pids(kRanks);
        const int32_t mine = getpid();
        comm->allGather(&mine, pids.data(), 1, DataType::Int32);  // call 1
        Clock::duration took{};
        const Error e = failingCall(*comm, 2, took);  // all-reduce 2 is collective #3
        if (ctx.rank == 1)
          throw std::runtime_error("rank 1 was not stopped: " + std::string(e.what()));
        EXPECT_TRUE(e.code() == Result::Timeout || e.code() == Result::RemoteError) << e.what();
        EXPECT_TRUE(contains(e.what(), "timed out")) << e.what();  // its own or a peer's
        EXPECT_LT(seconds(took), 3.0 + 2.0) << e.what();
        if (ctx.rank == 0) {
          std::this_thread::sleep_for(std::chrono::seconds(2));  // the others have failed too
          kill(pids[1], SIGKILL);
        }
      },
      o);
}

// Rank 1's second transfer completion of call 3 is reported as failed: its call fails with
// the injected message, the others through its abort notice, well before their timeout.
TEST_P(FaultInjection, FailedCompletionFailsEveryRankFast) {
  runRanks(
      kRanks,
      [](const RankContext& ctx) {
        auto comm = Communicator::createFromEnvironment();
        Clock::duration took{};
        const Error e = failingCall(*comm, 3, took);
        if (ctx.rank == 1) {
          EXPECT_EQ(e.code(), Result::SystemError) << e.what();
          EXPECT_TRUE(contains(e.what(),
                               "completion error injected by SHARC_FAULT (rule "
                               "'fail:rank=1,seq=3,after=1' at collective #3"))
              << e.what();
        } else {
          // Through rank 1's abort notice, or, when a rank that failed through it has already
          // gone, through the broken connection to that rank: either way at once.
          EXPECT_TRUE(e.code() == Result::RemoteError || e.code() == Result::SystemError)
              << e.what();
          EXPECT_TRUE(contains(e.what(), "rank 1 aborted the communicator") ||
                      contains(e.what(), "failed"))
              << e.what();
        }
        EXPECT_LT(seconds(took), 5.0) << e.what();  // the timeout is 60 s
        // The communicator stays failed.
        EXPECT_THROW(comm->barrier(), Error);
      },
      faultOptions(GetParam(), "fail:rank=1,seq=3,after=1", 60000));
}

// Rank 2's sends wait 150 ms each in calls 2 and 3 (rank 0's 5 ms in every call): every
// result is still exact, and calls 2 and 3 take at least 150 ms on every rank (each rank
// needs data that passes through rank 2).
TEST_P(FaultInjection, DelayedSendsKeepResultsCorrect) {
  runRanks(
      kRanks,
      [](const RankContext& ctx) {
        auto comm = Communicator::createFromEnvironment();
        for (int call = 1; call <= 4; ++call) {
          const auto start = Clock::now();
          checkedAllReduce(*comm, call);
          const double took = seconds(Clock::now() - start);
          if (call == 2 || call == 3) {
            EXPECT_GE(took, 0.150) << "rank " << ctx.rank << ": call " << call;
          }
        }
      },
      faultOptions(GetParam(), "delay:rank=2,ms=150,seq=2-3;delay:rank=0,ms=5", 60000));
}

// Rank 2's endpoint goes away after its first transfer of call 3: its call fails saying so,
// and, with no abort notice getting through, every other rank fails within its timeout
// (3 s) plus 2 s. Rank 2 stays alive meanwhile, as a host whose NIC died would.
TEST_P(FaultInjection, DroppedEndpointFailsEveryRankWithinTheTimeout) {
  runRanks(
      kRanks,
      [](const RankContext& ctx) {
        auto comm = Communicator::createFromEnvironment();
        Clock::duration took{};
        const Error e = failingCall(*comm, 3, took);
        // Within the timeout plus 2 s of the call that met the dropped rank.
        EXPECT_LT(seconds(took), 3.0 + 2.0) << e.what();
        if (ctx.rank == 2) {
          EXPECT_TRUE(contains(e.what(),
                               "endpoint dropped by SHARC_FAULT (rule "
                               "'drop:rank=2,seq=3,after=1'"))
              << e.what();
          std::this_thread::sleep_for(std::chrono::seconds(6));
        } else {
          EXPECT_TRUE(e.code() == Result::Timeout || e.code() == Result::RemoteError) << e.what();
        }
      },
      faultOptions(GetParam(), "drop:rank=2,seq=3,after=1", 3000));
}

INSTANTIATE_TEST_SUITE_P(Transports, FaultInjection, ::testing::Values(kTcp, kSharcShm, kDeviceTcp),
                         [](const auto& info) {
                           return std::string(info.param.devicePath     ? "device_path_tcp"
                                              : info.param.sharedMemory ? "sharc_shm"
                                                                        : "tcp");
                         });

// A malformed SHARC_FAULT fails every rank's creation, naming the variable and the rule.
TEST(FaultInjectionConfig, MalformedPlanFailsCreation) {
  RunOptions o;
  o.env["SHARC_FAULT"] = "kill:rank=1";
  o.env["SHARC_DEBUG"] = "NONE";
  o.env["SHARC_TIMEOUT_MS"] = "20000";
  o.timeout = std::chrono::seconds(60);
  runRanks(
      2,
      [](const RankContext& ctx) {
        try {
          auto comm = Communicator::createFromEnvironment();
          ADD_FAILURE() << "created a communicator despite SHARC_FAULT='kill:rank=1'";
        } catch (const Error& e) {
          // Rank 0 serves the rendezvous: it stays a moment, so that rank 1 gets that far too.
          if (ctx.rank == 0) std::this_thread::sleep_for(std::chrono::seconds(3));
          EXPECT_EQ(e.code(), Result::InvalidArgument);
          EXPECT_TRUE(contains(e.what(),
                               "SHARC_FAULT rule 'kill:rank=1' is malformed: seq= is "
                               "missing"))
              << e.what();
        }
      },
      o);
}

}  // namespace
}  // namespace sharc::testing

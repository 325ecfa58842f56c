// The C API: unique id from the parent process, collectives, errors as result codes, abort.
#include <gtest/gtest.h>
#include <sharc/sharc.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "multiprocess.hpp"

namespace sharc::testing {
namespace {

TEST(CApi, UniqueIdJobRunsCollectivesAndReportsErrors) {
  RunOptions o;
  o.rendezvous = Rendezvous::UniqueIdFromParent;
  o.env["SHARC_FI_PROVIDER"] = "tcp;ofi_rxm";
  o.env["SHARC_TIMEOUT_MS"] = "20000";
  runRanks(
      3,
      [](const RankContext& ctx) {
        sharcUniqueId id;
        std::memcpy(id.internal, ctx.uniqueId.data(), sizeof(id.internal));
        sharcComm_t comm = nullptr;
        ASSERT_EQ(sharcCommInitRank(&comm, ctx.size, id, ctx.rank), sharcSuccess)
            << sharcGetLastError(nullptr);
        int n = 0, r = -1;
        ASSERT_EQ(sharcCommCount(comm, &n), sharcSuccess);
        ASSERT_EQ(sharcCommUserRank(comm, &r), sharcSuccess);
        EXPECT_EQ(n, ctx.size);
        EXPECT_EQ(r, ctx.rank);

        std::vector<float> mine(10, static_cast<float>(ctx.rank)), all(30);
        ASSERT_EQ(sharcAllGather(mine.data(), all.data(), 10, sharcFloat32, comm), sharcSuccess);
        for (int k = 0; k < 30; ++k) EXPECT_EQ(all[k], static_cast<float>(k / 10));
        std::vector<double> in(6, 1.5), out(2);
        ASSERT_EQ(sharcReduceScatter(in.data(), out.data(), 2, sharcFloat64, sharcSum, comm),
                  sharcSuccess);
        EXPECT_EQ(out[0], 4.5);
        int64_t v = ctx.rank + 1, maxv = 0;
        ASSERT_EQ(sharcAllReduce(&v, &maxv, 1, sharcInt64, sharcMax, comm), sharcSuccess);
        EXPECT_EQ(maxv, 3);

        // Errors come back as codes with a message naming the call; nothing is thrown.
        EXPECT_EQ(sharcAllGather(nullptr, all.data(), 10, sharcFloat32, comm),
                  sharcInvalidArgument);
        EXPECT_NE(std::string(sharcGetLastError(comm)).find("AllGather"), std::string::npos);
        EXPECT_EQ(sharcAllReduce(&v, &maxv, 1, static_cast<sharcDataType_t>(77), sharcSum, comm),
                  sharcInvalidArgument);

        sharcComm_t half = nullptr;
        ASSERT_EQ(sharcCommSplit(comm, ctx.rank == 0 ? SHARC_SPLIT_NOCOLOR : 1, 0, &half),
                  sharcSuccess);
        EXPECT_EQ(half == nullptr, ctx.rank == 0);
        if (half) {
          int hn = 0;
          sharcCommCount(half, &hn);
          EXPECT_EQ(hn, 2);
          EXPECT_EQ(sharcBarrier(half), sharcSuccess);
          EXPECT_EQ(sharcCommDestroy(half), sharcSuccess);
        }
        EXPECT_EQ(sharcCommDestroy(comm), sharcSuccess);
        EXPECT_EQ(sharcBarrier(comm), sharcInvalidUsage);  // used after destroy
        EXPECT_EQ(sharcCommDestroy(comm), sharcInvalidUsage);
        EXPECT_STREQ(sharcGetErrorString(sharcTimeout), "timeout");
      },
      o);
}

// The misuse cases through the C API on 4 ranks with a 10 s timeout: rank 0 calls
// sharcAllReduce where the others call sharcAllGather; a rank skips the last call; ranks
// disagree on a Broadcast's root. Each fails on every rank within the stall probe's threshold
// (1 s here) plus a second, naming the sequence number, and sharcCommDumpTrace writes each
// rank's flight record.
TEST(CApi, MisuseFailsEveryRankFastAndTheRecordIsWritten) {
  for (const char* misuse : {"other", "skip", "root"}) {
    RunOptions o;
    o.env["SHARC_FI_PROVIDER"] = "tcp;ofi_rxm";
    o.env["SHARC_TIMEOUT_MS"] = "10000";
    o.env["SHARC_STALL_PROBE_MS"] = "1000";
    o.env["SHARC_DEBUG"] = "NONE";
    const std::string dir = "/tmp/sharc-capi-trace-" + std::to_string(getpid()) + "-" + misuse;
    runRanks(
        4,
        [&](const RankContext& ctx) {
          sharcComm_t comm = nullptr;
          ASSERT_EQ(sharcCommInitFromEnv(&comm), sharcSuccess) << sharcGetLastError(nullptr);
          std::vector<float> in(100, 1.0f), out(400);
          // Calls #1-#3 agree. A rank still finishing #3 may get the notice of a rank that
          // failed #4 already (the notice is not ordered with data): that counts as failing.
          sharcResult_t res = sharcSuccess;
          for (int i = 0; i < 3 && res == sharcSuccess; ++i)
            res = sharcAllGather(in.data(), out.data(), 100, sharcFloat32, comm);
          const auto start = std::chrono::steady_clock::now();
          const std::string which = misuse;
          if (res != sharcSuccess) {
            // failed through the notice already
          } else if (which == "other") {
            res = ctx.rank == 0
                      ? sharcAllReduce(in.data(), out.data(), 100, sharcFloat32, sharcSum, comm)
                      : sharcAllGather(in.data(), out.data(), 100, sharcFloat32, comm);
          } else if (which == "skip") {
            res = ctx.rank == 3 ? sharcBarrier(comm)  // skipped the all-gather: its next call
                                : sharcAllGather(in.data(), out.data(), 100, sharcFloat32, comm);
          } else {
            res = sharcBroadcast(in.data(), out.data(), 100, sharcFloat32, ctx.rank == 2 ? 1 : 0,
                                 comm);
          }
          const double took =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          EXPECT_NE(res, sharcSuccess) << misuse << ": rank " << ctx.rank << " succeeded";
          const std::string message = sharcGetLastError(comm);
          EXPECT_NE(message.find(" #4"), std::string::npos) << message;
          EXPECT_LT(took, 2.0) << misuse << ": " << message;
          EXPECT_EQ(sharcCommDumpTrace(comm, dir.c_str()), sharcSuccess) << sharcGetLastError(comm);
          EXPECT_EQ(sharcCommDumpTrace(nullptr, dir.c_str()), sharcInvalidUsage);
          EXPECT_EQ(sharcCommDestroy(comm), sharcSuccess);
        },
        o);
    int files = 0;
    for (int r = 0; r < 4; ++r)
      for (const auto& name : {std::string("rank") + std::to_string(r) + ".json"}) {
        const std::string cmd = "ls " + dir + "/*" + name + " >/dev/null 2>&1";
        files += std::system(cmd.c_str()) == 0 ? 1 : 0;
      }
    EXPECT_EQ(files, 4) << misuse << ": records in " << dir;
    std::system(("rm -rf " + dir).c_str());
  }
}

// sharcCommAbort from another thread while a thread is blocked in sharcAllReduce (rank 2 has
// not joined it): that call returns an error naming the abort within a second, rank 1's
// all-reduce fails through the notice, rank 2's late call fails, and sharcCommDestroy, called
// right after the abort while the blocked call may still be inside, frees the handle safely.
TEST(CApi, AbortFromAnotherThreadUnblocksCallsHereAndOnPeers) {
  using Clock = std::chrono::steady_clock;
  RunOptions o;
  o.rendezvous = Rendezvous::UniqueIdFromParent;
  o.env["SHARC_FI_PROVIDER"] = "tcp;ofi_rxm";
  o.env["SHARC_TIMEOUT_MS"] = "20000";
  o.env["SHARC_DEBUG"] = "NONE";
  o.timeout = std::chrono::seconds(90);
  runRanks(
      3,
      [](const RankContext& ctx) {
        sharcUniqueId id;
        std::memcpy(id.internal, ctx.uniqueId.data(), sizeof(id.internal));
        sharcComm_t comm = nullptr;
        ASSERT_EQ(sharcCommInitRank(&comm, ctx.size, id, ctx.rank), sharcSuccess)
            << sharcGetLastError(nullptr);
        EXPECT_EQ(sharcCommAbort(nullptr), sharcInvalidUsage);
        EXPECT_NE(std::string(sharcGetLastError(nullptr)).find("sharcCommAbort"),
                  std::string::npos);
        std::vector<float> buf(1 << 16, 1.0f);
        auto allReduce = [&] {
          return sharcAllReduce(buf.data(), buf.data(), buf.size(), sharcFloat32, sharcSum, comm);
        };
        if (ctx.rank == 0) {
          sharcResult_t blocked = sharcSuccess;
          std::string message;
          Clock::time_point returned;
          std::atomic<bool> calling{false};
          std::thread caller([&] {
            calling = true;
            blocked = allReduce();
            returned = Clock::now();
            message = sharcGetLastError(comm);  // per thread: this thread's failure
          });
          while (!calling) std::this_thread::yield();
          std::this_thread::sleep_for(std::chrono::milliseconds(200));  // it is in its wait
          const auto aborted = Clock::now();
          EXPECT_EQ(sharcCommAbort(comm), sharcSuccess);
          EXPECT_EQ(sharcCommAbort(comm), sharcSuccess);    // twice is harmless
          EXPECT_NE(allReduce(), sharcSuccess);             // later calls fail at once
          EXPECT_EQ(sharcCommDestroy(comm), sharcSuccess);  // the caller may still be inside
          EXPECT_LT(Clock::now() - aborted, std::chrono::seconds(2));
          caller.join();
          EXPECT_NE(blocked, sharcSuccess);
          EXPECT_NE(message.find("sharcCommAbort"), std::string::npos) << message;
          EXPECT_LT(returned - aborted, std::chrono::seconds(1));
          EXPECT_EQ(sharcCommAbort(comm), sharcInvalidUsage);  // destroyed
          return;
        }
        if (ctx.rank == 2) std::this_thread::sleep_for(std::chrono::seconds(1));  // late
        const auto start = Clock::now();
        EXPECT_EQ(allReduce(), sharcRemoteError);
        const std::string message = sharcGetLastError(comm);
        EXPECT_NE(message.find("rank 0"), std::string::npos) << message;
        EXPECT_NE(message.find("sharcCommAbort"), std::string::npos) << message;
        EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));  // well under the 20 s
        EXPECT_NE(sharcBarrier(comm), sharcSuccess);
        const auto destroyStart = Clock::now();
        EXPECT_EQ(sharcCommDestroy(comm), sharcSuccess);  // no closing barrier after a failure
        EXPECT_LT(Clock::now() - destroyStart, std::chrono::seconds(2));
      },
      o);
}

}  // namespace
}  // namespace sharc::testing

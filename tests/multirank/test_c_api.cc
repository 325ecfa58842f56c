// The C API: unique id from the parent process, collectives, errors as result codes.
#include <gtest/gtest.h>
#include <sharc/sharc.h>

#include <cstring>
#include <string>
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
        EXPECT_NE(std::string(sharcGetLastError(comm)).find("allGather"), std::string::npos);
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

}  // namespace
}  // namespace sharc::testing

// Sub-communicators from split: membership, ordering by key, nesting, and many of them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <sharc/communicator.hpp>
#include <vector>

#include "collective_check.hpp"
#include "multiprocess.hpp"

namespace sharc::testing {
namespace {

RunOptions opts() {
  RunOptions o;
  o.env["SHARC_FI_PROVIDER"] = "tcp;ofi_rxm";
  o.env["SHARC_TIMEOUT_MS"] = "30000";
  return o;
}

TEST(Split, ColorsFormGroupsOrderedByKey) {
  runRanks(
      7,
      [](const RankContext& ctx) {
        auto world = Communicator::createFromEnvironment();
        const int color = ctx.rank % 3;
        auto sub = world->split(color, -ctx.rank);  // reversed order inside each group
        ASSERT_TRUE(sub);
        std::vector<int> members;
        for (int r = ctx.size - 1; r >= 0; --r)
          if (r % 3 == color) members.push_back(r);
        ASSERT_EQ(sub->size(), static_cast<int>(members.size()));
        EXPECT_EQ(members[sub->rank()], ctx.rank);
        // Gather world ranks inside the group: they must come in key order.
        int32_t mine = ctx.rank;
        std::vector<int32_t> got(members.size());
        sub->allGather(&mine, got.data(), 1, DataType::Int32);
        for (size_t i = 0; i < members.size(); ++i) EXPECT_EQ(got[i], members[i]);
        // Full checks inside the group, and the world still works alongside it.
        EXPECT_EQ(runAndCheck(*sub, Coll::ReduceScatter, DataType::Float32, RedOp::Sum, 33, false),
                  "");
        EXPECT_EQ(runAndCheck(*sub, Coll::AllReduce, DataType::BFloat16, RedOp::Avg, 1000, true),
                  "");
        EXPECT_EQ(runAndCheck(*world, Coll::AllGather, DataType::Int8, RedOp::Sum, 9, false), "");
      },
      opts());
}

TEST(Split, NegativeColorJoinsNothingAndNestingWorks) {
  runRanks(
      6,
      [](const RankContext& ctx) {
        auto world = Communicator::createFromEnvironment();
        auto evens = world->split(ctx.rank % 2 == 0 ? 0 : -1, ctx.rank);
        if (ctx.rank % 2 == 1) {
          EXPECT_EQ(evens, nullptr);
          world->barrier();
          return;
        }
        ASSERT_TRUE(evens);
        EXPECT_EQ(evens->size(), 3);
        auto pair = evens->split(evens->rank() / 2, 0);  // {0,2} and {4}
        EXPECT_EQ(pair->size(), evens->rank() < 2 ? 2 : 1);
        EXPECT_EQ(runAndCheck(*pair, Coll::AllReduce, DataType::Int64, RedOp::Max, 17, false), "");
        EXPECT_EQ(runAndCheck(*evens, Coll::AllGather, DataType::Float64, RedOp::Sum, 5, false),
                  "");
        world->barrier();
      },
      opts());
}

TEST(Split, ManyShortLivedGroupsAreCheap) {
  runRanks(
      4,
      [](const RankContext& ctx) {
        auto world = Communicator::createFromEnvironment();
        for (int i = 0; i < 300; ++i) {  // more than fit at once would leak ids if not recycled
          auto sub = world->split((ctx.rank + i) % 2, ctx.rank);
          int32_t one = 1, total = 0;
          sub->allReduce(&one, &total, 1, DataType::Int32, RedOp::Sum);
          ASSERT_EQ(total, 2);
        }
        std::vector<std::shared_ptr<Communicator>> alive;
        for (int i = 0; i < 50; ++i)
          alive.push_back(world->split(0, ctx.rank));  // all alive at once
        for (auto& c : alive) c->barrier();
      },
      opts());
}

// Launchers other than SHARC_*: torchrun's variables, and Open MPI's rank/size with a root.
TEST(Launch, TorchrunAndOpenMpiEnvironments) {
  for (int style = 0; style < 2; ++style) {
    RunOptions o = opts();
    runRanks(
        3,
        [style](const RankContext& ctx) {
          const std::string root = std::getenv("SHARC_ROOT");
          const std::string host = root.substr(0, root.find(':'));
          const std::string port = root.substr(root.find(':') + 1);
          for (const char* v : {"SHARC_ROOT", "SHARC_RANK", "SHARC_WORLD_SIZE"}) unsetenv(v);
          setenv("MASTER_ADDR", host.c_str(), 1);
          setenv("MASTER_PORT", port.c_str(), 1);
          const std::string rank = std::to_string(ctx.rank), size = std::to_string(ctx.size);
          setenv(style == 0 ? "RANK" : "OMPI_COMM_WORLD_RANK", rank.c_str(), 1);
          setenv(style == 0 ? "WORLD_SIZE" : "OMPI_COMM_WORLD_SIZE", size.c_str(), 1);
          auto comm = Communicator::createFromEnvironment();
          EXPECT_EQ(comm->rank(), ctx.rank);
          EXPECT_EQ(comm->size(), ctx.size);
          EXPECT_EQ(runAndCheck(*comm, Coll::AllReduce, DataType::Int32, RedOp::Sum, 11, false),
                    "");
        },
        o);
  }
}

}  // namespace
}  // namespace sharc::testing

// Members-only sub-communicators (Communicator::subgroup) over real processes, created through
// an exchange over the parent's point-to-point calls: member order, many short-lived ones, and
// the errors of invalid member lists and exchanges.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <sharc/communicator.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "collective_check.hpp"
#include "multiprocess.hpp"
#include "p2p_check.hpp"

namespace sharc::testing {
namespace {

// An exchange among `members` (ranks of `parent`) over the parent's point-to-point calls:
// lengths first, then the blobs. Only the members take part.
ExchangeFn p2pExchange(Communicator& parent, std::vector<int> members, uint32_t tag,
                       std::shared_ptr<int> calls = nullptr) {
  return [&parent, members, tag, calls](const std::string& blob) {
    if (calls) ++*calls;
    const int me = parent.rank();
    const size_t m = members.size();
    uint64_t myLength = blob.size();
    std::vector<uint64_t> lengths(m, 0);
    std::vector<sharc::PointToPoint> ops;
    for (size_t i = 0; i < m; ++i) {
      if (members[i] == me) {
        lengths[i] = myLength;
        continue;
      }
      ops.push_back(
          {sharc::PointToPoint::Kind::Send, members[i], &myLength, sizeof(uint64_t), tag});
      ops.push_back(
          {sharc::PointToPoint::Kind::Recv, members[i], &lengths[i], sizeof(uint64_t), tag});
    }
    parent.igroup(ops).wait();
    std::vector<std::string> all(m);
    ops.clear();
    for (size_t i = 0; i < m; ++i) {
      if (members[i] == me) {
        all[i] = blob;
        continue;
      }
      all[i].assign(lengths[i], '\0');
      ops.push_back({sharc::PointToPoint::Kind::Send, members[i], const_cast<char*>(blob.data()),
                     blob.size(), tag});
      ops.push_back({sharc::PointToPoint::Kind::Recv, members[i], all[i].data(), lengths[i], tag});
    }
    parent.igroup(ops).wait();
    return all;
  };
}

TEST(Subgroup, MembersOnlyGroupsInGivenOrder) {
  runRanks(
      4,
      [](const RankContext& ctx) {
        auto world = Communicator::createFromEnvironment();
        const int r = world->rank();
        const std::vector<int> members =
            (r == 1 || r == 3) ? std::vector<int>{3, 1} : std::vector<int>{0, 2};
        auto calls = std::make_shared<int>(0);
        auto sub = world->subgroup(members, p2pExchange(*world, members, 77, calls));
        ASSERT_TRUE(sub);
        EXPECT_GE(*calls, 1);
        ASSERT_EQ(sub->size(), 2);
        EXPECT_EQ(sub->rank(), r == members[0] ? 0 : 1);
        EXPECT_EQ(members[sub->rank()], ctx.rank);

        int32_t mine = r, sum = 0;
        sub->allReduce(&mine, &sum, 1, DataType::Int32, RedOp::Sum);
        EXPECT_EQ(sum, members[0] + members[1]);
        std::vector<int32_t> gathered(2, -1);
        sub->allGather(&mine, gathered.data(), 1, DataType::Int32);
        EXPECT_EQ(gathered, (std::vector<int32_t>{members[0], members[1]}));
        EXPECT_EQ(runAndCheck(*sub, Coll::AllReduce, DataType::Float32, RedOp::Sum, 1001, false),
                  "");
        EXPECT_EQ(runAndCheck(*sub, Coll::AllGather, DataType::Int64, RedOp::Sum, 77, false), "");
        // Point-to-point inside the subgroup, in its own ranks.
        const int peer = 1 - sub->rank();
        const auto out = message(r, members[peer], 4, 999);
        std::vector<uint8_t> in(999);
        sub->igroup(
               {{sharc::PointToPoint::Kind::Send, peer, const_cast<uint8_t*>(out.data()), 999, 4},
                {sharc::PointToPoint::Kind::Recv, peer, in.data(), 999, 4}})
            .wait();
        EXPECT_EQ(checkMessage(in, members[peer], r, 4, 999), "");

        // The parent still works, alongside the live subgroup and after it is gone.
        EXPECT_EQ(runAndCheck(*world, Coll::AllReduce, DataType::Int32, RedOp::Sum, 33, false), "");
        sub->destroy();
        sub.reset();
        EXPECT_EQ(runAndCheck(*world, Coll::AllGather, DataType::Float32, RedOp::Sum, 17, false),
                  "");
        // A subgroup of all four ranks, reversed.
        const std::vector<int> all{3, 2, 1, 0};
        auto rev = world->subgroup(all, p2pExchange(*world, all, 78));
        EXPECT_EQ(rev->size(), 4);
        EXPECT_EQ(rev->rank(), 3 - r);
        std::vector<int32_t> order(4, -1);
        rev->allGather(&mine, order.data(), 1, DataType::Int32);
        EXPECT_EQ(order, (std::vector<int32_t>{3, 2, 1, 0}));
        world->barrier();
      },
      tcpOptions());
}

TEST(Subgroup, ManyShortLivedSubgroupsAreCheap) {
  runRanks(
      4,
      [](const RankContext&) {
        auto world = Communicator::createFromEnvironment();
        const int r = world->rank();
        for (int i = 0; i < 50; ++i) {
          // Alternating pairings, and now and then all four ranks.
          std::vector<int> members;
          switch (i % 3) {
            case 0: members = (r % 2) ? std::vector<int>{3, 1} : std::vector<int>{0, 2}; break;
            case 1: members = (r < 2) ? std::vector<int>{1, 0} : std::vector<int>{2, 3}; break;
            default: members = {2, 0, 3, 1}; break;
          }
          auto sub = world->subgroup(members, p2pExchange(*world, members, 200));
          ASSERT_EQ(sub->size(), static_cast<int>(members.size()));
          int32_t mine = r, sum = 0;
          sub->allReduce(&mine, &sum, 1, DataType::Int32, RedOp::Sum);
          int32_t want = 0;
          for (int m : members) want += m;
          ASSERT_EQ(sum, want) << "iteration " << i;
          if (i % 2) sub->destroy();  // explicit, or through the destructor
        }
        int32_t one = 1, total = 0;
        world->allReduce(&one, &total, 1, DataType::Int32, RedOp::Sum);
        EXPECT_EQ(total, 4);
      },
      tcpOptions());
}

TEST(Subgroup, InvalidMembersAreRejected) {
  runRanks(
      4,
      [](const RankContext&) {
        auto world = Communicator::createFromEnvironment();
        const int r = world->rank();
        auto calls = std::make_shared<int>(0);
        const int other = (r + 1) % 4, third = (r + 2) % 4;
        const std::vector<std::vector<int>> bad = {
            {other, third},     // without this rank
            {r, other, r},      // this rank repeated
            {r, other, other},  // another rank repeated
            {r, 4},             // out of range
            {-1, r},
            {},
        };
        for (const auto& members : bad) {
          const auto [code, what] = errorOf([&] {
            world->subgroup(members, [calls](const std::string&) -> std::vector<std::string> {
              ++*calls;
              throw std::runtime_error("the exchange must not be called");
            });
          });
          EXPECT_EQ(code, Result::InvalidArgument)
              << ::testing::PrintToString(members) << ": " << what;
          EXPECT_TRUE(contains(what, "subgroup")) << what;
          EXPECT_TRUE(contains(what, "rank " + std::to_string(r))) << what;
        }
        EXPECT_EQ(*calls, 0);

        // Members that disagree on the order get an error on each side (through a real
        // exchange: the two lists hold the same ranks).
        if (r == 1 || r == 3) {
          const std::vector<int> members = r == 1 ? std::vector<int>{1, 3} : std::vector<int>{3, 1};
          const std::vector<int> sorted{1, 3};
          const auto [code, what] =
              errorOf([&] { world->subgroup(members, p2pExchange(*world, sorted, 300)); });
          EXPECT_EQ(code, Result::InvalidUsage) << what;
          EXPECT_TRUE(contains(what, "member list")) << what;
        }
        // An exchange returning the wrong number of blobs.
        {
          const std::vector<int> members{r, other};
          const auto [code, what] = errorOf([&] {
            world->subgroup(members,
                            [](const std::string& blob) { return std::vector<std::string>{blob}; });
          });
          EXPECT_EQ(code, Result::InvalidUsage) << what;
          EXPECT_TRUE(contains(what, "blobs")) << what;
        }
        // An exchange failing with its own exception: it reaches the caller.
        EXPECT_THROW(world->subgroup({r, other},
                                     [](const std::string&) -> std::vector<std::string> {
                                       throw std::runtime_error("store unreachable");
                                     }),
                     std::runtime_error);
        // The parent is untouched.
        int32_t one = 1, total = 0;
        world->allReduce(&one, &total, 1, DataType::Int32, RedOp::Sum);
        EXPECT_EQ(total, 4);
      },
      shortTimeout());
}

}  // namespace
}  // namespace sharc::testing

// Communicator::abort: pending and later operations fail at once on this rank and on its peers,
// from any thread, and failure() tells why the communicator failed.
#include <gtest/gtest.h>

#include <chrono>
#include <sharc/communicator.hpp>
#include <thread>
#include <vector>

#include "multiprocess.hpp"

namespace sharc::testing {
namespace {

using Clock = std::chrono::steady_clock;

RunOptions abortOptions() {
  RunOptions o;
  o.env["SHARC_FI_PROVIDER"] = "tcp;ofi_rxm";
  o.env["SHARC_TIMEOUT_MS"] = "20000";  // far above what any failure here may take
  o.env["SHARC_DEBUG"] = "NONE";
  o.timeout = std::chrono::seconds(60);
  return o;
}

// Rank 0 posts an all-reduce that rank 1 never joins, and aborts from another thread: the
// waiting thread gets the abort within a second, later calls fail, and rank 1 (waiting for a
// message rank 0 never sends) fails through the abort notice instead of at its timeout.
TEST(Abort, FromAnotherThreadFailsPendingAndLaterOperationsOnEveryRank) {
  runRanks(
      2,
      [](const RankContext& ctx) {
        auto comm = Communicator::createFromEnvironment();
        comm->barrier();
        EXPECT_EQ(comm->failure(), Result::Success);
        if (ctx.rank == 0) {
          std::vector<float> buf(1024, 1.0f);
          Request pending = comm->iallReduce(buf.data(), buf.data(), buf.size(),
                                             DataType::Float32, RedOp::Sum);
          std::thread aborter([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
            comm->abort("test abort");
          });
          const auto start = Clock::now();
          try {
            pending.wait();
            ADD_FAILURE() << "the pending all-reduce completed without its peer";
          } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("test abort"), std::string::npos) << e.what();
          }
          EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(1200));
          aborter.join();
          EXPECT_THROW(comm->barrier(), Error);
          std::string why;
          EXPECT_EQ(comm->failure(&why), Result::InvalidUsage);
          EXPECT_NE(why.find("test abort"), std::string::npos) << why;
          comm->abort("twice is harmless");
        } else {
          int32_t never = 0;
          const auto start = Clock::now();
          try {
            comm->irecv(&never, sizeof never, 0, 7).wait();
            ADD_FAILURE() << "rank 1 received a message rank 0 never sent";
          } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
          }
          EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
          std::string why;
          EXPECT_EQ(comm->failure(&why), Result::RemoteError);
          EXPECT_NE(why.find("test abort"), std::string::npos) << why;
        }
        const auto start = Clock::now();
        comm->destroy();  // no closing barrier after an abort
        EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
      },
      abortOptions());
}

// setTimeout bounds the operations started after it; a rank whose peer comes too late fails
// with Timeout, and the peer fails through the failing rank's notice.
TEST(Abort, SetTimeoutBoundsLaterOperations) {
  runRanks(
      2,
      [](const RankContext& ctx) {
        auto comm = Communicator::createFromEnvironment();
        EXPECT_THROW(comm->setTimeout(std::chrono::milliseconds(0)), Error);
        int32_t one = 1, sum = 0;
        comm->allReduce(&one, &sum, 1, DataType::Int32, RedOp::Sum);  // within the 20 s
        if (ctx.rank == 0) {
          comm->setTimeout(std::chrono::milliseconds(300));
          const auto start = Clock::now();
          try {
            comm->allReduce(&one, &sum, 1, DataType::Int32, RedOp::Sum);
            ADD_FAILURE() << "completed although rank 1 came 3 s late";
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), Result::Timeout) << e.what();
          }
          EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
          EXPECT_EQ(comm->failure(), Result::Timeout);
        } else {
          std::this_thread::sleep_for(std::chrono::seconds(3));
          EXPECT_THROW(comm->allReduce(&one, &sum, 1, DataType::Int32, RedOp::Sum), Error);
          EXPECT_EQ(comm->failure(), Result::RemoteError);
        }
      },
      abortOptions());
}

// Aborting a communicator leaves the others on the same endpoint (its parent) working.
TEST(Abort, OfASplitLeavesTheParentUsable) {
  runRanks(
      2,
      [](const RankContext&) {
        auto comm = Communicator::createFromEnvironment();
        auto child = comm->split(0, 0);
        child->abort("only the child");
        int32_t one = 1, sum = 0;
        EXPECT_THROW(child->allReduce(&one, &sum, 1, DataType::Int32, RedOp::Sum), Error);
        child->destroy();
        comm->allReduce(&one, &sum, 1, DataType::Int32, RedOp::Sum);
        EXPECT_EQ(sum, 2);
        EXPECT_EQ(comm->failure(), Result::Success);
      },
      abortOptions());
}

}  // namespace
}  // namespace sharc::testing

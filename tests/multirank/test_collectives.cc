// Every collective x type x op x count x in/out-of-place, over real processes and real
// libfabric providers, checked against the float64 reference.
#include <gtest/gtest.h>

#include <sharc/communicator.hpp>
#include <tuple>
#include <vector>

#include "collective_check.hpp"
#include "multiprocess.hpp"

namespace sharc::testing {
namespace {

const DataType kAllTypes[] = {
    DataType::Int8,   DataType::Uint8,   DataType::Int32,   DataType::Uint32,  DataType::Int64,
    DataType::Uint64, DataType::Float16, DataType::Float32, DataType::Float64, DataType::BFloat16};
const RedOp kAllOps[] = {RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min, RedOp::Avg};

// Transport, world size. "tcp;ofi_rxm": every rank acts as a separate host; "shm": one host,
// libfabric's shm provider carries everything; "sharc-shm": one host, sharc's own
// shared-memory transport carries everything.
using Param = std::tuple<std::string, int>;

class Collectives : public ::testing::TestWithParam<Param> {
 protected:
  RunOptions options() const {
    RunOptions o;
    const std::string& transport = std::get<0>(GetParam());
    o.env["SHARC_FI_PROVIDER"] = transport == "sharc-shm" ? "shm" : transport;
    o.env["SHARC_SHM"] = transport == "sharc-shm" ? "1" : "0";
    o.oneRankPerNode = transport == "tcp;ofi_rxm";
    o.env["SHARC_TIMEOUT_MS"] = "60000";
    return o;
  }
};

// Every type and op at counts 0, 1 and odd; the algorithm the selector picks for them.
TEST_P(Collectives, EveryTypeAndOpSmallCounts) {
  runRanks(
      std::get<1>(GetParam()),
      [](const RankContext&) {
        auto comm = Communicator::createFromEnvironment();
        for (size_t count : {size_t{0}, size_t{1}, size_t{37}}) {
          for (DataType t : kAllTypes) {
            for (bool inPlace : {false, true}) {
              EXPECT_EQ(runAndCheck(*comm, Coll::AllGather, t, RedOp::Sum, count, inPlace), "");
              EXPECT_EQ(runAndCheck(*comm, Coll::Broadcast, t, RedOp::Sum, count, inPlace,
                                    comm->size() - 1),
                        "");
              for (RedOp op : kAllOps) {
                EXPECT_EQ(runAndCheck(*comm, Coll::ReduceScatter, t, op, count, inPlace), "");
                EXPECT_EQ(runAndCheck(*comm, Coll::AllReduce, t, op, count, inPlace), "");
              }
            }
          }
        }
      },
      options());
}

// ~1M elements: the pipelined ring with several chunks per block.
TEST_P(Collectives, LargeCounts) {
  runRanks(
      std::get<1>(GetParam()),
      [](const RankContext&) {
        auto comm = Communicator::createFromEnvironment();
        const size_t large = (size_t{1} << 20) / comm->size() + 3;  // odd, uneven AllReduce blocks
        for (bool inPlace : {false, true}) {
          EXPECT_EQ(
              runAndCheck(*comm, Coll::AllGather, DataType::Float32, RedOp::Sum, large, inPlace),
              "");
          EXPECT_EQ(runAndCheck(*comm, Coll::ReduceScatter, DataType::Float32, RedOp::Sum, large,
                                inPlace),
                    "");
          EXPECT_EQ(runAndCheck(*comm, Coll::ReduceScatter, DataType::BFloat16, RedOp::Avg, large,
                                inPlace),
                    "");
          EXPECT_EQ(runAndCheck(*comm, Coll::AllReduce, DataType::Float32, RedOp::Sum,
                                large * 2 + 1, inPlace),
                    "");
          EXPECT_EQ(
              runAndCheck(*comm, Coll::AllReduce, DataType::Int64, RedOp::Max, large, inPlace), "");
        }
        comm->barrier();
      },
      options());
}

INSTANTIATE_TEST_SUITE_P(Providers, Collectives,
                         ::testing::Combine(::testing::Values("tcp;ofi_rxm", "shm", "sharc-shm"),
                                            ::testing::Values(1, 2, 3, 4, 7, 8)),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           const std::string& t = std::get<0>(info.param);
                           std::string p = t == "tcp;ofi_rxm" ? "tcp"
                                           : t == "shm"       ? "shm"
                                                              : "sharcshm";
                           return p + "_" + std::to_string(std::get<1>(info.param)) + "ranks";
                         });

// Each algorithm forced by SHARC_ALGO, with tiny chunks so the ring pipelines many of them.
using AlgoParam = std::tuple<std::string, int>;  // algorithm, world size
class ForcedAlgorithm : public ::testing::TestWithParam<AlgoParam> {};

TEST_P(ForcedAlgorithm, MatchesReference) {
  RunOptions o;
  o.env["SHARC_FI_PROVIDER"] = "tcp;ofi_rxm";
  o.env["SHARC_ALGO"] = std::get<0>(GetParam());
  o.env["SHARC_CHUNK_BYTES"] = "4096";
  runRanks(
      std::get<1>(GetParam()),
      [](const RankContext&) {
        auto comm = Communicator::createFromEnvironment();
        for (size_t count : {size_t{1}, size_t{5}, size_t{3001}}) {
          for (DataType t :
               {DataType::Float32, DataType::BFloat16, DataType::Int8, DataType::Float64}) {
            for (bool inPlace : {false, true}) {
              EXPECT_EQ(runAndCheck(*comm, Coll::AllGather, t, RedOp::Sum, count, inPlace), "");
              for (RedOp op : {RedOp::Sum, RedOp::Avg, RedOp::Min}) {
                EXPECT_EQ(runAndCheck(*comm, Coll::ReduceScatter, t, op, count, inPlace), "");
                EXPECT_EQ(runAndCheck(*comm, Coll::AllReduce, t, op, count, inPlace), "");
              }
            }
          }
        }
      },
      o);
}

// Uneven blocks (count not divisible by the ranks) with many chunks, repeated: chunks of
// different blocks must never share scratch space however the pipelines interleave.
TEST(RingAllReduce, UnevenBlocksManyChunksRepeated) {
  RunOptions o;
  o.env["SHARC_ALGO"] = "allreduce:ring";
  o.env["SHARC_CHUNK_BYTES"] = "4096";
  for (int n : {3, 5, 7}) {
    runRanks(
        n,
        [](const RankContext&) {
          auto comm = Communicator::createFromEnvironment();
          for (int iter = 0; iter < 5; ++iter)
            for (size_t count : {size_t{3001}, size_t{10007}})
              for (bool inPlace : {false, true})
                ASSERT_EQ(runAndCheck(*comm, Coll::AllReduce, DataType::Float64, RedOp::Sum, count,
                                      inPlace),
                          "");
        },
        o);
  }
}

// 4 ranks of one host on libfabric's shm provider, the ring AllReduce in 8 KiB chunks.
RunOptions ringOnShm() {
  RunOptions o;
  o.env["SHARC_FI_PROVIDER"] = "shm";
  o.env["SHARC_SHM"] = "0";
  o.env["SHARC_ALGO"] = "allreduce:ring";
  o.env["SHARC_CHUNK_BYTES"] = "8192";
  o.env["SHARC_TIMEOUT_MS"] = "60000";
  return o;
}

// A schedule keeps at most a quarter of the receives its provider holds posted (libfabric's
// shm: 1,024, counting messages that arrived before their receive; fi_trecv fails with ENOMEM
// beyond). Two ring AllReduces in flight at once (FSDP overlaps an AllGather with a
// ReduceScatter), each of 600 chunks per block, wanting more places than that, complete.
TEST(RingAllReduce, ManyChunksInFlightFitTheProvidersReceiveQueue) {
  runRanks(
      4,
      [](const RankContext& ctx) {
        auto comm = Communicator::createFromEnvironment();
        constexpr size_t kCalls = 2;
        const size_t count = size_t{4} * 600 * 8192 / sizeof(float);
        std::vector<std::vector<float>> in(kCalls), out(kCalls);
        for (size_t c = 0; c < kCalls; ++c) {
          in[c].resize(count);
          out[c].assign(count, -1.0f);
          for (size_t i = 0; i < count; ++i)
            in[c][i] = static_cast<float>((i * 7 + c * 3 + static_cast<size_t>(ctx.rank)) % 64);
        }
        std::vector<Request> calls;
        for (size_t c = 0; c < kCalls; ++c)
          calls.push_back(
              comm->iallReduce(in[c].data(), out[c].data(), count, DataType::Float32, RedOp::Sum));
        for (Request& r : calls) r.wait();
        for (size_t c = 0; c < kCalls; ++c)
          for (size_t i = 0; i < count; ++i) {
            double want = 0;  // the float64 reference: every rank's value, summed
            for (int r = 0; r < ctx.size; ++r)
              want += static_cast<double>((i * 7 + c * 3 + static_cast<size_t>(r)) % 64);
            ASSERT_EQ(static_cast<double>(out[c][i]), want) << "call " << c << ", element " << i;
          }
      },
      ringOnShm());
}

// Five such calls in flight at once want more than shm's 1,024 entries: every rank fails (no
// hang), and the error says what ran out and what helps.
TEST(RingAllReduce, TooManyInFlightOnShmFailsNamingTheProvidersQueue) {
  runRanks(
      4,
      [](const RankContext&) {
        auto comm = Communicator::createFromEnvironment();
        constexpr size_t kCalls = 5;
        const size_t count = size_t{4} * 600 * 8192 / sizeof(float);
        std::vector<std::vector<float>> in(kCalls, std::vector<float>(count, 1.0f));
        std::vector<std::vector<float>> out(kCalls, std::vector<float>(count));
        std::vector<Request> calls;
        std::string error;  // the first one this rank sees: a later call may fail to start
        try {
          for (size_t c = 0; c < kCalls; ++c)
            calls.push_back(comm->iallReduce(in[c].data(), out[c].data(), count, DataType::Float32,
                                             RedOp::Sum));
        } catch (const Error& e) {
          error = e.what();
        }
        for (Request& r : calls) {
          try {
            r.wait();
          } catch (const Error& e) {
            if (error.empty()) error = e.what();
          }
        }
        EXPECT_NE(error.find("fi_trecv"), std::string::npos) << error;
        EXPECT_NE(error.find("shm holds 1024 receives"), std::string::npos) << error;
        EXPECT_NE(error.find("SHARC_CHUNK_BYTES"), std::string::npos) << error;
      },
      ringOnShm());
}

// Without single-copy reads (SHARC_CMA=0) one-host jobs pick the fabric-only algorithms.
TEST(OneHost, WithoutSingleCopyReads) {
  RunOptions o;
  o.env["SHARC_CMA"] = "0";
  o.env["SHARC_FI_PROVIDER"] = "shm";
  runRanks(
      3,
      [](const RankContext&) {
        auto comm = Communicator::createFromEnvironment();
        const size_t large = (size_t{1} << 19) + 7;
        EXPECT_EQ(runAndCheck(*comm, Coll::AllGather, DataType::Float32, RedOp::Sum, large, false),
                  "");
        EXPECT_EQ(
            runAndCheck(*comm, Coll::ReduceScatter, DataType::BFloat16, RedOp::Sum, large, true),
            "");
      },
      o);
}

INSTANTIATE_TEST_SUITE_P(Algorithms, ForcedAlgorithm,
                         ::testing::Combine(::testing::Values("ring", "recursive_doubling", "bruck",
                                                              "direct", "direct_read",
                                                              "direct_write"),
                                            ::testing::Values(2, 3, 4, 5, 8)),
                         [](const ::testing::TestParamInfo<AlgoParam>& info) {
                           return std::get<0>(info.param) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "ranks";
                         });

// Two rails (SHARC_NICS=lo,lo: two tcp endpoints per rank): messages from 32 KiB on are
// striped over both; results must not change, and a mismatched count is still an error.
TEST(MultiRail, StripedMessagesMatchReference) {
  RunOptions o;
  o.env["SHARC_FI_PROVIDER"] = "tcp;ofi_rxm";
  o.env["SHARC_NICS"] = "lo,lo";
  o.env["SHARC_TIMEOUT_MS"] = "20000";
  o.oneRankPerNode = true;
  runRanks(
      3,
      [](const RankContext& ctx) {
        auto comm = Communicator::createFromEnvironment();
        for (size_t count : {size_t{1}, size_t{40000}, size_t{300001}})
          for (bool inPlace : {false, true}) {
            EXPECT_EQ(
                runAndCheck(*comm, Coll::AllGather, DataType::Float32, RedOp::Sum, count, inPlace),
                "");
            EXPECT_EQ(runAndCheck(*comm, Coll::ReduceScatter, DataType::Float32, RedOp::Sum, count,
                                  inPlace),
                      "");
            EXPECT_EQ(
                runAndCheck(*comm, Coll::AllReduce, DataType::Float64, RedOp::Max, count, inPlace),
                "");
          }
        // Rank 1 passes a smaller count: every rank gets an error, not a hang. The error aborts
        // the communicator it happens on, failing whatever a slower rank still runs there, so
        // it happens on a communicator of its own.
        auto mismatched = comm->split(0, ctx.rank);
        const size_t count = ctx.rank == 1 ? 50000 : 100000;
        std::vector<float> send(count), recv(count * 3);
        try {
          mismatched->allGather(send.data(), recv.data(), count, DataType::Float32);
          ADD_FAILURE() << "rank " << ctx.rank << ": no error for a mismatched count";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("AllGather"), std::string::npos) << e.what();
        }
      },
      o);
}

}  // namespace
}  // namespace sharc::testing

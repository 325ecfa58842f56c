// Failures end in errors on every surviving rank, never in a hang.
#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>
#include <sharc/communicator.hpp>
#include <thread>
#include <vector>

#include "multiprocess.hpp"

namespace sharc::testing {
namespace {

RunOptions shortTimeout(const char* provider = "tcp;ofi_rxm") {
  RunOptions o;
  o.env["SHARC_FI_PROVIDER"] = provider;
  o.env["SHARC_TIMEOUT_MS"] = "4000";
  o.env["SHARC_DEBUG"] = "NONE";
  o.timeout = std::chrono::seconds(60);
  return o;
}

// Expects `body` to throw a sharc::Error whose message names `call`.
template <typename F>
void expectError(F&& body, const char* call, int rank) {
  try {
    body();
    ADD_FAILURE() << "rank " << rank << ": no error from " << call;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(call), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank"), std::string::npos) << e.what();
  }
}

TEST(Failures, RankExitingMidCollectiveFailsTheOthers) {
  // The libfabric providers alone, then sharc's shared memory between the ranks.
  for (const char* transport : {"tcp;ofi_rxm", "shm", "sharc-shm"}) {
    const bool sharcShm = std::string(transport) == "sharc-shm";
    RunOptions o = shortTimeout(sharcShm ? "shm" : transport);
    o.env["SHARC_SHM"] = sharcShm ? "1" : "0";
    o.mayFail = {2};
    runRanks(
        4,
        [](const RankContext& ctx) {
          auto comm = Communicator::createFromEnvironment();
          std::vector<float> send(1 << 18, 1.0f), recv((1 << 18) * 4);
          comm->allGather(send.data(), recv.data(), send.size(), DataType::Float32);
          if (ctx.rank == 2) _exit(3);  // dies between two collectives, without a word
          const auto start = std::chrono::steady_clock::now();
          expectError(
              [&] { comm->allGather(send.data(), recv.data(), send.size(), DataType::Float32); },
              "AllGather", ctx.rank);
          EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
        },
        o);
  }
}

std::set<std::string> devShmEntries() {
  std::set<std::string> names;
  if (DIR* d = opendir("/dev/shm")) {
    while (const dirent* e = readdir(d)) names.insert(e->d_name);
    closedir(d);
  }
  return names;
}

// A rank killed outright (no handler, no destructor runs) in the middle of a collective: the
// others fail with an error, and the node's shared segment leaves nothing in /dev/shm.
TEST(Failures, KilledRankFailsTheOthersAndLeavesNothingInDevShm) {
  const std::set<std::string> before = devShmEntries();
  RunOptions o = shortTimeout();
  o.env.erase("SHARC_FI_PROVIDER");
  o.env["SHARC_SHM"] = "1";
  // Far above the bound checked below: the error must come from noticing the death.
  o.env["SHARC_TIMEOUT_MS"] = "60000";
  o.mayFail = {1};
  runRanks(
      4,
      [](const RankContext& ctx) {
        auto comm = Communicator::createFromEnvironment();
        std::vector<float> send(1 << 20, 1.0f), recv((1 << 20) * 4);
        comm->allGather(send.data(), recv.data(), send.size(), DataType::Float32);
        if (ctx.rank == 1) {
          // Dies while its peers are in the middle of the next call.
          auto req = comm->iallGather(send.data(), recv.data(), send.size(), DataType::Float32);
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          raise(SIGKILL);
        }
        const auto start = std::chrono::steady_clock::now();
        expectError(
            [&] {
              for (int i = 0; i < 3; ++i)
                comm->allGather(send.data(), recv.data(), send.size(), DataType::Float32);
            },
            "AllGather", ctx.rank);
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
      },
      o);
  std::vector<std::string> left;
  for (const std::string& name : devShmEntries())
    if (!before.count(name)) left.push_back(name);
  EXPECT_TRUE(left.empty()) << "left in /dev/shm: " << ::testing::PrintToString(left);
}

TEST(Failures, MismatchedCountIsReportedOnEveryRank) {
  runRanks(
      3,
      [](const RankContext& ctx) {
        auto comm = Communicator::createFromEnvironment();
        const size_t count = ctx.rank == 1 ? 100 : 200;
        std::vector<int32_t> send(count * 3, 1), recv(count * 3);
        expectError(
            [&] { comm->allReduce(send.data(), recv.data(), count, DataType::Int32, RedOp::Sum); },
            "AllReduce", ctx.rank);
      },
      shortTimeout());
}

TEST(Failures, MismatchedCountInSingleCopyAllGather) {
  runRanks(
      3,
      [](const RankContext& ctx) {
        auto comm = Communicator::createFromEnvironment();
        const size_t count = ctx.rank == 2 ? 100000 : 200000;  // large: direct_read on one host
        std::vector<float> send(count, 1.0f), recv(200000 * 3);
        expectError([&] { comm->allGather(send.data(), recv.data(), count, DataType::Float32); },
                    "AllGather", ctx.rank);
      },
      shortTimeout());
}

// Chunks of equal length: a ring AllGather of 100,000 floats goes in two chunks of 200,000
// bytes per block, and of 50,000 floats in one of 200,000, so every message rank 1 expects has
// the length rank 0 sends. Each rank's slots are rotated by its count, so rank 1 must still
// fail in the call (it finished on the wrong data before), as every other rank does.
TEST(Failures, MismatchedCountWithEqualChunksFailsEveryRank) {
  RunOptions o = shortTimeout();
  o.env["SHARC_ALGO"] = "ring";
  o.env["SHARC_CHUNK_BYTES"] = "262144";
  o.oneRankPerNode = true;
  runRanks(
      3,
      [](const RankContext& ctx) {
        auto comm = Communicator::createFromEnvironment();
        const size_t count = ctx.rank == 1 ? 50000 : 100000;
        std::vector<float> send(count, 1.0f), recv(100000 * 3);
        expectError([&] { comm->allGather(send.data(), recv.data(), count, DataType::Float32); },
                    "AllGather", ctx.rank);
      },
      o);
}

TEST(Failures, MismatchedTypeIsReportedAsAMismatchedCall) {
  runRanks(
      2,
      [](const RankContext& ctx) {
        auto comm = Communicator::createFromEnvironment();
        const DataType type = ctx.rank == 0 ? DataType::Float32 : DataType::Int32;
        std::vector<float> send(64, 1.0f), recv(64 * 2);
        try {
          comm->allGather(send.data(), recv.data(), 64, type);
          ADD_FAILURE() << "rank " << ctx.rank << ": mismatch not detected";
        } catch (const Error& e) {
          const std::string what = e.what();
          EXPECT_TRUE(what.find("mismatched call") != std::string::npos ||
                      what.find("aborted") != std::string::npos)
              << what;
          EXPECT_NE(what.find("peer"), std::string::npos) << what;
        }
      },
      shortTimeout());
}

TEST(Failures, BootstrapGarbageDoesNotDisturbTheJob) {
  runRanks(
      3,
      [](const RankContext& ctx) {
        if (ctx.rank == 1) {
          // Connect to the root and send junk (then a wrong-token lookalike) before joining.
          const std::string root = std::getenv("SHARC_ROOT");
          const int port = std::atoi(root.substr(root.find(':') + 1).c_str());
          for (int attempt = 0; attempt < 2; ++attempt) {
            const int fd = socket(AF_INET, SOCK_STREAM, 0);
            sockaddr_in addr{};
            addr.sin_family = AF_INET;
            addr.sin_port = htons(static_cast<uint16_t>(port));
            inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
            for (int i = 0; i < 200; ++i) {
              if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) break;
              std::this_thread::sleep_for(std::chrono::milliseconds(10));
            }
            char junk[64];
            for (size_t i = 0; i < sizeof(junk); ++i) junk[i] = static_cast<char>(i * 37 + attempt);
            (void)!write(fd, junk, sizeof(junk));
            close(fd);
          }
        }
        auto comm = Communicator::createFromEnvironment();
        int32_t mine = ctx.rank, sum = 0;
        comm->allReduce(&mine, &sum, 1, DataType::Int32, RedOp::Sum);
        EXPECT_EQ(sum, 3);
      },
      shortTimeout());
}

TEST(Failures, InvalidArgumentsAreRejectedBeforeAnyTraffic) {
  runRanks(
      2,
      [](const RankContext& ctx) {
        auto comm = Communicator::createFromEnvironment();
        std::vector<float> buf(16), out(32);
        auto code = [](auto&& f) {
          try {
            f();
          } catch (const Error& e) {
            return e.code();
          }
          return Result::Success;
        };
        EXPECT_EQ(code([&] { comm->allGather(nullptr, out.data(), 4, DataType::Float32); }),
                  Result::InvalidArgument);
        EXPECT_EQ(
            code([&] { comm->allGather(buf.data(), out.data(), 4, static_cast<DataType>(42)); }),
            Result::InvalidArgument);
        EXPECT_EQ(code([&] {
                    comm->allReduce(buf.data(), out.data(), 4, DataType::Float32,
                                    static_cast<RedOp>(9));
                  }),
                  Result::InvalidArgument);
        EXPECT_EQ(code([&] {
                    comm->allGather(buf.data(), out.data(), std::numeric_limits<size_t>::max() / 2,
                                    DataType::Float32);
                  }),
                  Result::InvalidArgument);
        EXPECT_EQ(code([&] { comm->allGather(out.data() + 1, out.data(), 8, DataType::Float32); }),
                  Result::InvalidArgument);  // overlapping, but not the in-place form
        EXPECT_EQ(code([&] { comm->broadcast(buf.data(), buf.data(), 4, DataType::Float32, 5); }),
                  Result::InvalidArgument);
        // None of the above sent anything: the next real collective still lines up.
        int32_t mine = 1, sum = 0;
        comm->allReduce(&mine, &sum, 1, DataType::Int32, RedOp::Sum);
        EXPECT_EQ(sum, 2);
        comm->destroy();
        EXPECT_EQ(code([&] { comm->barrier(); }), Result::InvalidUsage);
        (void)ctx;
      },
      shortTimeout());
}

TEST(Failures, WaitWithShortTimeoutLeavesTheOperationPending) {
  runRanks(
      2,
      [](const RankContext& ctx) {
        auto comm = Communicator::createFromEnvironment();
        if (ctx.rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(600));
        int32_t mine = 5, sum = 0;
        Request req = comm->iallReduce(&mine, &sum, 1, DataType::Int32, RedOp::Sum);
        if (ctx.rank == 0) {
          try {
            req.wait(std::chrono::milliseconds(50));
            ADD_FAILURE() << "wait(50 ms) returned before the peer joined";
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), Result::Timeout);
          }
          EXPECT_FALSE(req.isCompleted());
        }
        req.wait();
        EXPECT_TRUE(req.isCompleted());
        EXPECT_EQ(sum, 10);
      },
      shortTimeout());
}

TEST(NonBlocking, ManyOutstandingRequestsCompleteInAnyWaitOrder) {
  runRanks(
      3,
      [](const RankContext& ctx) {
        auto comm = Communicator::createFromEnvironment();
        constexpr int kOps = 40;
        std::vector<std::vector<int64_t>> in(kOps), out(kOps);
        std::vector<Request> reqs;
        for (int i = 0; i < kOps; ++i) {
          in[i].assign(1000 + i, ctx.rank + i);
          out[i].assign(in[i].size(), -1);
          reqs.push_back(comm->iallReduce(in[i].data(), out[i].data(), in[i].size(),
                                          DataType::Int64, RedOp::Sum));
        }
        // Poll with test() in reverse order: completion must not depend on waiting in order.
        for (int i = kOps - 1; i >= 0; --i)
          while (!reqs[i].test()) {
          }
        for (int i = 0; i < kOps; ++i)
          for (int64_t v : out[i]) ASSERT_EQ(v, 0 + 1 + 2 + 3 * i);
      },
      shortTimeout());
}

}  // namespace
}  // namespace sharc::testing

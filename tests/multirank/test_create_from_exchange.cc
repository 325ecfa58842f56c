// Communicator::createFromExchange over real processes: creation through a caller's exchange
// (here over files in a shared directory), and the errors of exchanges that return the wrong
// blobs, of invalid arguments and of an exchange's own exception.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <sharc/communicator.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "collective_check.hpp"
#include "multiprocess.hpp"
#include "p2p_check.hpp"

namespace sharc::testing {
namespace {

using Clock = std::chrono::steady_clock;

// A directory every rank can see, made by the parent before the fork and removed after.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "sharc-exchange-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The caller's exchange over files: round k of rank r writes round_k_rank_r (atomically, by
// rename) and polls until every rank's file of the round is there.
ExchangeFn fileExchange(const std::string& dir, int rank, int n,
                        std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto round = std::make_shared<int>(0);
  return [dir, rank, n, timeout, round](const std::string& blob) {
    const int k = (*round)++;
    auto name = [&](int r) {
      return dir + "/round_" + std::to_string(k) + "_rank_" + std::to_string(r);
    };
    const std::string tmp = name(rank) + ".tmp";
    {
      std::ofstream f(tmp, std::ios::binary);
      f.write(blob.data(), static_cast<std::streamsize>(blob.size()));
      if (!f) throw std::runtime_error("cannot write " + tmp);
    }
    std::filesystem::rename(tmp, name(rank));
    std::vector<std::string> all(static_cast<size_t>(n));
    const auto deadline = Clock::now() + timeout;
    for (int r = 0; r < n; ++r) {
      while (!std::filesystem::exists(name(r))) {
        if (Clock::now() > deadline)
          throw std::runtime_error("file exchange: rank " + std::to_string(r) +
                                   " never wrote round " + std::to_string(k));
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      std::ifstream f(name(r), std::ios::binary);
      all[static_cast<size_t>(r)].assign(std::istreambuf_iterator<char>(f),
                                         std::istreambuf_iterator<char>());
    }
    return all;
  };
}

TEST(Exchange, CreateThroughFileExchange) {
  for (int n : {1, 3}) {
    TempDir dir;
    runRanks(
        n,
        [&dir](const RankContext& ctx) {
          auto comm = Communicator::createFromExchange(
              ctx.rank, ctx.size, fileExchange(dir.path(), ctx.rank, ctx.size));
          ASSERT_TRUE(comm);
          EXPECT_EQ(comm->rank(), ctx.rank);
          EXPECT_EQ(comm->size(), ctx.size);
          std::vector<int64_t> mine(5, 10 * ctx.rank), all(5 * static_cast<size_t>(ctx.size), -1);
          comm->allGather(mine.data(), all.data(), mine.size(), DataType::Int64);
          for (int r = 0; r < ctx.size; ++r)
            for (size_t i = 0; i < 5; ++i) EXPECT_EQ(all[r * 5 + i], 10 * r);
          EXPECT_EQ(runAndCheck(*comm, Coll::AllReduce, DataType::Float32, RedOp::Sum, 1001, false),
                    "");
          if (ctx.size > 1) {
            const int next = (ctx.rank + 1) % ctx.size, prev = (ctx.rank + ctx.size - 1) % ctx.size;
            const auto out = message(ctx.rank, next, 2, 777);
            std::vector<uint8_t> in(777);
            comm->igroup({{sharc::PointToPoint::Kind::Send, next, const_cast<uint8_t*>(out.data()),
                           777, 2},
                          {sharc::PointToPoint::Kind::Recv, prev, in.data(), 777, 2}})
                .wait();
            EXPECT_EQ(checkMessage(in, prev, ctx.rank, 2, 777), "");
          }
        },
        tcpOptions());
  }
}

TEST(Exchange, WrongExchangeResultsAreErrors) {
  runRanks(
      2,
      [](const RankContext& ctx) {
        // One blob too many, then too few, from every rank's exchange.
        for (int extra : {1, -1}) {
          const auto [code, what] = errorOf([&] {
            Communicator::createFromExchange(ctx.rank, ctx.size, [&](const std::string& blob) {
              std::vector<std::string> all(static_cast<size_t>(ctx.size + extra), blob);
              return all;
            });
          });
          EXPECT_NE(code, Result::Success) << "extra " << extra;
          EXPECT_TRUE(contains(what, "blobs")) << what;
          EXPECT_TRUE(contains(what, "rank " + std::to_string(ctx.rank))) << what;
        }
        // Another blob at this rank's own index.
        {
          const auto [code, what] = errorOf([&] {
            Communicator::createFromExchange(ctx.rank, ctx.size, [&](const std::string& blob) {
              return std::vector<std::string>(static_cast<size_t>(ctx.size), blob + "x");
            });
          });
          EXPECT_NE(code, Result::Success) << what;
        }
        // Invalid rank / size and an empty function are rejected up front.
        const auto dummy = [](const std::string& b) { return std::vector<std::string>{b}; };
        EXPECT_EQ(errorOf([&] { Communicator::createFromExchange(2, 2, dummy); }).first,
                  Result::InvalidArgument);
        EXPECT_EQ(errorOf([&] { Communicator::createFromExchange(0, 0, dummy); }).first,
                  Result::InvalidArgument);
        EXPECT_EQ(errorOf([&] { Communicator::createFromExchange(0, 1, ExchangeFn{}); }).first,
                  Result::InvalidArgument);
        // An exchange that fails with its own exception: it reaches the caller.
        EXPECT_ANY_THROW(Communicator::createFromExchange(
            ctx.rank, ctx.size, [](const std::string&) -> std::vector<std::string> {
              throw std::runtime_error("store unreachable");
            }));
      },
      shortTimeout());
}

}  // namespace
}  // namespace sharc::testing

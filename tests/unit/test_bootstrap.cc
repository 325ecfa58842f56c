// Root server + TCP bootstrap over loopback: ranks are threads of this process.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <chrono>
#include <future>
#include <random>
#include <sharc/communicator.hpp>
#include <sharc/error.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "bootstrap/protocol.hpp"
#include "bootstrap/socket.hpp"

namespace sharc::bootstrap {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr milliseconds kTimeout{3000};
constexpr uint64_t kToken = 0x1234abcd5678ef00ull;

long long msSince(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
}

// Blob of rank `rank` in round `round`: lengths from 0 bytes to the 64 KiB limit.
std::string blobFor(int rank, int round) {
  static const size_t kLengths[] = {0, 1, 7, 100, 4096, Bootstrap::kMaxBlobBytes, 33333};
  const size_t length = kLengths[static_cast<size_t>(rank * 3 + round) % 7];
  std::string s(length, '\0');
  for (size_t i = 0; i < length; ++i)
    s[i] = static_cast<char>((rank * 131 + round * 17 + i) & 0xff);
  return s;
}

// Does `rounds` checked allGathers as rank `rank` (connecting first unless `boot` is given);
// returns "" or what went wrong.
std::string runRank(const RootAddress& root, int rank, int nranks, int rounds,
                    std::unique_ptr<Bootstrap> boot = nullptr) {
  try {
    if (!boot) boot = connectToRoot(root, rank, nranks, kTimeout);
    if (boot->rank() != rank || boot->size() != nranks) return "wrong rank/size";
    for (int k = 0; k < rounds; ++k) {
      const std::vector<std::string> all = boot->allGather(blobFor(rank, k));
      if (all.size() != static_cast<size_t>(nranks)) return "wrong blob count";
      for (int q = 0; q < nranks; ++q) {
        if (all[static_cast<size_t>(q)] != blobFor(q, k)) {
          return "round " + std::to_string(k) + ": wrong blob of rank " + std::to_string(q);
        }
      }
    }
  } catch (const std::exception& e) {
    return "rank " + std::to_string(rank) + ": " + e.what();
  }
  return "";
}

// Runs ranks [first, nranks) as threads doing `rounds` checked allGathers; returns failures.
std::vector<std::string> runJob(const RootAddress& root, int nranks, int rounds, int first = 0) {
  std::vector<std::future<std::string>> ranks;
  for (int r = first; r < nranks; ++r) {
    ranks.push_back(std::async(std::launch::async, runRank, root, r, nranks, rounds, nullptr));
  }
  std::vector<std::string> errors;
  for (auto& f : ranks) {
    if (std::string e = f.get(); !e.empty()) errors.push_back(e);
  }
  return errors;
}

// Runs fn, expecting sharc::Error with `code` whose message contains `part`.
template <typename Fn>
void expectError(Fn fn, Result code, const std::string& part) {
  try {
    fn();
    ADD_FAILURE() << "expected sharc::Error(" << resultString(code) << ")";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
        << "message '" << e.what() << "' lacks '" << part << "'";
  }
}

// True when the server closes `fd` (EOF or reset) before `limit` passes.
bool closedByPeer(int fd, milliseconds limit) {
  const auto deadline = net::deadlineAfter(limit);
  char buf[256];
  for (;;) {
    const net::IoResult io = net::recvAll(fd, buf, sizeof(buf), deadline);
    if (io == net::IoResult::Closed || io == net::IoResult::Error) return true;
    if (io == net::IoResult::Timeout) return false;
  }
}

net::Fd rawConnect(const RootAddress& root) {
  std::string error;
  bool timedOut = false;
  net::Fd fd =
      net::connectWithRetry(root.host, root.port, net::deadlineAfter(kTimeout), &error, &timedOut);
  EXPECT_TRUE(fd.valid()) << error;
  return fd;
}

TEST(Bootstrap, WorldSizes) {
  for (int nranks : {1, 2, 3, 8}) {
    auto server = RootServer::start("127.0.0.1", 0, kToken, nranks, kTimeout);
    const RootAddress root = server->address();
    EXPECT_EQ(root.host, "127.0.0.1");
    EXPECT_NE(root.port, 0);
    const std::vector<std::string> errors = runJob(root, nranks, 5);
    EXPECT_TRUE(errors.empty()) << "nranks " << nranks << ": " << errors.front();
  }
}

TEST(Bootstrap, SizeTakenFromFirstHello) {
  auto server = RootServer::start("127.0.0.1", 0, kToken, 0, kTimeout);
  const std::vector<std::string> errors = runJob(server->address(), 4, 3);
  EXPECT_TRUE(errors.empty()) << errors.front();
}

TEST(Bootstrap, Ipv6Loopback) {
  std::unique_ptr<RootServer> server;
  try {
    server = RootServer::start("::1", 0, kToken, 2, kTimeout);
  } catch (const Error& e) {
    GTEST_SKIP() << "no IPv6 loopback: " << e.what();
  }
  EXPECT_EQ(server->address().host, "::1");
  const std::vector<std::string> errors = runJob(server->address(), 2, 2);
  EXPECT_TRUE(errors.empty()) << errors.front();
}

TEST(Bootstrap, MakeUniqueId) {
  const UniqueId id = makeUniqueId();
  const RootAddress root = decodeUniqueId(id);
  EXPECT_NE(root.token, 0u);
  const std::vector<std::string> errors = runJob(root, 3, 3);
  EXPECT_TRUE(errors.empty()) << errors.front();
  // Two ids name two different servers.
  EXPECT_NE(decodeUniqueId(makeUniqueId()).token, root.token);
}

TEST(Bootstrap, IntrudersAreRejectedWhileTheJobCompletes) {
  auto server = RootServer::start("127.0.0.1", 0, kToken, 3, kTimeout);
  const RootAddress root = server->address();

  net::Fd silent = rawConnect(root);   // connects and says nothing
  net::Fd garbage = rawConnect(root);  // sends random bytes
  std::mt19937 rng(7);
  std::string noise(300, '\0');
  for (char& c : noise) c = static_cast<char>(rng());
  ASSERT_EQ(net::sendAll(garbage.get(), noise.data(), noise.size(), net::deadlineAfter(kTimeout)),
            net::IoResult::Ok);

  auto rank0 = connectToRoot(root, 0, 3, kTimeout);
  RootAddress wrong = root;
  wrong.token ^= 1;
  expectError([&] { connectToRoot(wrong, 1, 3, kTimeout); }, Result::InvalidUsage,
              "wrong job token");
  expectError([&] { connectToRoot(root, 0, 3, kTimeout); }, Result::InvalidUsage,
              "rank 0 is already taken");
  expectError([&] { connectToRoot(root, 1, 5, kTimeout); }, Result::InvalidUsage,
              "differs from the job's 3");
  // A well-formed hello naming a rank out of range (connectToRoot would refuse to send it).
  net::Fd outOfRange = rawConnect(root);
  protocol::Hello hello;
  hello.token = kToken;
  hello.rank = 7;
  hello.nranks = 3;
  const std::string bytes = hello.encode();
  ASSERT_EQ(
      net::sendAll(outOfRange.get(), bytes.data(), bytes.size(), net::deadlineAfter(kTimeout)),
      net::IoResult::Ok);
  char frame[8];
  ASSERT_EQ(net::recvAll(outOfRange.get(), frame, 8, net::deadlineAfter(kTimeout)),
            net::IoResult::Ok);
  EXPECT_EQ(protocol::getU32(frame), protocol::kAbortMagic);

  // The real job: rank 0 is already connected, ranks 1 and 2 join now.
  std::vector<std::future<std::vector<std::string>>> others;
  for (int r = 1; r < 3; ++r) {
    others.push_back(std::async(std::launch::async, [&root, r] {
      auto boot = connectToRoot(root, r, 3, kTimeout);
      std::vector<std::string> last;
      for (int k = 0; k < 3; ++k) last = boot->allGather(blobFor(r, k));
      return last;
    }));
  }
  std::vector<std::string> mine;
  for (int k = 0; k < 3; ++k) mine = rank0->allGather(blobFor(0, k));
  for (auto& f : others) EXPECT_EQ(f.get(), mine);
  for (int q = 0; q < 3; ++q) EXPECT_EQ(mine[static_cast<size_t>(q)], blobFor(q, 2));

  EXPECT_TRUE(closedByPeer(garbage.get(), kTimeout));
  EXPECT_TRUE(closedByPeer(silent.get(), kTimeout));
  EXPECT_TRUE(closedByPeer(outOfRange.get(), kTimeout));
}

TEST(Bootstrap, GarbageFloodDoesNotDisturbTheJob) {
  auto server = RootServer::start("127.0.0.1", 0, kToken, 4, kTimeout);
  const RootAddress root = server->address();
  // Rank 0 joins first and starts its rounds only after the flood, so the server is still
  // serving the job (ranks 1-3 are mid-round) while the garbage arrives.
  auto rank0 = connectToRoot(root, 0, 4, kTimeout);
  auto job = std::async(std::launch::async, [&root] { return runJob(root, 4, 4, 1); });
  std::mt19937 rng(12345);
  std::vector<net::Fd> lingering;
  for (int i = 0; i < 60; ++i) {
    net::Fd fd = rawConnect(root);
    std::string bytes(rng() % 80, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    if (i % 3 == 0 && bytes.size() >= 4) {
      // A correct magic followed by noise: fails later in the validation.
      const std::string magic = protocol::Hello().encode().substr(0, 4);
      bytes.replace(0, 4, magic);
    }
    net::sendAll(fd.get(), bytes.data(), bytes.size(), net::deadlineAfter(kTimeout));
    // Half of the clients hang up at once, the others stay until the server drops them.
    if (i % 2 == 1) lingering.push_back(std::move(fd));
  }
  EXPECT_EQ(runRank(root, 0, 4, 4, std::move(rank0)), "");
  const std::vector<std::string> errors = job.get();
  EXPECT_TRUE(errors.empty()) << errors.front();
}

TEST(Bootstrap, SilentClientIsDroppedAfterTheHandshakeLimit) {
  auto server = RootServer::start("127.0.0.1", 0, kToken, 2, kTimeout);
  net::Fd silent = rawConnect(server->address());
  const auto start = Clock::now();
  EXPECT_TRUE(closedByPeer(silent.get(), kTimeout));
  EXPECT_GE(msSince(start), 1500);  // the limit is min(2 s, timeout)
}

TEST(Bootstrap, RankLeavingBetweenRoundsFailsTheOthers) {
  auto server = RootServer::start("127.0.0.1", 0, kToken, 3, kTimeout);
  const RootAddress root = server->address();
  std::vector<std::unique_ptr<Bootstrap>> ranks(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      ranks[static_cast<size_t>(r)] = connectToRoot(root, r, 3, kTimeout);
      ranks[static_cast<size_t>(r)]->allGather(blobFor(r, 0));
    });
  }
  for (auto& t : threads) t.join();
  threads.clear();
  ranks[2].reset();  // rank 2 leaves after round 1
  std::vector<long long> elapsed(2);
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      const auto start = Clock::now();
      expectError([&] { ranks[static_cast<size_t>(r)]->allGather("x"); }, Result::RemoteError,
                  "rank 2");
      elapsed[static_cast<size_t>(r)] = msSince(start);
    });
  }
  for (auto& t : threads) t.join();
  for (long long ms : elapsed) EXPECT_LT(ms, 1000);
  // A failed bootstrap stays failed.
  expectError([&] { ranks[0]->allGather("y"); }, Result::RemoteError, "earlier failure");
}

TEST(Bootstrap, RankLeavingMidRoundFailsTheWaitingRanks) {
  auto server = RootServer::start("127.0.0.1", 0, kToken, 3, kTimeout);
  const RootAddress root = server->address();
  std::vector<std::unique_ptr<Bootstrap>> ranks(3);
  for (int r = 0; r < 3; ++r) {
    ranks[static_cast<size_t>(r)] = connectToRoot(root, r, 3, kTimeout);
  }
  std::vector<std::future<std::string>> waiting;
  for (int r = 0; r < 2; ++r) {
    waiting.push_back(std::async(std::launch::async, [&ranks, r] {
      try {
        ranks[static_cast<size_t>(r)]->allGather(blobFor(r, 0));
      } catch (const Error& e) {
        return std::string(resultString(e.code())) + ": " + e.what();
      }
      return std::string("no error");
    }));
  }
  std::this_thread::sleep_for(milliseconds(200));
  const auto start = Clock::now();
  ranks[2].reset();  // rank 2 dies while ranks 0 and 1 wait in round 1
  for (auto& f : waiting) {
    const std::string result = f.get();
    EXPECT_NE(result.find("remote error"), std::string::npos) << result;
    EXPECT_NE(result.find("rank 2"), std::string::npos) << result;
    EXPECT_NE(result.find(root.toString()), std::string::npos) << result;
  }
  EXPECT_LT(msSince(start), 1000);
}

TEST(Bootstrap, RankLeavingBeforeAllJoinedFailsTheJob) {
  auto server = RootServer::start("127.0.0.1", 0, kToken, 3, kTimeout);
  const RootAddress root = server->address();
  auto rank0 = connectToRoot(root, 0, 3, kTimeout);
  connectToRoot(root, 1, 3, kTimeout).reset();  // joins and leaves at once
  const auto start = Clock::now();
  expectError([&] { rank0->allGather("a"); }, Result::RemoteError, "rank 1");
  EXPECT_LT(msSince(start), 1000);
}

TEST(Bootstrap, OversizedBlobFailsEveryone) {
  auto server = RootServer::start("127.0.0.1", 0, kToken, 2, kTimeout);
  const RootAddress root = server->address();
  auto rank0 = connectToRoot(root, 0, 2, kTimeout);
  auto rank1 = connectToRoot(root, 1, 2, kTimeout);
  auto other = std::async(std::launch::async, [&] {
    expectError([&] { rank1->allGather("fine"); }, Result::RemoteError, "limit is 65536");
  });
  const std::string huge(Bootstrap::kMaxBlobBytes + 1, 'h');
  expectError([&] { rank0->allGather(huge); }, Result::InvalidArgument, "exceeds the limit");
  const auto start = Clock::now();
  other.get();
  EXPECT_LT(msSince(start), 1000);
}

TEST(Bootstrap, ConnectToNobodyTimesOutNamingTheAddress) {
  uint16_t port = 0;
  {
    net::Fd probe = net::listenOn("127.0.0.1", 0);
    port = net::localAddress(probe.get()).port();
  }  // closed: nobody listens on `port` any more
  const RootAddress root{"127.0.0.1", port, kToken};
  const auto start = Clock::now();
  expectError([&] { connectToRoot(root, 3, 4, milliseconds(500)); }, Result::Timeout,
              "rank 3: bootstrap: could not connect to root 127.0.0.1:" + std::to_string(port) +
                  " within 500 ms: Connection refused");
  const long long ms = msSince(start);
  EXPECT_GE(ms, 450);
  EXPECT_LT(ms, 2000);
}

TEST(Bootstrap, ClientTimeoutNamesRootAndRound) {
  auto server = RootServer::start("127.0.0.1", 0, kToken, 2, milliseconds(10000));
  const RootAddress root = server->address();
  auto rank0 = connectToRoot(root, 0, 2, milliseconds(300));
  const auto start = Clock::now();
  expectError([&] { rank0->allGather("lonely"); }, Result::Timeout,
              "allGather round 1: timed out after 300 ms waiting for the other ranks via root " +
                  root.toString());
  EXPECT_LT(msSince(start), 1500);
}

TEST(Bootstrap, ServerTimeoutReportsMissingRanks) {
  auto server = RootServer::start("127.0.0.1", 0, kToken, 2, milliseconds(500));
  auto rank0 = connectToRoot(server->address(), 0, 2, kTimeout);
  const auto start = Clock::now();
  expectError([&] { rank0->allGather("a"); }, Result::RemoteError, "missing: 1");
  EXPECT_LT(msSince(start), 1500);
}

TEST(Bootstrap, DestroyingTheServerFailsConnectedRanks) {
  auto server = RootServer::start("127.0.0.1", 0, kToken, 2, kTimeout);
  auto rank0 = connectToRoot(server->address(), 0, 2, kTimeout);
  const auto start = Clock::now();
  server.reset();
  EXPECT_LT(msSince(start), 1000);
  expectError([&] { rank0->allGather("a"); }, Result::RemoteError, "shut down");
}

TEST(Bootstrap, InvalidArgumentsAreRejectedLocally) {
  const RootAddress root{"127.0.0.1", 1, kToken};
  expectError([&] { connectToRoot(root, 2, 2, kTimeout); }, Result::InvalidArgument, "rank 2");
  expectError([&] { connectToRoot(root, -1, 2, kTimeout); }, Result::InvalidArgument, "rank -1");
  expectError([&] { connectToRoot(root, 0, 0, kTimeout); }, Result::InvalidArgument, "nranks 0");
}

TEST(Socket, RecvAllHonoursItsDeadline) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  net::Fd a(sv[0]);
  net::Fd b(sv[1]);
  char buf[4];
  const auto start = Clock::now();
  EXPECT_EQ(net::recvAll(a.get(), buf, 4, net::deadlineAfter(milliseconds(100))),
            net::IoResult::Timeout);
  EXPECT_GE(msSince(start), 90);
  b.reset();
  EXPECT_EQ(net::recvAll(a.get(), buf, 4, net::deadlineAfter(milliseconds(100))),
            net::IoResult::Closed);
  EXPECT_EQ(net::sendAll(a.get(), buf, 4, net::deadlineAfter(milliseconds(100))),
            net::IoResult::Closed);  // EPIPE, and no SIGPIPE kills the test
}

}  // namespace
}  // namespace sharc::bootstrap

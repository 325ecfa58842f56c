// Receives from any source (Communicator::irecvAny) over real processes: every sender's
// messages arrive in its own order whatever the race between senders, a message a losing
// receive took is its sender's next, and the refusals and failures say what went wrong.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <sharc/communicator.hpp>
#include <string>
#include <thread>
#include <vector>

#include "multiprocess.hpp"
#include "p2p_check.hpp"

namespace sharc::testing {
namespace {

constexpr uint32_t kTag = 11;
// Message n of a sender carries the pattern of tag kTag + 1000 * (n + 1), so that the receiver
// can tell which of the sender's messages it got (they all travel with tag kTag).
uint32_t patternTag(int n) {
  return kTag + 1000 * static_cast<uint32_t>(n + 1);
}

class AnySourceTransports : public ::testing::TestWithParam<std::string> {};

// Rank 0 takes `perSender` messages from each of the other ranks from any source, at sizes 0,
// 1, odd and large (the rendezvous path); each sender's must come in its order. Then a receive
// from any source races one more message of every sender, and rank 0 receives the others'
// by name: what the losers' probes took must reach those named receives, in order.
TEST_P(AnySourceTransports, EachSendersMessagesInOrderWhateverTheRace) {
  runRanks(
      4,
      [](const RankContext&) {
        auto comm = Communicator::createFromEnvironment();
        const int r = comm->rank(), n = comm->size();
        constexpr int perSender = 3;
        const auto limit = std::chrono::seconds(30);
        for (size_t bytes : {size_t{0}, size_t{1}, size_t{1001}, size_t{3} << 20}) {
          if (r != 0) {
            std::vector<Request> sends;
            std::vector<std::vector<uint8_t>> out;
            for (int m = 0; m <= perSender; ++m) out.push_back(message(r, 0, patternTag(m), bytes));
            for (int m = 0; m < perSender; ++m)
              sends.push_back(comm->isend(out[m].data(), bytes, 0, kTag));
            for (Request& s : sends) s.wait(limit);
            comm->barrier();  // rank 0 has them all: now the race
            comm->isend(out[perSender].data(), bytes, 0, kTag).wait(limit);
            comm->barrier();
            continue;
          }
          std::map<int, int> got;  // sender -> messages received from it
          for (int i = 0; i < perSender * (n - 1); ++i) {
            std::vector<uint8_t> in(bytes, 0xEE);
            Request req = comm->irecvAny(in.data(), bytes, kTag);
            req.wait(limit);
            const int src = req.source();
            ASSERT_TRUE(src >= 1 && src < n) << "source " << src;
            EXPECT_EQ(checkMessage(in, src, 0, patternTag(got[src]), bytes), "")
                << bytes << " bytes, message " << got[src] << " of rank " << src;
            ++got[src];
          }
          for (int s = 1; s < n; ++s) EXPECT_EQ(got[s], perSender) << "from rank " << s;
          comm->barrier();
          std::vector<uint8_t> first(bytes, 0xEE);
          Request any = comm->irecvAny(first.data(), bytes, kTag);
          any.wait(limit);
          const int winner = any.source();
          EXPECT_EQ(checkMessage(first, winner, 0, patternTag(perSender), bytes), "");
          for (int s = 1; s < n; ++s) {
            if (s == winner) continue;
            std::vector<uint8_t> in(bytes, 0xEE);
            comm->irecv(in.data(), bytes, s, kTag).wait(limit);
            EXPECT_EQ(checkMessage(in, s, 0, patternTag(perSender), bytes), "")
                << bytes << " bytes, named receive from rank " << s;
          }
          comm->barrier();
        }
        // Named requests report no source.
        Request send = comm->isend(nullptr, 0, (r + 1) % n, 1);
        comm->irecv(nullptr, 0, (r + n - 1) % n, 1).wait(limit);
        send.wait(limit);
        EXPECT_EQ(send.source(), -1);
      },
      transportOptions(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(
    , AnySourceTransports, ::testing::Values("tcp;ofi_rxm", "shm", "sharc-shm"),
    [](const ::testing::TestParamInfo<std::string>& info) {
      const std::string& t = info.param;
      return std::string(t == "tcp;ofi_rxm" ? "tcp" : t == "shm" ? "shm" : "sharcshm");
    });

// Misuse is refused before anything is posted, naming the rank and the call; after the
// refusals the communicator still works.
TEST(AnySource, RefusalsNameTheRankAndTheReason) {
  runRanks(
      2,
      [](const RankContext&) {
        auto comm = Communicator::createFromEnvironment();
        const int r = comm->rank();
        const auto limit = std::chrono::seconds(30);
        auto alone = comm->split(r, 0);  // a communicator of one rank
        auto [code, what] = errorOf([&] { alone->irecvAny(nullptr, 0); });
        EXPECT_EQ(code, Result::InvalidUsage);
        EXPECT_TRUE(contains(what, "rank 0: recv from any source") && contains(what, "no other"))
            << what;
        std::tie(code, what) = errorOf([&] { comm->irecvAny(nullptr, 8); });
        EXPECT_EQ(code, Result::InvalidArgument) << what;
        if (r == 0) {
          int value = 0;
          Request any = comm->irecvAny(&value, sizeof value, 3);
          // Another receive on the tag must wait for the pending one (its match comes first).
          int other = 0;
          std::tie(code, what) = errorOf([&] { comm->irecv(&other, sizeof other, 1, 3); });
          EXPECT_EQ(code, Result::InvalidUsage);
          EXPECT_TRUE(contains(what, "rank 0") && contains(what, "receive from rank 1 (tag 3)") &&
                      contains(what, "any source"))
              << what;
          std::tie(code, what) = errorOf([&] { comm->irecvAny(&other, sizeof other, 3); });
          EXPECT_EQ(code, Result::InvalidUsage);
          EXPECT_TRUE(contains(what, "another receive from any source on tag 3")) << what;
          // Another tag is free.
          comm->irecv(&other, sizeof other, 1, 4).wait(limit);
          EXPECT_EQ(other, 44);
          any.wait(limit);
          EXPECT_EQ(any.source(), 1);
          EXPECT_EQ(value, 33);
        } else {
          const int a = 33, b = 44;
          comm->isend(&a, sizeof a, 0, 3).wait(limit);
          comm->isend(&b, sizeof b, 0, 4).wait(limit);
        }
        comm->barrier();
      },
      tcpOptions());
}

// A message of another size than the receive asks for fails the receive as a mismatched
// count.
TEST(AnySource, MismatchedSizeFailsTheCall) {
  runRanks(
      2,
      [](const RankContext&) {
        auto comm = Communicator::createFromEnvironment();
        std::vector<uint8_t> buf(64);
        if (comm->rank() == 0) {
          auto [code, what] = errorOf([&] { comm->irecvAny(buf.data(), 64).wait(); });
          EXPECT_EQ(code, Result::InvalidUsage);
          EXPECT_TRUE(contains(what, "mismatched count")) << what;
        } else {
          errorOf([&] { comm->isend(buf.data(), 32, 0).wait(); });
        }
      },
      shortTimeout());
}

// A receive from any source whose peers never send, one of them dead, ends in an error on
// the waiting rank within the timeout rather than waiting forever.
TEST(AnySource, DeadPeerEndsTheWaitWithAnError) {
  RunOptions o = shortTimeout();
  o.mayFail = {2};
  runRanks(
      3,
      [](const RankContext&) {
        auto comm = Communicator::createFromEnvironment();
        comm->barrier();
        if (comm->rank() == 2) std::_Exit(3);
        if (comm->rank() == 0) {
          int value = 0;
          const auto [code, what] = errorOf([&] { comm->irecvAny(&value, sizeof value).wait(); });
          EXPECT_NE(code, Result::Success);
          EXPECT_TRUE(contains(what, "rank 0")) << what;
        } else {
          std::this_thread::sleep_for(std::chrono::seconds(6));
        }
      },
      o);
}

}  // namespace
}  // namespace sharc::testing

// Every close path of the NCCL plugins returns within a bound when the peer is dead
// (SIGKILL) or stopped (SIGSTOP), with requests still in flight: NCCL's abort closes every
// comm this way, and the net API cannot tell it from a normal close (aws-ofi-nccl hung
// there waiting for a close message). Net: closeSend, closeRecv, closeListen, finalize.
// CollNet: closeColl (with a request in flight, and idle) and finalize.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "collnet_driver.hpp"
#include "multiprocess.hpp"

namespace sharc::testing::nccl {
namespace {

constexpr size_t MiB = size_t{1} << 20;
// A close waits at most 1 s for canceled transfers (net) or 2 s for its closing barrier
// (CollNet, idle only); the rest is slack for two loaded cores.
constexpr double kNetCloseBoundS = 3.0;
// A second send comm towards a peer the first close found unresponsive does not wait.
constexpr double kNetCloseAgainBoundS = 0.5;
constexpr double kCollCloseBoundS = 4.0;

double timedS(const std::function<ncclResult_t()>& call, ncclResult_t* result = nullptr) {
  const Deadline clock(seconds(0));
  const ncclResult_t r = call();
  if (result) *result = r;
  return clock.elapsedS();
}

// Rank 1 tells rank 0 its pid, then waits to be killed or stopped by rank 0.
void victim(const Oob& oob) {
  oob.send(1, 0, std::to_string(getpid()));
  (void)oob.recv(1, 0, seconds(120));  // never answered: rank 0 kills this process
}

pid_t victimPid(const Oob& oob) {
  return static_cast<pid_t>(std::stol(oob.recv(0, 1)));
}

// After a SIGSTOP the closes are done: the stopped rank is not coming back.
void finishVictim(pid_t pid, int sig) {
  if (sig == SIGSTOP) kill(pid, SIGKILL);
}

RunOptions closeOptions(const std::string& provider) {
  RunOptions o;
  o.env["SHARC_FI_PROVIDER"] = provider;
  o.env["SHARC_TIMEOUT_MS"] = "30000";  // far above the bounds: a close must not wait for it
  o.oneRankPerNode = provider == "tcp;ofi_rxm";
  o.mayFail = {1};  // killed on purpose
  o.timeout = seconds(120);
  return o;
}

const char* signalName(int sig) {
  return sig == SIGKILL ? "SIGKILL" : "SIGSTOP";
}

// ---- net ------------------------------------------------------------------------------------

using NetCloseParam = std::tuple<std::string, int>;  // provider, signal
class NetClose : public ::testing::TestWithParam<NetCloseParam> {};

// A receive nobody sends to and a 16 MiB send nobody receives are in flight on each of two
// connections when the peer dies or stops; every close (NCCL's order: deregister, then
// close) and finalize return within the bound, and the second send comm's close does not
// wait again for a peer the first one found unresponsive.
TEST_P(NetClose, BoundedWhenThePeerIsGone) {
  // Plain variables, not a structured binding: clang 14 cannot capture one in a lambda.
  const std::string provider = std::get<0>(GetParam());
  const int sig = std::get<1>(GetParam());
  Oob oob(2);
  runRanks(
      2,
      [&](const RankContext& ctx) {
        Plugin p = Plugin::open(11);
        Net& net = *p.net;
        Conn conns[2] = {connectPeers(p, oob, ctx.rank, 1 - ctx.rank),
                         connectPeers(p, oob, ctx.rank, 1 - ctx.rank)};
        if (ctx.rank == 1) return victim(oob);
        const pid_t peer = victimPid(oob);
        std::vector<std::unique_ptr<Buffer>> buffers;
        std::vector<void*> recvReqs;
        for (Conn& c : conns) {
          Buffer& in = *buffers.emplace_back(std::make_unique<Buffer>(MiB));
          Buffer& out = *buffers.emplace_back(std::make_unique<Buffer>(16 * MiB));
          in.reg(net, c.recv);
          out.reg(net, c.send);
          void *recvReq = nullptr, *sendReq = nullptr;
          size_t size = MiB;
          int tag = 1;
          void* data[1] = {in.data()};
          void* mh[1] = {in.mhandle()};
          for (const Deadline d(seconds(5)); !recvReq && !d.expired(); sched_yield())
            NET_CHECK(net.irecv(c.recv, 1, data, &size, &tag, mh, &recvReq));
          for (const Deadline d(seconds(1)); !sendReq && !d.expired(); sched_yield())
            NET_CHECK(net.isend(c.send, out.data(), 16 * MiB, 1, out.mhandle(), &sendReq));
          if (!recvReq) fail("irecv gave no request within 5 s");
          recvReqs.push_back(recvReq);
        }
        if (kill(peer, sig) != 0) fail("kill failed");
        std::this_thread::sleep_for(milliseconds(100));
        for (void* req : recvReqs) {
          int done = 0, sizes[8] = {};
          (void)net.test(req, &done, sizes);  // an error is fine; a completion is not
          if (done) fail("a receive nobody sent to completed");
        }
        for (auto& b : buffers) b->dereg();
        double send[2], recv[2], listen[2];
        for (int i = 0; i < 2; ++i) {
          send[i] = timedS([&] { return net.closeSend(conns[i].send); });
          recv[i] = timedS([&] { return net.closeRecv(conns[i].recv); });
          listen[i] = timedS([&] { return net.closeListen(conns[i].listen); });
        }
        ncclResult_t finalized = ncclSuccess;
        const double fin = timedS([&] { return net.finalize(p.ctx); }, &finalized);
        finishVictim(peer, sig);
        std::fprintf(stderr,
                     "%s, peer %s: closeSend %.3f s then %.3f s, closeRecv %.3f s, %.3f s, "
                     "closeListen %.3f s, %.3f s, finalize %.3f s\n",
                     provider.c_str(), signalName(sig), send[0], send[1], recv[0], recv[1],
                     listen[0], listen[1], fin);
        for (int i = 0; i < 2; ++i) {
          EXPECT_LT(send[i], i == 0 ? kNetCloseBoundS : kNetCloseAgainBoundS);
          EXPECT_LT(recv[i], kNetCloseBoundS);
          EXPECT_LT(listen[i], kNetCloseBoundS);
        }
        EXPECT_LT(fin, kNetCloseBoundS);
        EXPECT_EQ(finalized, ncclSuccess);
      },
      closeOptions(provider));
}

INSTANTIATE_TEST_SUITE_P(All, NetClose,
                         ::testing::Combine(::testing::Values(std::string("tcp;ofi_rxm"),
                                                              std::string("shm")),
                                            ::testing::Values(SIGKILL, SIGSTOP)),
                         [](const ::testing::TestParamInfo<NetCloseParam>& info) {
                           return std::string(std::get<0>(info.param) == "shm" ? "shm" : "tcp") +
                                  "_" + signalName(std::get<1>(info.param));
                         });

// ---- CollNet --------------------------------------------------------------------------------

using CollCloseParam = std::tuple<bool, int>;  // a request in flight, signal
class CollNetClose : public ::testing::TestWithParam<CollCloseParam> {};

// Rank 0 has an all-reduce in flight that rank 1 never joins (NCCL aborting), or nothing
// (NCCL destroying normally while the peer hangs elsewhere); rank 1 dies or stops; closeColl
// and finalize return within the bound, and an in-flight close takes no closing barrier.
TEST_P(CollNetClose, BoundedWhenThePeerIsGone) {
  const bool inFlight = std::get<0>(GetParam());
  const int sig = std::get<1>(GetParam());
  Oob oob(2);
  RunOptions o = closeOptions("tcp;ofi_rxm");
  o.oneRankPerNode = false;  // one host: sharc's shared-memory transport between the ranks
  runRanks(
      2,
      [&](const RankContext& ctx) {
        auto session = std::make_unique<CollSession>(11, oob, ctx.rank, 2);
        CollSession& s = *session;
        if (ctx.rank == 1) return victim(oob);
        const pid_t peer = victimPid(oob);
        std::vector<float> a(1 << 16, 1.0f), b(a.size());
        void *ma = nullptr, *mb = nullptr, *req = nullptr;
        NET_CHECK(s.net->regMr(s.comm, a.data(), a.size() * 4, NCCL_PTR_HOST, &ma));
        NET_CHECK(s.net->regMr(s.comm, b.data(), b.size() * 4, NCCL_PTR_HOST, &mb));
        if (inFlight) {
          NET_CHECK(s.net->iallreduce(s.comm, a.data(), b.data(), a.size(), ncclFloat32, ncclSum,
                                      ma, mb, &req));
          int done = 0, size = 0;
          NET_CHECK(s.net->test(req, &done, &size));
          if (done) fail("an all-reduce rank 1 never joined completed");
        } else {
          NET_CHECK(s.net->deregMr(s.comm, ma));
          NET_CHECK(s.net->deregMr(s.comm, mb));
        }
        if (kill(peer, sig) != 0) fail("kill failed");
        std::this_thread::sleep_for(milliseconds(100));
        void* comm = std::exchange(s.comm, nullptr);
        ncclResult_t closed = ncclSuccess;
        const double close = timedS([&] { return s.net->closeColl(comm); }, &closed);
        const double fin = timedS([&] {
          session.reset();  // finalize (comm is closed already)
          return ncclSuccess;
        });
        finishVictim(peer, sig);
        std::fprintf(stderr, "CollNet, %s, peer %s: closeColl %.3f s, finalize %.3f s\n",
                     inFlight ? "an all-reduce in flight" : "idle", signalName(sig), close, fin);
        EXPECT_EQ(closed, ncclSuccess);
        // In flight, NCCL is aborting: no barrier, so well under the 2 s closing wait.
        EXPECT_LT(close, inFlight ? 1.0 : kCollCloseBoundS);
        EXPECT_LT(fin, kNetCloseBoundS);
      },
      o);
}

INSTANTIATE_TEST_SUITE_P(All, CollNetClose,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(SIGKILL, SIGSTOP)),
                         [](const ::testing::TestParamInfo<CollCloseParam>& info) {
                           return std::string(std::get<0>(info.param) ? "InFlight" : "Idle") + "_" +
                                  signalName(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace sharc::testing::nccl

// The net plugin (ncclNetPlugin_v8..v11 of libnccl-net-sharc.so) driven as NCCL's proxy drives
// it, every test for every exported version over "tcp;ofi_rxm" and "shm": ranks are forked
// processes that each dlopen the plugin, handles travel out of band (plugin_driver.hpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <thread>

#include "net_fixture.hpp"

namespace sharc::testing::nccl {
namespace {

class NetPlugin : public NetPluginFixture {};

// ---------------------------------------------------------------------------------------------

TEST_P(NetPlugin, InitDevicesProperties) {
  run(1, [&](Rank& r) {
    const Props& pr = r.p.props;
    for (int dev = 0; dev < r.p.ndev; ++dev) {
      Props p;
      NET_CHECK(r.net().getProperties(dev, &p));
      SCOPED_TRACE("dev " + std::to_string(dev) + " (" + p.name + ")");
      EXPECT_FALSE(p.name.empty());
      // Exactly host memory: this process never loads CUDA (test_net_plugin_memory.cc).
      EXPECT_EQ(p.ptrSupport, NCCL_PTR_HOST);
      EXPECT_EQ(p.regIsGlobal, 1);
      EXPECT_GT(p.maxComms, 0);
      EXPECT_GT(p.speed, 0);
      EXPECT_GE(p.maxRecvs, 1);
      EXPECT_LE(p.maxRecvs, 8);
      EXPECT_GE(p.latency, 0.0f);
      EXPECT_EQ(p.netDeviceType, NCCL_NET_DEVICE_HOST);
      if (r.net().version() >= 9) {
        EXPECT_GT(p.maxRecvs, 1);
        EXPECT_EQ(p.vProps.ndevs, 1);
        EXPECT_EQ(p.vProps.devs[0], dev);
        EXPECT_GE(p.maxP2pBytes, 64 * MiB);
        EXPECT_GT(p.maxCollBytes, 0u);
      }
      if (r.net().version() == 11) {
        EXPECT_GE(p.maxMultiRequestSize, 1);
        EXPECT_LE(p.maxMultiRequestSize, 1024);
      }
    }
    Props ignored;
    EXPECT_NE(r.net().getProperties(r.p.ndev, &ignored), ncclSuccess) << "dev == ndev";
    EXPECT_NE(r.net().getProperties(-1, &ignored), ncclSuccess) << "dev == -1";

    // NCCL initializes once per communicator (v11: a context each); devices stay the same.
    void* ctx2 = nullptr;
    NET_CHECK(r.net().init(&ctx2, 0x1234));
    if (r.net().version() == 11 && ctx2 == nullptr) ADD_FAILURE() << "v11 init gave no context";
    int ndev2 = 0;
    NET_CHECK(r.net().devices(&ndev2));
    EXPECT_EQ(ndev2, r.p.ndev);
    if (const ncclNet_v11_t* v11 = r.net().v11(); v11 && v11->setNetAttr) {
      ncclNetAttr_v11_t attr{};
      attr.sendCommAttr = {8, 1, 4, 1};
      attr.recvCommAttr = {8, 1, 4, 1};
      EXPECT_EQ(v11->setNetAttr(ctx2, &attr), ncclSuccess);
    }
    NET_CHECK(r.net().finalize(ctx2));
    std::fprintf(stderr, "v%d %s: ndev %d, dev 0 '%s' speed %d maxComms %d maxRecvs %d\n",
                 r.net().version(), provider().c_str(), r.p.ndev, pr.name.c_str(), pr.speed,
                 pr.maxComms, pr.maxRecvs);
  });
}

// Rank 0 listens and rank 1 connects, then the reverse, then both at once (connectPeers);
// each connection carries a message.
TEST_P(NetPlugin, ConnectEachDirectionAndBothAtOnce) {
  run(2, [&](Rank& r) {
    std::vector<void*> sends, recvs, listens;
    for (int listener = 0; listener < 2; ++listener) {
      const Deadline deadline(seconds(30));
      if (r.rank == listener) {
        char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
        void* lc = nullptr;
        NET_CHECK(r.net().listen(r.p.ctx, r.p.dev, handle, &lc));
        ASSERT_NE(lc, nullptr);
        r.oob.send(r.rank, r.peer(), std::string(handle, sizeof(handle)));
        // A proxy busy elsewhere: the peer's connect calls must not block meanwhile.
        if (listener == 0) std::this_thread::sleep_for(milliseconds(1500));
        void* rc = nullptr;
        while (!rc) {
          NET_CHECK(r.net().accept(lc, &rc));
          if (deadline.expired()) fail("accept: no recvComm after 30 s");
          sched_yield();
        }
        Buffer in(4096);
        in.reg(r.net(), rc);
        std::vector<Op> ops{recvOp(r.net(), rc, {in.data()}, {4096}, {9}, {in.mhandle()}, {100},
                                   {seedOf(r.peer(), 9, listener)}, "irecv")};
        runOps(r.net(), ops);
        in.dereg();
        recvs.push_back(rc);
        listens.push_back(lc);
      } else {
        std::string handle = r.oob.recv(r.rank, listener);
        void* sc = nullptr;
        while (!sc) {
          NET_CHECK(r.net().connect(r.p.ctx, r.p.dev, handle.data(), &sc));
          if (deadline.expired()) fail("connect: no sendComm after 30 s");
          sched_yield();
        }
        Buffer out(100);
        out.reg(r.net(), sc);
        fillPattern(out.data(), 100, seedOf(r.rank, 9, listener));
        std::vector<Op> ops{sendOp(r.net(), sc, out.data(), 100, 9, out.mhandle(), "isend")};
        runOps(r.net(), ops);
        out.dereg();
        sends.push_back(sc);
      }
    }
    Conn both = connectPeers(r.p, r.oob, r.rank, r.peer());
    exchange(r, both, 1000, 3, 0);
    r.oob.barrier(r.rank);
    closeConn(r.net(), both);
    for (void* c : sends) NET_CHECK(r.net().closeSend(c));
    for (void* c : recvs) NET_CHECK(r.net().closeRecv(c));
    for (void* c : listens) NET_CHECK(r.net().closeListen(c));
  });
}

// Three listens on rank 0, connects and accepts round-robin, each connection checked to be the
// one its handle named (v11: the third one in a second context on both sides).
TEST_P(NetPlugin, SeveralConnectionsAtOnce) {
  constexpr int kConns = 3;
  run(2, [&](Rank& r) {
    void* ctx2 = nullptr;
    NET_CHECK(r.net().init(&ctx2, 0xc0ffee));
    auto ctxOf = [&](int i) { return i == kConns - 1 && ctx2 ? ctx2 : r.p.ctx; };
    std::array<void*, kConns> comms{};
    std::array<void*, kConns> listens{};
    const Deadline deadline(seconds(30));
    if (r.rank == 0) {
      for (int i = 0; i < kConns; ++i) {
        char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
        NET_CHECK(r.net().listen(ctxOf(i), r.p.dev, handle, &listens[i]));
        r.oob.send(0, 1, std::string(handle, sizeof(handle)));
      }
      for (int left = kConns; left > 0;) {
        for (int i = 0; i < kConns; ++i)
          if (!comms[i]) {
            NET_CHECK(r.net().accept(listens[i], &comms[i]));
            if (comms[i]) --left;
          }
        if (deadline.expired()) fail("accepts not done after 30 s");
        sched_yield();
      }
      std::vector<std::unique_ptr<Buffer>> bufs;
      std::vector<Op> ops;
      for (int i = 0; i < kConns; ++i) {
        bufs.push_back(std::make_unique<Buffer>(4096));
        bufs.back()->reg(r.net(), comms[i]);
        ops.push_back(recvOp(r.net(), comms[i], {bufs.back()->data()}, {4096}, {1},
                             {bufs.back()->mhandle()}, {500u + i}, {seedOf(1, 1, i)},
                             "irecv on connection " + std::to_string(i)));
      }
      runOps(r.net(), ops);
      for (auto& b : bufs) b->dereg();
    } else {
      std::array<std::string, kConns> handles;
      for (auto& h : handles) h = r.oob.recv(1, 0);
      for (int left = kConns; left > 0;) {
        for (int i = 0; i < kConns; ++i)
          if (!comms[i]) {
            NET_CHECK(r.net().connect(ctxOf(i), r.p.dev, handles[i].data(), &comms[i]));
            if (comms[i]) --left;
          }
        if (deadline.expired()) fail("connects not done after 30 s");
        sched_yield();
      }
      std::vector<std::unique_ptr<Buffer>> bufs;
      std::vector<Op> ops;
      for (int i = 0; i < kConns; ++i) {
        bufs.push_back(std::make_unique<Buffer>(500 + i));
        bufs.back()->reg(r.net(), comms[i]);
        fillPattern(bufs.back()->data(), 500 + i, seedOf(1, 1, i));
        ops.push_back(sendOp(r.net(), comms[i], bufs.back()->data(), 500 + i, 1,
                             bufs.back()->mhandle(), "isend on connection " + std::to_string(i)));
      }
      runOps(r.net(), ops);
      for (auto& b : bufs) b->dereg();
    }
    r.oob.barrier(r.rank);
    for (int i = 0; i < kConns; ++i) {
      NET_CHECK(r.rank == 0 ? r.net().closeRecv(comms[i]) : r.net().closeSend(comms[i]));
      if (listens[i]) NET_CHECK(r.net().closeListen(listens[i]));
    }
    NET_CHECK(r.net().finalize(ctx2));
  });
}

// Sizes 0 B .. 16 MiB (64 MiB on v11), both directions at once, from and into one registered
// region per comm (as NCCL registers its buffers once).
TEST_P(NetPlugin, TaggedSendsOfEverySize) {
  run(
      2,
      [&](Rank& r) {
        std::vector<size_t> sizes = {0, 1, 7, 4096, 65537, MiB, 16 * MiB};
        if (r.net().version() == 11) sizes.push_back(64 * MiB);
        const size_t max = sizes.back();
        Conn c = connectPeers(r.p, r.oob, r.rank, r.peer());
        Buffer out(max), in(max);
        out.reg(r.net(), c.send);
        in.reg(r.net(), c.recv);
        for (size_t k = 0; k < sizes.size(); ++k) {
          const size_t n = sizes[k];
          const int tag = static_cast<int>(k) + 1;
          fillPattern(out.data(), n, seedOf(r.rank, tag, static_cast<int>(n)));
          std::memset(in.data(), 0xEE, std::min(max, n + 64));
          std::vector<Op> ops;
          ops.push_back(recvOp(r.net(), c.recv, {in.data()}, {n}, {tag}, {in.mhandle()}, {n},
                               {seedOf(r.peer(), tag, static_cast<int>(n))},
                               "irecv " + std::to_string(n) + " B"));
          ops.push_back(sendOp(r.net(), c.send, out.data(), n, tag, out.mhandle(),
                               "isend " + std::to_string(n) + " B"));
          runOps(r.net(), ops, seconds(60));
        }
        r.oob.barrier(r.rank);
        out.dereg();
        in.dereg();
        closeConn(r.net(), c);
      },
      options(seconds(180)));
}

TEST_P(NetPlugin, ReceiveBufferLargerThanSend) {
  run(2, [&](Rank& r) {
    Conn c = connectPeers(r.p, r.oob, r.rank, r.peer());
    if (r.rank == 0) {
      Buffer in(MiB);
      std::memset(in.data(), 0xEE, MiB);
      in.reg(r.net(), c.recv);
      std::vector<Op> ops{recvOp(r.net(), c.recv, {in.data()}, {MiB}, {4}, {in.mhandle()}, {1000},
                                 {seedOf(1, 4, 0)}, "irecv 1 MiB for a 1000 B send")};
      runOps(r.net(), ops);
      for (size_t i = 1000; i < 1000 + 8192; ++i)
        if (in.data()[i] != 0xEE) fail("byte " + std::to_string(i) + " past the message written");
      in.dereg();
    } else {
      Buffer out(1000);
      fillPattern(out.data(), 1000, seedOf(1, 4, 0));
      out.reg(r.net(), c.send);
      std::vector<Op> ops{sendOp(r.net(), c.send, out.data(), 1000, 4, out.mhandle(), "isend")};
      runOps(r.net(), ops);
      out.dereg();
    }
    r.oob.barrier(r.rank);
    closeConn(r.net(), c);
  });
}

// One irecv of n = min(maxRecvs, 8) buffers with distinct tags; the peer sends them in reverse
// order; each buffer must get its tag's message and size. Both directions at once.
TEST_P(NetPlugin, GroupedReceives) {
  run(2, [&](Rank& r) {
    const int maxRecvs = r.p.props.maxRecvs;
    if (maxRecvs <= 1) {
      if (r.net().version() >= 9) fail("maxRecvs " + std::to_string(maxRecvs) + " on v9+");
      std::fprintf(stderr, "v8 reports maxRecvs 1: no grouped receives to test\n");
      return;
    }
    const int n = std::min(maxRecvs, 8);
    Conn c = connectPeers(r.p, r.oob, r.rank, r.peer());
    std::vector<std::unique_ptr<Buffer>> ins, outs;
    std::vector<uint8_t*> data;
    std::vector<size_t> capacity, sent;
    std::vector<int> tags;
    std::vector<void*> mhs;
    std::vector<uint64_t> seeds;
    for (int i = 0; i < n; ++i) {
      capacity.push_back(8192 + 30000 * static_cast<size_t>(i));
      sent.push_back(capacity.back() - 100 * static_cast<size_t>(i));
      tags.push_back(1000 + 37 * i);
      ins.push_back(std::make_unique<Buffer>(capacity.back()));
      ins.back()->reg(r.net(), c.recv);
      data.push_back(ins.back()->data());
      mhs.push_back(ins.back()->mhandle());
      seeds.push_back(seedOf(r.peer(), tags.back(), i));
      outs.push_back(std::make_unique<Buffer>(sent.back()));
      outs.back()->reg(r.net(), c.send);
      fillPattern(outs.back()->data(), sent.back(), seedOf(r.rank, tags.back(), i));
    }
    std::vector<Op> ops;
    ops.push_back(recvOp(r.net(), c.recv, data, capacity, tags, mhs, sent, seeds,
                         "grouped irecv of " + std::to_string(n)));
    for (int i = n - 1; i >= 0; --i)
      ops.push_back(sendOp(r.net(), c.send, outs[i]->data(), sent[i], tags[i], outs[i]->mhandle(),
                           "isend tag " + std::to_string(tags[i])));
    runOps(r.net(), ops);
    r.oob.barrier(r.rank);
    for (auto& b : ins) b->dereg();
    for (auto& b : outs) b->dereg();
    closeConn(r.net(), c);
  });
}

// NCCL_NET_MAX_REQUESTS (32) isends and 32 irecvs per comm posted before any test, both
// directions; a NULL request is retried later, as NCCL does.
TEST_P(NetPlugin, ThirtyTwoRequestsInFlight) {
  run(2, [&](Rank& r) {
    constexpr int kReqs = NCCL_NET_MAX_REQUESTS;
    auto sizeOf = [](int k) { return 1 + (static_cast<size_t>(k) * 7919 * 13) % 200000; };
    std::vector<size_t> offset(kReqs + 1, 0);
    for (int k = 0; k < kReqs; ++k) offset[k + 1] = offset[k] + sizeOf(k);
    Conn c = connectPeers(r.p, r.oob, r.rank, r.peer());
    Buffer out(offset.back()), in(offset.back());
    out.reg(r.net(), c.send);
    in.reg(r.net(), c.recv);
    std::vector<Op> ops;
    for (int k = 0; k < kReqs; ++k)
      ops.push_back(recvOp(r.net(), c.recv, {in.data() + offset[k]}, {sizeOf(k)}, {k},
                           {in.mhandle()}, {sizeOf(k)}, {seedOf(r.peer(), k, k)},
                           "irecv #" + std::to_string(k)));
    for (int k = 0; k < kReqs; ++k) {
      fillPattern(out.data() + offset[k], sizeOf(k), seedOf(r.rank, k, k));
      ops.push_back(sendOp(r.net(), c.send, out.data() + offset[k], sizeOf(k), k, out.mhandle(),
                           "isend #" + std::to_string(k)));
    }
    runOps(r.net(), ops);
    r.oob.barrier(r.rank);
    out.dereg();
    in.dereg();
    closeConn(r.net(), c);
  });
}

// Several sends with one tag are received in the order they were sent.
TEST_P(NetPlugin, SameTagReceivedInOrder) {
  run(2, [&](Rank& r) {
    constexpr int kMsgs = 8;
    constexpr size_t kCap = 70000;
    auto sizeOf = [](int k) { return static_cast<size_t>(100 + 9000 * k); };
    Conn c = connectPeers(r.p, r.oob, r.rank, r.peer());
    Buffer out(kCap * kMsgs), in(kCap * kMsgs);
    out.reg(r.net(), c.send);
    in.reg(r.net(), c.recv);
    std::vector<Op> ops;
    for (int k = 0; k < kMsgs; ++k)
      ops.push_back(recvOp(r.net(), c.recv, {in.data() + k * kCap}, {kCap}, {5}, {in.mhandle()},
                           {sizeOf(k)}, {seedOf(r.peer(), 5, k)},
                           "irecv #" + std::to_string(k) + " of tag 5"));
    for (int k = 0; k < kMsgs; ++k) {
      fillPattern(out.data() + k * kCap, sizeOf(k), seedOf(r.rank, 5, k));
      ops.push_back(sendOp(r.net(), c.send, out.data() + k * kCap, sizeOf(k), 5, out.mhandle(),
                           "isend #" + std::to_string(k) + " of tag 5"));
    }
    runOps(r.net(), ops);
    r.oob.barrier(r.rank);
    out.dereg();
    in.dereg();
    closeConn(r.net(), c);
  });
}

INSTANTIATE_TEST_SUITE_P(Versions, NetPlugin, allVersionsAndProviders(), paramName);

}  // namespace
}  // namespace sharc::testing::nccl

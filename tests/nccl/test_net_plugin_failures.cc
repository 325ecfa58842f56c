// The net plugin under misuse and failure, for every exported version over "tcp;ofi_rxm" and
// "shm": closing with requests pending, peers that die, malformed handles, buffers outside
// their registration, and unloading the library once everything is closed (memory the plugin
// refuses: test_net_plugin_memory.cc). Every error must come back as a result (never a
// crash, never a hang).
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <random>
#include <thread>

#include "core/hash.hpp"
#include "net_fixture.hpp"

namespace sharc::testing::nccl {
namespace {

class NetPluginFailure : public NetPluginFixture {};

void sleepMs(int ms) {
  std::this_thread::sleep_for(milliseconds(ms));
}

/// How a call that should fail ended: "" when it returned an error, else what went wrong.
/// `call` is retried while it returns ncclSuccess and no object (NCCL's "try again").
std::string expectErrorEventually(const std::function<ncclResult_t(void**)>& call,
                                  milliseconds timeout, double* seconds = nullptr,
                                  double* longestCall = nullptr) {
  const Deadline deadline(timeout);
  for (;;) {
    void* out = nullptr;
    const Deadline one(timeout);
    const ncclResult_t r = call(&out);
    if (longestCall) *longestCall = std::max(*longestCall, one.elapsedS());
    if (seconds) *seconds = deadline.elapsedS();
    if (r != ncclSuccess) return "";
    if (out) return "succeeded";
    if (deadline.expired()) return "still returning ncclSuccess and NULL after the deadline";
    sched_yield();
  }
}

/// Posts a request (retrying NULL), then tests it: "" when the post or a test returned an
/// error within `timeout`, else what happened instead.
std::string expectRequestError(Net& net, const std::function<ncclResult_t(void**)>& post,
                               milliseconds timeout, double* seconds) {
  const Deadline deadline(timeout);
  void* request = nullptr;
  for (;;) {
    *seconds = deadline.elapsedS();
    if (!request) {
      if (post(&request) != ncclSuccess) return "";
    } else {
      int done = 0, sizes[8] = {};
      if (net.test(request, &done, sizes) != ncclSuccess) return "";
      if (done) return "request completed successfully";
    }
    if (deadline.expired())
      return request ? "test still not done (and no error) after the deadline"
                     : "post still returning no request after the deadline";
    sched_yield();
  }
}

// Receives that never match, sends nobody receives and a connect never accepted, then every
// comm closed: the closes return, nothing crashes afterwards.
TEST_P(NetPluginFailure, CloseWithRequestsPending) {
  run(2, [&](Rank& r) {
    Conn a = connectPeers(r.p, r.oob, r.rank, r.peer());
    Conn b = connectPeers(r.p, r.oob, r.rank, r.peer());
    Conn& mine = r.rank == 0 ? a : b;  // the peer posts nothing on this pair
    Buffer in(16 * MiB), out(16 * MiB);
    in.reg(r.net(), mine.recv);
    out.reg(r.net(), mine.send);
    void* recvReq = nullptr;
    void* sendReq = nullptr;
    size_t size = 16 * MiB;
    int tag = 1;
    void* data[1] = {in.data()};
    void* mh[1] = {in.mhandle()};
    for (const Deadline d(seconds(5)); !recvReq && !d.expired(); sched_yield())
      NET_CHECK(r.net().irecv(mine.recv, 1, data, &size, &tag, mh, &recvReq));
    if (!recvReq) fail("irecv gave no request within 5 s on an idle comm");
    for (const Deadline d(seconds(1)); !sendReq && !d.expired(); sched_yield())
      NET_CHECK(r.net().isend(mine.send, out.data(), 16 * MiB, 2, out.mhandle(), &sendReq));

    // A connection that is never accepted: rank 0 listens, rank 1 connects.
    void* extra = nullptr;
    if (r.rank == 0) {
      char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
      NET_CHECK(r.net().listen(r.p.ctx, r.p.dev, handle, &extra));
      r.oob.send(0, 1, std::string(handle, sizeof(handle)));
    } else {
      std::string handle = r.oob.recv(1, 0);
      for (int i = 0; i < 20 && !extra; ++i, sleepMs(10))
        NET_CHECK(r.net().connect(r.p.ctx, r.p.dev, handle.data(), &extra));
    }
    int done = 0, sizes[8];
    NET_CHECK(r.net().test(recvReq, &done, sizes));
    if (done) fail("a receive nobody sent to completed");
    r.oob.barrier(r.rank);

    // NCCL's teardown order: deregister, then close.
    in.dereg();
    out.dereg();
    closeConn(r.net(), a);
    closeConn(r.net(), b);
    if (extra) NET_CHECK(r.rank == 0 ? r.net().closeListen(extra) : r.net().closeSend(extra));
    sleepMs(300);  // a crash in the plugin's background work after the closes shows up here
    std::fprintf(stderr, "rank %d: closed with recv%s pending\n", r.rank,
                 sendReq ? " and send" : " (isend gave no request)");
  });
}

// Rank 1 connects, then exits without closing anything while rank 0 waits on it: on a
// receive (receiverWaits) or on a 16 MiB send nobody receives. Rank 0's request must fail
// within 60 s rather than hang.
void peerDies(Rank& r, bool receiverWaits, const std::string& label) {
  Conn c = connectPeers(r.p, r.oob, r.rank, r.peer());
  if (r.rank == 1) {
    (void)r.oob.recv(1, 0, seconds(90));
    _exit(0);  // no close, no finalize: a crashed process
  }
  const size_t bytes = receiverWaits ? MiB : 16 * MiB;
  Buffer b(bytes);
  fillPattern(b.data(), bytes, 1);
  void* comm = receiverWaits ? c.recv : c.send;
  b.reg(r.net(), comm);
  double took = 0;
  bool told = false;
  const std::string bad = expectRequestError(
      r.net(),
      [&](void** req) {
        ncclResult_t res;
        if (receiverWaits) {
          size_t size = bytes;
          int tag = 1;
          void* data[1] = {b.data()};
          void* mh[1] = {b.mhandle()};
          res = r.net().irecv(c.recv, 1, data, &size, &tag, mh, req);
        } else {
          res = r.net().isend(c.send, b.data(), bytes, 1, b.mhandle(), req);
        }
        // The receive is posted before rank 1 dies; the send is tried once (NULL or not).
        if (!told && (*req || !receiverWaits)) {
          r.oob.send(0, 1, "die");
          told = true;
        }
        return res;
      },
      seconds(60), &took);
  if (!bad.empty())
    fail(std::string(receiverWaits ? "irecv from" : "isend of 16 MiB to") + " a dead peer" + label +
         ": " + bad);
  std::fprintf(stderr, "v%d: dead %s detected by the %s%s after %.1f s\n", r.net().version(),
               receiverWaits ? "sender" : "receiver", receiverWaits ? "receiver" : "sender",
               label.c_str(), took);
  // The comms to the dead peer must still close (results ignored: the peer is gone).
  b.dereg();
  r.net().closeSend(c.send);
  r.net().closeRecv(c.recv);
  r.net().closeListen(c.listen);
}

TEST_P(NetPluginFailure, PeerDiesWhileReceiving) {
  run(2, [&](Rank& r) { peerDies(r, true, ""); });
}
TEST_P(NetPluginFailure, PeerDiesWhileSending) {
  run(2, [&](Rank& r) { peerDies(r, false, ""); });
}

// Each rank in its own pid namespace: the plugin cannot see the peer's process (as on another
// host), so only the fabric can tell it died. The rank process forks the namespace's first
// process, which runs the test and whose status the rank exits with.
bool canMakePidNamespace() {
  const pid_t probe = fork();
  if (probe == 0) _exit(unshare(CLONE_NEWPID) == 0 ? 0 : 1);
  int status = 1;
  waitpid(probe, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}
void enterOwnPidNamespace(int) {
  if (unshare(CLONE_NEWPID) != 0) fail("unshare(CLONE_NEWPID) failed");
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child < 0) fail("fork failed");
  if (child > 0) {
    int status = 0;
    waitpid(child, &status, 0);
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // the harness kills the rank on timeout: follow it
}

TEST_P(NetPluginFailure, PeerOnAnotherHostDiesWhileReceiving) {
  if (provider() == "shm") GTEST_SKIP() << "shm only connects processes of one host";
  if (version() != 11) GTEST_SKIP() << "liveness is version-independent: v11 covers it";
  if (!canMakePidNamespace()) GTEST_SKIP() << "no pid namespaces here";
  run(
      2, [&](Rank& r) { peerDies(r, true, " on another host"); }, options(), enterOwnPidNamespace);
}
TEST_P(NetPluginFailure, PeerOnAnotherHostDiesWhileSending) {
  if (provider() == "shm") GTEST_SKIP() << "shm only connects processes of one host";
  if (version() != 11) GTEST_SKIP() << "liveness is version-independent: v11 covers it";
  if (!canMakePidNamespace()) GTEST_SKIP() << "no pid namespaces here";
  run(
      2, [&](Rank& r) { peerDies(r, false, " on another host"); }, options(), enterOwnPidNamespace);
}

// The handle layout of plugin/nccl/net_handle.cc (magic u32, version u16, address length
// u16, listen id u64, host u64, pid u32, checksum u32 = FNV-1a with itself zero, address), so
// that a handle can be made to pass the header checks and reach the address checks.
constexpr size_t kAddressLengthAt = 6, kChecksumAt = 28;
void resealHandle(std::array<char, NCCL_NET_HANDLE_MAXSIZE>& h) {
  std::memset(h.data() + kChecksumAt, 0, 4);
  const uint32_t sum = core::fnv1a32(h.data(), h.size());
  std::memcpy(h.data() + kChecksumAt, &sum, 4);
}

// A private network namespace with only lo (up): whatever a malformed handle makes the plugin
// do, no packet can leave this rank. False where namespaces cannot be made.
bool enterPrivateNetwork() {
  if (unshare(CLONE_NEWNET) != 0) return false;
  const int s = socket(AF_INET, SOCK_DGRAM, 0);
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  const bool up = s >= 0 && ioctl(s, SIOCGIFFLAGS, &ifr) == 0 &&
                  (ifr.ifr_flags |= IFF_UP | IFF_RUNNING, ioctl(s, SIOCSIFFLAGS, &ifr) == 0);
  if (s >= 0) close(s);
  if (!up) fail("unshare(CLONE_NEWNET) worked but lo could not be brought up");
  return true;
}

// connect with handles that are not what listen wrote: an error, no sendComm, no crash.
TEST_P(NetPluginFailure, MalformedHandles) {
  bool isolated = false;
  run(
      1,
      [&](Rank& r) {
        std::array<char, NCCL_NET_HANDLE_MAXSIZE> good{};
        void* lc = nullptr;
        NET_CHECK(r.net().listen(r.p.ctx, r.p.dev, good.data(), &lc));
        std::vector<std::pair<std::string, std::array<char, NCCL_NET_HANDLE_MAXSIZE>>> cases;
        auto add = [&](const std::string& name, const std::function<void(decltype(good)&)>& f) {
          auto h = good;
          f(h);
          cases.emplace_back(name, h);
        };
        add("all zero", [](auto& h) { h.fill(0); });
        add("random bytes", [](auto& h) {
          std::mt19937 rng(12345);
          for (char& c : h) c = static_cast<char>(rng());
        });
        add("wrong magic", [](auto& h) { h[0] ^= 0x5a; });
        add("wrong version", [](auto& h) { h[4] ^= 0x7f; });
        add("flipped listen id (checksum)", [](auto& h) { h[9] ^= 0x01; });
        add("flipped checksum", [](auto& h) { h[kChecksumAt] ^= 0x01; });
        add("address length 200", [](auto& h) {
          h[kAddressLengthAt] = static_cast<char>(200);
          resealHandle(h);
        });
        add("address length 0", [](auto& h) {
          h[kAddressLengthAt] = 0;
          h[kAddressLengthAt + 1] = 0;
          resealHandle(h);
        });
        if (isolated)  // these pass the header checks: the address itself is wrong
          add("truncated address (1 byte), resealed", [](auto& h) {
            h[kAddressLengthAt] = 1;
            h[kAddressLengthAt + 1] = 0;
            resealHandle(h);
          });
        for (auto& [name, h] : cases) {
          double took = 0, longest = 0;
          const std::string bad = expectErrorEventually(
              [&](void** sc) { return r.net().connect(r.p.ctx, r.p.dev, h.data(), sc); },
              seconds(15), &took, &longest);
          if (!bad.empty())
            ADD_FAILURE() << "connect with a handle with " << name << ": " << bad;
          else
            std::fprintf(stderr, "handle with %s: rejected after %.3f s (longest call %.3f s)\n",
                         name.c_str(), took, longest);
        }
        NET_CHECK(r.net().closeListen(lc));
      },
      options(), [&](int) { isolated = enterPrivateNetwork(); });
}

// A well-formed handle whose listener was closed: connect must not give a sendComm. Reports
// whether it returns an error or keeps returning NULL (NCCL would then wait forever).
TEST_P(NetPluginFailure, ConnectToClosedListener) {
  run(2, [&](Rank& r) {
    if (r.rank == 0) {
      char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
      void* lc = nullptr;
      NET_CHECK(r.net().listen(r.p.ctx, r.p.dev, handle, &lc));
      NET_CHECK(r.net().closeListen(lc));
      r.oob.send(0, 1, std::string(handle, sizeof(handle)));
      (void)r.oob.recv(0, 1, seconds(60));  // stay alive while rank 1 tries
      return;
    }
    std::string handle = r.oob.recv(1, 0);
    double took = 0, longest = 0;
    const std::string bad = expectErrorEventually(
        [&](void** sc) { return r.net().connect(r.p.ctx, r.p.dev, handle.data(), sc); },
        seconds(20), &took, &longest);
    r.oob.send(1, 0, "done");
    // The listener's device refuses requests for listen comms it no longer has.
    if (!bad.empty()) fail("connect to a closed listener: " + bad);
    std::fprintf(stderr,
                 "v%d %s: connect to a closed listener: error after %.1f s (longest call %.3f s)\n",
                 version(), provider().c_str(), took, longest);
  });
}

// isend / irecv of a buffer its mhandle does not cover: an error (at post or test), no crash.
TEST_P(NetPluginFailure, MhandleNotCoveringBuffer) {
  run(2, [&](Rank& r) {
    Conn c = connectPeers(r.p, r.oob, r.rank, r.peer());
    Buffer b(8192), other(4096);
    void* comm = r.rank == 0 ? c.send : c.recv;
    void* mh = nullptr;
    NET_CHECK(r.net().regMr(comm, b.data(), 4096, NCCL_PTR_HOST, &mh));  // first half only
    struct Case {
      const char* name;
      uint8_t* data;
    };
    for (const Case& k : {Case{"straddling the registered end", b.data() + 2048},
                          Case{"outside it entirely", other.data()}}) {
      double took = 0;
      const std::string bad = expectRequestError(
          r.net(),
          [&](void** req) {
            if (r.rank == 0) return r.net().isend(c.send, k.data, 4096, 1, mh, req);
            size_t size = 4096;
            int tag = 1;
            void* data[1] = {k.data};
            void* mhs[1] = {mh};
            return r.net().irecv(c.recv, 1, data, &size, &tag, mhs, req);
          },
          seconds(10), &took);
      if (!bad.empty())
        ADD_FAILURE() << (r.rank == 0 ? "isend" : "irecv") << " of a buffer " << k.name
                      << " of its mhandle: " << bad;
    }
    NET_CHECK(r.net().deregMr(comm, mh));
    r.oob.barrier(r.rank);
    closeConn(r.net(), c);
  });
}

// NCCL 2.23+ dlcloses the plugin once its last communicator is gone and may load it again for
// the next one: after everything is closed (and v11 finalized) the library must unload and
// reload cleanly.
TEST_P(NetPluginFailure, UnloadAndReloadAfterClose) {
  run(2, [&](Rank& r) {
    Conn c = connectPeers(r.p, r.oob, r.rank, r.peer());
    exchange(r, c, 5000, 1, 0);
    r.oob.barrier(r.rank);
    closeConn(r.net(), c);
    NET_CHECK(r.net().finalize(r.p.ctx));
    r.finalized = true;
    if (dlclose(r.net().library()) != 0) fail(std::string("dlclose: ") + dlerror());
    sleepMs(300);  // plugin threads still running in unmapped code would crash here
    Plugin again = Plugin::open(version());
    Conn c2 = connectPeers(again, r.oob, r.rank, r.peer());
    Rank r2{r.rank, again, r.oob};
    exchange(r2, c2, 5000, 2, 1);
    r.oob.barrier(r.rank);
    closeConn(*again.net, c2);
    NET_CHECK(again.net->finalize(again.ctx));
  });
}

INSTANTIATE_TEST_SUITE_P(Versions, NetPluginFailure, allVersionsAndProviders(), paramName);

// With no usable provider init fails (NCCL then disables the plugin and uses its own).
TEST(NetPluginInit, FailsWithoutAUsableProvider) {
  for (int v : {8, 9, 10, 11}) {
    RunOptions o;
    o.env["SHARC_FI_PROVIDER"] = "no-such-provider";
    runRanks(
        1,
        [&](const RankContext&) {
          auto net = Net::load(v);
          void* ctx = nullptr;
          if (net->init(&ctx) == ncclSuccess)
            fail("v" + std::to_string(v) +
                 ": init succeeded with SHARC_FI_PROVIDER=no-such-provider");
        },
        o);
  }
}

}  // namespace
}  // namespace sharc::testing::nccl

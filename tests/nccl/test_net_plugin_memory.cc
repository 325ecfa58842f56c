// What the net plugin does with memory beyond plain host buffers, for every exported version
// over "tcp;ofi_rxm" and "shm" in processes without a usable GPU: CUDA and DMA-BUF
// registrations are refused saying which provider and why, ptrSupport stays NCCL_PTR_HOST,
// iflush of host memory is done at once (a NULL request), and overlapping registrations
// (provider registrations where the provider has FI_HMEM, as libfabric's shm does) carry data.
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "net_fixture.hpp"

namespace sharc::testing::nccl {
namespace {

class NetPluginMemory : public NetPluginFixture {};

constexpr size_t KiB = 1024;

// Why the plugin refuses CUDA memory in a process without a usable GPU, one reason per case:
// the provider lacks FI_HMEM, it cannot do without CUDA calls of its own (libfabric 1.18+),
// the process never loaded CUDA, or the CUDA it loaded does not work.
std::string refusalIn(const std::string& log) {
  for (const char* reason : {"has no FI_HMEM support", "cannot do without CUDA calls",
                             "this process has not loaded CUDA", "CUDA cannot be used here"})
    if (log.find(reason) != std::string::npos) return reason;
  return "";
}

// regMr of NCCL_PTR_CUDA memory and regMrDmaBuf of a DMA-BUF fail with ncclInvalidArgument
// and a warning naming the provider and the reason; so does a memory type NCCL never passes.
// The comm still works after.
TEST_P(NetPluginMemory, RegMrCudaFails) {
  run(2, [&](Rank& r) {
    Conn c = connectPeers(r.p, r.oob, r.rank, r.peer());
    Buffer b(4096);
    const int fd = memfd_create("sharc-not-a-dmabuf", 0);  // refused before anyone reads it
    if (fd < 0) fail("memfd_create failed");
    std::string reason;
    for (void* comm : {c.send, c.recv}) {
      void* mh = nullptr;
      takeLog();
      EXPECT_EQ(r.net().regMr(comm, b.data(), 4096, NCCL_PTR_CUDA, &mh), ncclInvalidArgument);
      std::string said = takeLog();
      EXPECT_NE(said.find("NCCL_PTR_CUDA"), std::string::npos) << said;
      EXPECT_NE(said.find("provider " + provider()), std::string::npos) << said;
      reason = refusalIn(said);
      EXPECT_FALSE(reason.empty()) << "no known reason in: " << said;

      EXPECT_EQ(r.net().regMrDmaBuf(comm, b.data(), 4096, NCCL_PTR_CUDA, 0, fd, &mh),
                ncclInvalidArgument);
      said = takeLog();
      EXPECT_NE(said.find("provider " + provider()), std::string::npos) << said;
      EXPECT_FALSE(refusalIn(said).empty()) << said;

      EXPECT_EQ(r.net().regMr(comm, b.data(), 4096, NCCL_PTR_DMABUF, &mh), ncclInvalidArgument);
      said = takeLog();
      EXPECT_NE(said.find("memory type 4"), std::string::npos) << said;

      // Without a DMA-BUF (fd -1) regMrDmaBuf is regMr.
      NET_CHECK(r.net().regMrDmaBuf(comm, b.data(), 4096, NCCL_PTR_HOST, 0, -1, &mh));
      if (!mh) fail("regMrDmaBuf of host memory gave no mhandle");
      NET_CHECK(r.net().deregMr(comm, mh));
    }
    close(fd);
    if (r.rank == 0)
      std::fprintf(stderr, "v%d %s: CUDA refused: %s\n", version(), provider().c_str(),
                   reason.c_str());
    exchange(r, c, 3000, 2, 0);
    r.oob.barrier(r.rank);
    closeConn(r.net(), c);
  });
}

// After a receive into host memory there is nothing to make visible to a GPU: iflush returns
// success and a NULL request (NCCL's "done"), for one buffer, a group and none. A send comm,
// a NULL request slot or a buffer outside its mhandle are errors.
TEST_P(NetPluginMemory, IflushOfHostMemoryIsDone) {
  run(2, [&](Rank& r) {
    Conn c = connectPeers(r.p, r.oob, r.rank, r.peer());
    Buffer out(3000), in(8192);
    out.reg(r.net(), c.send);
    in.reg(r.net(), c.recv);
    fillPattern(out.data(), 3000, seedOf(r.rank, 7, 0));
    std::vector<Op> ops;
    ops.push_back(recvOp(r.net(), c.recv, {in.data()}, {4096}, {7}, {in.mhandle()}, {3000},
                         {seedOf(r.peer(), 7, 0)}, "irecv"));
    ops.push_back(sendOp(r.net(), c.send, out.data(), 3000, 7, out.mhandle(), "isend"));
    runOps(r.net(), ops);
    void* data[2] = {in.data(), in.data() + 4096};
    int sizes[2] = {3000, 0};
    void* mhs[2] = {in.mhandle(), in.mhandle()};
    for (int n : {1, 2, 0}) {
      void* request = &n;  // must be overwritten
      NET_CHECK(r.net().iflush(c.recv, n, data, sizes, mhs, &request));
      EXPECT_EQ(request, nullptr) << "iflush of " << n << " host buffer(s)";
    }
    void* request = nullptr;
    EXPECT_NE(r.net().iflush(c.send, 1, data, sizes, mhs, &request), ncclSuccess) << "send comm";
    EXPECT_NE(r.net().iflush(c.recv, 1, data, sizes, mhs, nullptr), ncclSuccess) << "no slot";
    int tooBig = 8192;
    EXPECT_NE(r.net().iflush(c.recv, 1, &data[1], &tooBig, mhs, &request), ncclSuccess)
        << "a buffer beyond its mhandle";
    r.oob.barrier(r.rank);
    out.dereg();
    in.dereg();
    closeConn(r.net(), c);
  });
}

// Overlapping registrations, as NCCL makes them (a buffer inside a pool registered whole):
// nested, sharing a start, and one range twice (one registration, two references). Every
// transfer names its own mhandle, and the inner ones keep working once the pool is gone.
TEST_P(NetPluginMemory, OverlappingRegistrations) {
  if (version() != 11) GTEST_SKIP() << "registration is version-independent: v11 covers it";
  run(2, [&](Rank& r) {
    Conn c = connectPeers(r.p, r.oob, r.rank, r.peer());
    constexpr size_t kPool = 256 * KiB;
    Buffer out(kPool), in(kPool);
    struct Range {
      size_t offset, size;
    };
    const Range ranges[] = {{0, kPool}, {64 * KiB, 16 * KiB}, {0, 128 * KiB}, {64 * KiB, 16 * KiB}};
    std::vector<void*> outMh, inMh;
    for (const Range& g : ranges) {
      outMh.push_back(nullptr);
      inMh.push_back(nullptr);
      NET_CHECK(r.net().regMr(c.send, out.data() + g.offset, g.size, NCCL_PTR_HOST, &outMh.back()));
      NET_CHECK(r.net().regMr(c.recv, in.data() + g.offset, g.size, NCCL_PTR_HOST, &inMh.back()));
    }
    EXPECT_EQ(outMh[1], outMh[3]) << "the same range twice is one registration";
    int tag = 0;
    auto transfer = [&](size_t k, size_t offset, size_t bytes) {
      ++tag;
      fillPattern(out.data() + offset, bytes, seedOf(r.rank, tag, static_cast<int>(k)));
      const std::string what = std::to_string(bytes) + " B at " + std::to_string(offset) +
                               " through registration " + std::to_string(k);
      std::vector<Op> ops;
      ops.push_back(recvOp(r.net(), c.recv, {in.data() + offset}, {bytes}, {tag}, {inMh[k]},
                           {bytes}, {seedOf(r.peer(), tag, static_cast<int>(k))}, "irecv " + what));
      ops.push_back(
          sendOp(r.net(), c.send, out.data() + offset, bytes, tag, outMh[k], "isend " + what));
      runOps(r.net(), ops);
    };
    transfer(0, 200 * KiB, 40 * KiB);             // only the pool covers it
    transfer(1, 64 * KiB + 100, 16 * KiB - 100);  // nested in both others
    transfer(2, 1000, 100 * KiB);                 // shares the pool's start
    NET_CHECK(r.net().deregMr(c.send, outMh[0]));
    NET_CHECK(r.net().deregMr(c.recv, inMh[0]));
    transfer(1, 64 * KiB, 16 * KiB);
    transfer(2, 0, 128 * KiB);
    NET_CHECK(r.net().deregMr(c.send, outMh[1]));  // one of two references
    NET_CHECK(r.net().deregMr(c.recv, inMh[1]));
    transfer(3, 70 * KiB, 10 * KiB);
    for (size_t k : {3, 2}) {
      NET_CHECK(r.net().deregMr(c.send, outMh[k]));
      NET_CHECK(r.net().deregMr(c.recv, inMh[k]));
    }
    r.oob.barrier(r.rank);
    closeConn(r.net(), c);
  });
}

// A process that loaded a libcuda which cannot run (the toolkit's stub, as in a container
// without a driver): on an FI_HMEM provider the first getProperties asks CUDA, which says no;
// ptrSupport stays NCCL_PTR_HOST, and regMr of CUDA memory says CUDA cannot be used.
TEST_P(NetPluginMemory, CudaLoadedButUnusable) {
  if (version() != 11) GTEST_SKIP() << "the decision is version-independent: v11 covers it";
  const char* stub = std::getenv("SHARC_TEST_CUDA_STUB");
  if (stub == nullptr || *stub == '\0') GTEST_SKIP() << "no CUDA stub library (CUDA not built)";
  RunOptions o = options();
  o.env["SHARC_DEBUG"] = "INFO";  // the device line says whether the provider has FI_HMEM
  run(
      2,
      [&](Rank& r) {
        const std::string init = takeLog();
        EXPECT_EQ(r.p.props.ptrSupport, NCCL_PTR_HOST);
        Conn c = connectPeers(r.p, r.oob, r.rank, r.peer());
        Buffer b(4096);
        void* mh = nullptr;
        EXPECT_EQ(r.net().regMr(c.recv, b.data(), 4096, NCCL_PTR_CUDA, &mh), ncclInvalidArgument);
        const std::string said = takeLog();
        EXPECT_NE(said.find("provider " + provider()), std::string::npos) << said;
        // The device line ends "..., FI_HMEM)" when the provider registers device memory.
        const bool hmem = init.find("Mbps, FI_HMEM)") != std::string::npos;
        const std::string reason = refusalIn(said);
        if (hmem)
          EXPECT_EQ(reason, "CUDA cannot be used here") << said;
        else
          EXPECT_TRUE(reason == "has no FI_HMEM support" ||
                      reason == "cannot do without CUDA calls")
              << said;
        if (r.rank == 0)
          std::fprintf(stderr, "%s: FI_HMEM %s; refusal: %s", provider().c_str(),
                       hmem ? "yes" : "no", said.c_str());
        exchange(r, c, 1000, 3, 0);
        r.oob.barrier(r.rank);
        closeConn(r.net(), c);
      },
      o,
      [&](int) {
        if (dlopen(stub, RTLD_NOW | RTLD_GLOBAL) == nullptr)
          fail(std::string("dlopen of the CUDA stub: ") + dlerror());
      });
}

INSTANTIATE_TEST_SUITE_P(Versions, NetPluginMemory, allVersionsAndProviders(), paramName);

}  // namespace
}  // namespace sharc::testing::nccl

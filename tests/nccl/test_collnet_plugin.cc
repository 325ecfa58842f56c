// The CollNet plugin (ncclCollNetPlugin_v8..v11 of libnccl-net-sharc.so) driven as NCCL's
// proxy drives it, on forked ranks over real providers: every collective checked element by
// element against the float64 reference, NCCL's windowed AllGather / ReduceScatter (partial
// windows, several parts, in place, several calls in flight), the capability answers and the
// refusals.
//
// Suites: CollNetVersions (every exported version x {tcp, libfabric shm}, 3 ranks: every type
// and op at small counts, windows, ~1M elements), CollNetWorldSizes (1, 2 and 4 ranks over tcp
// and sharc's shared memory, v11: fewer types, windows, ~1M elements), CollNetErrors (every
// version: properties, reduceSupport, malformed handles, bad arguments, GPU memory refused).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <sharc/types.hpp>
#include <sstream>
#include <tuple>

#include "collnet_driver.hpp"
#include "multiprocess.hpp"
#include "reference.hpp"

namespace sharc::testing::nccl {
namespace {

const DataType kTypes[] = {DataType::Float32,  DataType::Float64, DataType::Float16,
                           DataType::BFloat16, DataType::Int32,   DataType::Int8,
                           DataType::Uint8,    DataType::Int64};
const RedOp kOps[] = {RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min, RedOp::Avg};

// A host registration on the session's communicator, deregistered at scope end.
class Reg {
 public:
  Reg(CollSession& s, void* data, size_t size) : s_(s) {
    NET_CHECK(s.net->regMr(s.comm, data, size, NCCL_PTR_HOST, &mh_));
    if (!mh_) fail("regMr returned ncclSuccess but no mhandle");
  }
  ~Reg() {
    const ncclResult_t r = s_.net->deregMr(s_.comm, mh_);
    if (r != ncclSuccess) ADD_FAILURE() << "deregMr returned " << resultName(r);
  }
  Reg(const Reg&) = delete;
  Reg& operator=(const Reg&) = delete;
  void* mh() const { return mh_; }

 private:
  CollSession& s_;
  void* mh_ = nullptr;
};

std::string describe(const char* coll, DataType t, RedOp op, size_t count) {
  std::ostringstream os;
  os << coll << " " << dataTypeName(t) << " " << redOpName(op) << " count " << count;
  return os.str();
}

// "" when buf[k] is the reduction of global element first + k for k < count.
std::string compareReduce(const void* buf, DataType t, RedOp op, int n, size_t first,
                          size_t count) {
  std::string err;
  size_t bad = 0;
  for (size_t k = 0; k < count; ++k) {
    const double got = loadElement(buf, t, k), want = expectedReduce(t, op, n, first + k);
    if (!matches(got, want, t, op) && bad++ < 3)
      err += describeMismatch(first + k, got, want) + "; ";
  }
  return bad ? err + std::to_string(bad) + " wrong" : "";
}

// Sizes of `parts` parts adding up to `total`, multiples of `align`, deliberately uneven.
std::vector<size_t> splitSizes(size_t total, int parts, size_t align) {
  if (parts <= 0) return {};
  std::vector<size_t> sizes;
  size_t prev = 0;
  const size_t units = total / align;
  for (int k = 1; k <= parts; ++k) {
    const size_t end = k == parts ? total : align * (units * k * k / (parts * parts));
    sizes.push_back(end - prev);
    prev = end;
  }
  return sizes;
}

struct Share {
  size_t lo = 0, hi = 0;  // this rank's share of a window (virtual offsets; lo == hi: none)
};
Share shareOf(int rank, size_t bpr, size_t off, size_t bytes) {
  const size_t lo = std::max(off, rank * bpr), hi = std::min(off + bytes, (rank + 1) * bpr);
  return lo < hi ? Share{lo, hi} : Share{lo, lo};
}

Posted postAllReduce(CollSession& s, DataType t, RedOp op, size_t count) {
  Posted p;
  p.what = describe("iallreduce", t, op, count);
  const size_t bytes = count * dataTypeSize(t);
  Guarded* send = hold<Guarded>(p, bytes);
  Guarded* recv = hold<Guarded>(p, bytes);
  fillInput(send->data(), t, op, s.rank, 0, count);
  Reg* rs = hold<Reg>(p, s, send->data(), bytes);
  Reg* rr = hold<Reg>(p, s, recv->data(), bytes);
  NET_CHECK(s.net->iallreduce(s.comm, send->data(), recv->data(), count, static_cast<int>(t),
                              static_cast<int>(op), rs->mh(), rr->mh(), &p.req));
  p.verify = [=, n = s.n](int size) {
    std::string err = compareReduce(recv->data(), t, op, n, 0, count);
    if (size != static_cast<int>(bytes)) err += " size " + std::to_string(size);
    if (!recv->intact() || !send->intact()) err += " guard bytes overwritten";
    return err;
  };
  return p;
}
std::string checkAllReduce(CollSession& s, DataType t, RedOp op, size_t count) {
  return complete(s, postAllReduce(s, t, op, count));
}

Posted postAllGather(CollSession& s, DataType t, size_t count, size_t off, size_t bytes, int nParts,
                     size_t align, bool inPlace = false) {
  Posted p;
  const size_t bpr = count * dataTypeSize(t);
  const int me = s.rank;
  auto* all = hold<std::vector<uint8_t>>(p, s.n * bpr);  // the virtual output: every input
  for (int q = 0; q < s.n; ++q) fillInput(all->data() + q * bpr, t, RedOp::Sum, q, 0, count);
  const Share mine = shareOf(me, bpr, off, bytes);
  Guarded* send = hold<Guarded>(p, bpr);
  if (bpr > 0) std::memcpy(send->data(), all->data() + me * bpr, bpr);
  std::vector<Guarded*> bufs;
  std::vector<Part> parts;
  uint8_t* sendData = send->data() + (mine.lo - std::min(mine.lo, me * bpr));
  void* sendMh = nullptr;
  if (inPlace) {
    Guarded* whole = hold<Guarded>(p, s.n * bpr);
    if (bpr > 0) std::memcpy(whole->data() + me * bpr, send->data(), bpr);
    parts.push_back(
        {hold<Reg>(p, s, whole->data(), whole->size())->mh(), whole->data() + off, bytes});
    sendData = whole->data() + mine.lo;
  } else {
    for (size_t size : splitSizes(bytes, nParts, align)) {
      bufs.push_back(hold<Guarded>(p, size));
      parts.push_back(
          {hold<Reg>(p, s, bufs.back()->data(), size)->mh(), bufs.back()->data(), size});
    }
    sendMh = hold<Reg>(p, s, send->data(), bpr)->mh();
  }
  NET_CHECK(s.net->iallgather(s.comm, sendData, parts, bpr, off, bytes, sendMh, &p.req));
  p.what = describe("iallgather", t, RedOp::Sum, count) + " window [" + std::to_string(off) +
           ", +" + std::to_string(bytes) + ") in " + std::to_string(parts.size()) + " parts" +
           (inPlace ? " in place" : "");
  p.verify = [=](int size) {
    std::string err;
    size_t at = off, bad = 0;
    for (const Part& part : parts)
      for (size_t i = 0; i < part.size; ++i, ++at)
        if (static_cast<uint8_t*>(part.address)[i] != (*all)[at] && bad++ < 3)
          err += "byte " + std::to_string(at) + " wrong; ";
    if (bad) err += std::to_string(bad) + " bytes wrong";
    if (size != static_cast<int>(bytes)) err += " size " + std::to_string(size);
    for (const Guarded* b : bufs)
      if (!b->intact()) err += " guard bytes overwritten";
    return err;
  };
  return p;
}
// AllGather of `count` elements per rank, window [off, off + bytes) of the virtual output in
// `nParts` parts split at multiples of `align`; in place: one part inside a whole output
// buffer, sendData at this rank's share in it.
std::string checkAllGather(CollSession& s, DataType t, size_t count, size_t off, size_t bytes,
                           int nParts, size_t align, bool inPlace = false) {
  return complete(s, postAllGather(s, t, count, off, bytes, nParts, align, inPlace));
}

Posted postReduceScatter(CollSession& s, DataType t, RedOp op, size_t count, size_t off,
                         size_t elems, int nParts, bool inPlace = false) {
  Posted p;
  const size_t es = dataTypeSize(t), bpr = count * es;
  Guarded* input = hold<Guarded>(p, s.n * bpr);  // this rank's whole virtual input
  fillInput(input->data(), t, op, s.rank, 0, s.n * count);
  const Share mine = shareOf(s.rank, bpr, off * es, elems * es);
  const size_t myBytes = mine.hi - mine.lo;
  Guarded* recv = hold<Guarded>(p, myBytes);
  std::vector<Guarded*> bufs;
  std::vector<Part> parts;
  uint8_t* recvData = recv->data();
  void* recvMh = nullptr;
  if (inPlace) {
    recvMh = hold<Reg>(p, s, input->data(), input->size())->mh();
    parts.push_back({recvMh, input->data() + off * es, elems * es});
    recvData = input->data() + mine.lo;
  } else {
    size_t at = off * es;
    for (size_t size : splitSizes(elems * es, nParts, es)) {
      bufs.push_back(hold<Guarded>(p, size));
      if (size > 0) std::memcpy(bufs.back()->data(), input->data() + at, size);
      at += size;
      parts.push_back(
          {hold<Reg>(p, s, bufs.back()->data(), size)->mh(), bufs.back()->data(), size});
    }
    recvMh = hold<Reg>(p, s, recv->data(), myBytes)->mh();
  }
  NET_CHECK(s.net->ireducescatter(s.comm, parts, recvData, bpr, off * es, elems * es,
                                  static_cast<int>(t), static_cast<int>(op), recvMh, &p.req));
  p.what = describe("ireducescatter", t, op, count) + " window [" + std::to_string(off) + ", +" +
           std::to_string(elems) + ") elements in " + std::to_string(parts.size()) + " parts" +
           (inPlace ? " in place" : "");
  p.verify = [=, n = s.n](int size) {
    std::string err = compareReduce(recvData, t, op, n, mine.lo / es, myBytes / es);
    if (size != static_cast<int>(myBytes)) err += " size " + std::to_string(size);
    if (!recv->intact() || !input->intact()) err += " guard bytes overwritten";
    for (const Guarded* b : bufs)
      if (!b->intact()) err += " guard bytes overwritten";
    return err;
  };
  return p;
}
// ReduceScatter of `count` elements per rank, window [off, off + elems) (elements) of the
// virtual input in `nParts` parts; in place: one part inside the whole input buffer and
// recvData at this rank's share in it.
std::string checkReduceScatter(CollSession& s, DataType t, RedOp op, size_t count, size_t off,
                               size_t elems, int nParts, bool inPlace = false) {
  return complete(s, postReduceScatter(s, t, op, count, off, elems, nParts, inPlace));
}

// Full-buffer AllGather / ReduceScatter (one part: the engine's own collectives).
std::string checkFullAllGather(CollSession& s, DataType t, size_t count) {
  const size_t bpr = count * dataTypeSize(t);
  return checkAllGather(s, t, count, 0, s.n * bpr, 1, 1);
}
std::string checkFullReduceScatter(CollSession& s, DataType t, RedOp op, size_t count) {
  return checkReduceScatter(s, t, op, count, 0, s.n * count, 1);
}

// Every type and valid op at the given counts.
void sweep(CollSession& s, const std::vector<DataType>& types, const std::vector<size_t>& counts) {
  for (size_t count : counts)
    for (DataType t : types) {
      EXPECT_EQ(checkFullAllGather(s, t, count), "");
      for (RedOp op : kOps) {
        EXPECT_EQ(checkAllReduce(s, t, op, count), "");
        EXPECT_EQ(checkFullReduceScatter(s, t, op, count), "");
      }
    }
}

// NCCL's windows over C elements per rank: inside one block, across two, across all but
// the edges, the whole buffer in several parts, a prefix, one element, empty; and in place.
void windows(CollSession& s) {
  const size_t C = 40, N = static_cast<size_t>(s.n) * C;
  struct W {
    size_t off, elems;
    int parts;
  };
  std::vector<W> ws = {{3, N - 8, 3}, {3, N - 5, 1}, {0, N, 3}, {C - 1, 1, 1}, {C, 0, 0}};
  if (s.n >= 2)
    ws.insert(ws.end(), {{0, C + 1, 2}, {C + 3, C - 8, 1}, {C / 2, C, 2}, {C / 2, C, 1}});
  for (const W& w : ws) {
    for (DataType t : {DataType::Float32, DataType::Int64}) {
      const size_t es = dataTypeSize(t);
      EXPECT_EQ(checkAllGather(s, t, C, w.off * es, w.elems * es, w.parts, es), "");
    }
    EXPECT_EQ(checkReduceScatter(s, DataType::Float32, RedOp::Sum, C, w.off, w.elems, w.parts), "");
    EXPECT_EQ(checkReduceScatter(s, DataType::BFloat16, RedOp::Avg, C, w.off, w.elems, w.parts),
              "");
    EXPECT_EQ(checkReduceScatter(s, DataType::Int8, RedOp::Prod, C, w.off, w.elems, w.parts), "");
    EXPECT_EQ(checkReduceScatter(s, DataType::Float64, RedOp::Max, C, w.off, w.elems, w.parts), "");
    EXPECT_EQ(checkReduceScatter(s, DataType::Int32, RedOp::Min, C, w.off, w.elems, w.parts), "");
    if (w.parts == 1) {
      EXPECT_EQ(checkAllGather(s, DataType::Float32, C, w.off * 4, w.elems * 4, 1, 4, true), "");
      EXPECT_EQ(checkReduceScatter(s, DataType::Float16, RedOp::Sum, C, w.off, w.elems, 1, true),
                "");
    }
  }
  // Byte-granular AllGather windows and parts (uint8: no element alignment at all).
  EXPECT_EQ(checkAllGather(s, DataType::Uint8, 37, 7, s.n * 37 - 10, 3, 1), "");
  if (s.n >= 2) {
    EXPECT_EQ(checkAllGather(s, DataType::Uint8, 37, 36, 3, 3, 1), "");
  }
}

// Several calls in flight at once (NCCL keeps one per pipeline step), tested round-robin
// from the last: engine collectives and windowed groups interleaved.
void inFlight(CollSession& s) {
  const size_t C = 40, N = static_cast<size_t>(s.n) * C;
  std::vector<Posted> calls;
  calls.push_back(postAllReduce(s, DataType::Float32, RedOp::Sum, 1001));
  calls.push_back(postAllGather(s, DataType::Float32, C, 4 * 3, 4 * (N - 8), 3, 4));
  calls.push_back(postReduceScatter(s, DataType::BFloat16, RedOp::Avg, C, 3, N - 5, 2));
  calls.push_back(postAllGather(s, DataType::Int64, C, 0, 8 * N, 1, 8));
  calls.push_back(postReduceScatter(s, DataType::Int32, RedOp::Max, C, 0, N, 1));
  calls.push_back(
      postReduceScatter(s, DataType::Float32, RedOp::Sum, C, C / 2, N - C / 2 - 1, 1, true));
  calls.push_back(postAllReduce(s, DataType::Int8, RedOp::Prod, 7));
  calls.push_back(postAllGather(s, DataType::Uint8, 37, 7, s.n * 37 - 10, 3, 1));
  EXPECT_EQ(complete(s, std::move(calls)), "");
}

// Transport variants: "tcp" (tcp;ofi_rxm, one rank per emulated node), "shm" (libfabric's shm
// provider carries everything: SHARC_SHM=0), "sharc-shm" (sharc's shared-memory transport).
RunOptions optionsFor(const std::string& transport) {
  RunOptions o;
  o.env["SHARC_FI_PROVIDER"] = transport == "tcp" ? "tcp;ofi_rxm" : "shm";
  o.env["SHARC_SHM"] = transport == "sharc-shm" ? "1" : "0";
  o.env["SHARC_TIMEOUT_MS"] = "60000";
  o.oneRankPerNode = transport == "tcp";
  o.timeout = std::chrono::seconds(150);
  return o;
}

// Runs `body` on n ranks, each with its CollNet communicator set up as NCCL sets it up.
void runCollNet(int version, int n, const std::string& transport,
                const std::function<void(CollSession&)>& body) {
  Oob oob(n);  // before the fork: every rank inherits its ends
  runRanks(
      n,
      [&](const RankContext& ctx) {
        CollSession s(version, oob, ctx.rank, n);
        body(s);
        s.close();
      },
      optionsFor(transport));
}

// ---- every version x provider, 3 ranks ------------------------------------------------------

using VersionParam = std::tuple<int, std::string>;
class CollNetVersions : public ::testing::TestWithParam<VersionParam> {};

TEST_P(CollNetVersions, EveryTypeAndOpSmallCounts) {
  runCollNet(std::get<0>(GetParam()), 3, std::get<1>(GetParam()), [](CollSession& s) {
    sweep(s, std::vector<DataType>(std::begin(kTypes), std::end(kTypes)), {0, 1, 1001});
  });
}

TEST_P(CollNetVersions, Windows) {
  runCollNet(std::get<0>(GetParam()), 3, std::get<1>(GetParam()), [](CollSession& s) {
    windows(s);
    inFlight(s);
  });
}

TEST_P(CollNetVersions, LargeCounts) {
  runCollNet(std::get<0>(GetParam()), 3, std::get<1>(GetParam()), [](CollSession& s) {
    const size_t M = size_t{1} << 20, C = M / 3 + 1;
    EXPECT_EQ(checkAllReduce(s, DataType::Float32, RedOp::Sum, M), "");
    EXPECT_EQ(checkFullAllGather(s, DataType::Float32, C), "");
    EXPECT_EQ(checkFullReduceScatter(s, DataType::BFloat16, RedOp::Avg, C), "");
    // Windows of ~1M elements in two parts: staged sends and receives.
    EXPECT_EQ(checkReduceScatter(s, DataType::Float32, RedOp::Sum, C, C / 3, 3 * C - C / 2, 2), "");
    EXPECT_EQ(checkAllGather(s, DataType::Float32, C, 4 * (C / 3), 4 * (3 * C - C / 2), 2, 4), "");
  });
}

std::string versionName(const ::testing::TestParamInfo<VersionParam>& info) {
  return "v" + std::to_string(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
}
INSTANTIATE_TEST_SUITE_P(All, CollNetVersions,
                         ::testing::Combine(::testing::Values(8, 9, 10, 11),
                                            ::testing::Values(std::string("tcp"),
                                                              std::string("shm"))),
                         versionName);

// ---- 1, 2 and 4 ranks ---------------------------------------------------------------------

using SizeParam = std::tuple<int, std::string>;
class CollNetWorldSizes : public ::testing::TestWithParam<SizeParam> {};

TEST_P(CollNetWorldSizes, CollectivesAndWindows) {
  runCollNet(11, std::get<0>(GetParam()), std::get<1>(GetParam()), [](CollSession& s) {
    sweep(s, {DataType::Float32, DataType::BFloat16, DataType::Int32, DataType::Uint8}, {1, 1001});
    windows(s);
    inFlight(s);
    const size_t C = (size_t{1} << 20) / static_cast<size_t>(s.n) + 3;
    EXPECT_EQ(checkFullReduceScatter(s, DataType::Float32, RedOp::Sum, C), "");
    EXPECT_EQ(checkAllGather(s, DataType::Float32, C, 4, 4 * (s.n * C - 2), 2, 4), "");
  });
}

INSTANTIATE_TEST_SUITE_P(All, CollNetWorldSizes,
                         ::testing::Combine(::testing::Values(1, 2, 4),
                                            ::testing::Values(std::string("tcp"),
                                                              std::string("sharc-shm"))),
                         [](const ::testing::TestParamInfo<SizeParam>& info) {
                           std::string t = std::get<1>(info.param);
                           std::replace(t.begin(), t.end(), '-', '_');
                           return std::to_string(std::get<0>(info.param)) + "ranks_" + t;
                         });

// ---- properties, capabilities, refusals: every version, 2 ranks over tcp ------------------

class CollNetErrors : public ::testing::TestWithParam<int> {};

// Every rank expects `call` to fail with `want` (no traffic: validation comes first).
#define EXPECT_RESULT(want, call)                                                 \
  do {                                                                            \
    const ncclResult_t got_ = (call);                                             \
    if (got_ != (want))                                                           \
      ADD_FAILURE() << #call << " returned " << resultName(got_) << ", expected " \
                    << resultName(want);                                          \
  } while (0)

TEST_P(CollNetErrors, PropertiesAndReduceSupport) {
  const int version = GetParam();
  runRanks(
      1,
      [&](const RankContext&) {
        auto net = CollNet::load(version);
        NET_CHECK(net->init());
        Props props;
        bool pciNull = false;
        NET_CHECK(net->getProperties(0, &props, &pciNull));
        // The CollNet device describes the network plugin's first NIC ("lo" here).
        EXPECT_FALSE(props.name.empty());
        EXPECT_EQ(props.ptrSupport, NCCL_PTR_HOST);
        EXPECT_GT(props.speed, 0);
        EXPECT_GT(props.maxComms, 0);
        EXPECT_EQ(props.maxRecvs, 1);
        if (version >= 9) {
          EXPECT_GT(props.maxCollBytes, 0u);
          EXPECT_GT(props.maxP2pBytes, 0u);
        }
        EXPECT_RESULT(ncclInvalidArgument, net->getProperties(1, &props));
        char handle[NCCL_NET_HANDLE_MAXSIZE];
        void* listenComm = nullptr;
        EXPECT_RESULT(ncclInvalidArgument, net->listen(1, handle, &listenComm));
        // sharc's 10 types with its 5 ops; never fp8 (10, 11), PreMulSum (5) or garbage.
        for (int t = -1; t <= 12; ++t)
          for (int op = -1; op <= 6; ++op) {
            int supported = -1;
            NET_CHECK(net->reduceSupport(t, op, &supported));
            EXPECT_EQ(supported, t >= 0 && t < 10 && op >= 0 && op < 5 ? 1 : 0)
                << "type " << t << " op " << op;
          }
        int supported = -1;
        NET_CHECK(net->reduceSupport(1000, 1000, &supported));
        EXPECT_EQ(supported, 0);
        NET_CHECK(net->finalize());
      },
      optionsFor("tcp"));
}

TEST_P(CollNetErrors, BadHandlesAndArguments) {
  const int version = GetParam(), n = 2;
  Oob oob(n);
  runRanks(
      n,
      [&](const RankContext& ctx) {
        const int rank = ctx.rank;
        auto net = CollNet::load(version);
        NET_CHECK(net->init());
        char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
        void* listenComm = nullptr;
        NET_CHECK(net->listen(0, handle, &listenComm));
        auto all = exchangeHandles(oob, rank, n, std::string(handle, sizeof(handle)));
        std::vector<void*> handles;
        for (std::string& h : all) handles.push_back(h.data());
        void* comm = nullptr;
        // Malformed handles fail while decoding, before any connection: corrupt magic, an
        // unknown version (the first bytes are the magic, then the version).
        for (size_t byte : {size_t{0}, size_t{4}}) {
          std::string bad = all[0];
          bad[byte] = static_cast<char>(bad[byte] ^ 0x5a);
          std::vector<void*> badHandles = handles;
          badHandles[0] = bad.data();
          EXPECT_RESULT(ncclInvalidArgument,
                        net->connect(badHandles.data(), n, rank, listenComm, &comm));
          EXPECT_EQ(comm, nullptr);
        }
        EXPECT_RESULT(ncclInvalidArgument, net->connect(handles.data(), n, n, listenComm, &comm));
        EXPECT_RESULT(ncclInvalidArgument, net->connect(handles.data(), 0, 0, listenComm, &comm));
        EXPECT_RESULT(ncclInvalidArgument, net->connect(nullptr, n, rank, listenComm, &comm));
        EXPECT_RESULT(ncclInvalidArgument, net->connect(handles.data(), n, rank, nullptr, &comm));
        // The listen comm survived the failed attempts: the real connect works.
        NET_CHECK(net->connect(handles.data(), n, rank, listenComm, &comm));
        NET_CHECK(net->closeListen(listenComm));

        // Host memory only: CUDA and DMA-BUF registrations are refused with no mhandle.
        std::vector<float> a(64, 1.0f), b(64, 0.0f);
        void* mh = reinterpret_cast<void*>(1);
        EXPECT_RESULT(ncclInvalidArgument, net->regMr(comm, a.data(), 256, NCCL_PTR_CUDA, &mh));
        EXPECT_EQ(mh, nullptr);
        EXPECT_RESULT(ncclInvalidArgument,
                      net->regMrDmaBuf(comm, a.data(), 256, NCCL_PTR_DMABUF, 3, &mh));
        EXPECT_RESULT(ncclInvalidArgument, net->regMr(comm, a.data(), 256, 0x40, &mh));
        void *small = nullptr, *mb = nullptr;
        NET_CHECK(net->regMr(comm, a.data(), 128, NCCL_PTR_HOST, &small));  // half of `a`
        NET_CHECK(net->regMr(comm, b.data(), 256, NCCL_PTR_HOST, &mb));

        void* req = reinterpret_cast<void*>(1);
        // Unsupported type / op, buffers outside their registration: refused, no request.
        EXPECT_RESULT(ncclInvalidArgument,
                      net->iallreduce(comm, a.data(), b.data(), 64, ncclFloat8e4m3, ncclSum,
                                      nullptr, mb, &req));
        EXPECT_EQ(req, nullptr);
        EXPECT_RESULT(ncclInvalidArgument, net->iallreduce(comm, a.data(), b.data(), 64,
                                                           ncclFloat32, 5, nullptr, mb, &req));
        EXPECT_RESULT(ncclInvalidArgument, net->iallreduce(comm, a.data(), b.data(), 64,
                                                           ncclFloat32, ncclSum, small, mb, &req));
        // Windows: parts not adding up to windowBytes, a window past the buffer, a window not
        // aligned to the element size (ReduceScatter).
        std::vector<Part> parts = {{mb, b.data(), 100}};
        EXPECT_RESULT(ncclInvalidArgument,
                      net->iallgather(comm, a.data(), parts, 64, 0, 128, nullptr, &req));
        EXPECT_RESULT(ncclInvalidArgument,
                      net->iallgather(comm, a.data(), parts, 64, 100, 100, nullptr, &req));
        parts = {{mb, b.data(), 8}};
        EXPECT_RESULT(ncclInvalidArgument,
                      net->ireducescatter(comm, parts, b.data() + 32, 64, 2, 8, ncclFloat32,
                                          ncclSum, nullptr, &req));
        EXPECT_RESULT(ncclInvalidArgument,
                      net->ireducescatter(comm, parts, b.data() + 32, 64, 0, 8, ncclFloat8e5m2,
                                          ncclSum, nullptr, &req));
        EXPECT_EQ(req, nullptr);
        EXPECT_NE(net->test(nullptr, nullptr, nullptr), ncclSuccess);
        // Host memory needs no flush.
        req = reinterpret_cast<void*>(1);
        NET_CHECK(net->iflush(comm, b.data(), 256, mb, &req));
        EXPECT_EQ(req, nullptr);
        NET_CHECK(net->deregMr(comm, small));
        EXPECT_RESULT(ncclInvalidArgument, net->deregMr(comm, small));  // already gone

        // None of the refusals disturbed the communicator.
        NET_CHECK(
            net->iallreduce(comm, a.data(), b.data(), 64, ncclFloat32, ncclSum, nullptr, mb, &req));
        EXPECT_EQ(net->wait(req, "iallreduce after the refusals"), 256);
        EXPECT_EQ(b[63], 2.0f);
        NET_CHECK(net->deregMr(comm, mb));
        NET_CHECK(net->closeColl(comm));
        NET_CHECK(net->finalize());
      },
      optionsFor("tcp"));
}

INSTANTIATE_TEST_SUITE_P(All, CollNetErrors, ::testing::Values(8, 9, 10, 11),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "v" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace sharc::testing::nccl

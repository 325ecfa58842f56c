// The gtest side of the net plugin tests: a fixture parametrized by (net version, provider)
// that runs a body on forked ranks, each with the plugin freshly dlopen'ed and initialized,
// and the message helpers both test files share.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "multiprocess.hpp"
#include "plugin_driver.hpp"

namespace sharc::testing::nccl {

inline constexpr size_t MiB = size_t{1} << 20;

/// What a test body gets: its rank, its loaded plugin and the out-of-band channels.
struct Rank {
  int rank;
  Plugin& p;
  const Oob& oob;
  bool finalized = false;  ///< set by a body that called finalize itself
  int peer() const { return 1 - rank; }
  Net& net() { return *p.net; }
};

using Param = std::tuple<int, std::string>;  // net version, libfabric provider

class NetPluginFixture : public ::testing::TestWithParam<Param> {
 protected:
  int version() const { return std::get<0>(GetParam()); }
  const std::string& provider() const { return std::get<1>(GetParam()); }

  RunOptions options(seconds timeout = seconds(120)) const {
    RunOptions o;
    o.env["SHARC_FI_PROVIDER"] = provider();
    o.oneRankPerNode = provider() == "tcp;ofi_rxm";  // no same-host shortcuts over tcp
    o.timeout = timeout;
    return o;
  }

  /// Runs `body` on `n` ranks, each with the plugin freshly loaded and initialized (after
  /// `prepare`, when given, has run in the rank).
  void run(int n, const std::function<void(Rank&)>& body, RunOptions o,
           const std::function<void(int rank)>& prepare = {}) {
    Oob oob(n);  // before the fork: every rank inherits its ends
    const int v = version();
    runRanks(
        n,
        [&](const RankContext& ctx) {
          if (prepare) prepare(ctx.rank);
          try {
            Plugin p = Plugin::open(v);
            Rank r{ctx.rank, p, oob};
            body(r);
            for (const std::string& slow : p.net->slowCalls())
              ADD_FAILURE() << "rank " << ctx.rank << ": " << slow;
            if (!r.finalized) NET_CHECK(p.net->finalize(p.ctx));
          } catch (...) {
            oob.abortPeers(ctx.rank);
            throw;
          }
        },
        o);
  }
  void run(int n, const std::function<void(Rank&)>& body) { run(n, body, options()); }
};

inline std::string paramName(const ::testing::TestParamInfo<Param>& info) {
  return "v" + std::to_string(std::get<0>(info.param)) + "_" +
         (std::get<1>(info.param) == "shm" ? "shm" : "tcp");
}

inline auto allVersionsAndProviders() {
  return ::testing::Combine(::testing::Values(8, 9, 10, 11),
                            ::testing::Values(std::string("tcp;ofi_rxm"), std::string("shm")));
}

/// An irecv op of data.size() buffers, each checked against the pattern of its seed and the
/// size the sender used.
inline Op recvOp(Net& net, void* recvComm, std::vector<uint8_t*> data, std::vector<size_t> capacity,
                 std::vector<int> tags, std::vector<void*> mhs, std::vector<size_t> expected,
                 std::vector<uint64_t> seeds, std::string what) {
  Op op;
  op.what = std::move(what);
  op.comm = recvComm;
  op.post = [&net, recvComm, data, capacity, tags, mhs](void** req) {
    std::vector<void*> ptrs(data.begin(), data.end());
    std::vector<void*> handles = mhs;
    return net.irecv(recvComm, static_cast<int>(data.size()), ptrs.data(), capacity.data(),
                     tags.data(), handles.data(), req);
  };
  op.check = [data, expected, seeds, tags, w = op.what](const int* sizes) {
    for (size_t i = 0; i < data.size(); ++i) {
      if (sizes[i] != static_cast<int>(expected[i]))
        fail(w + ": buffer " + std::to_string(i) + " (tag " + std::to_string(tags[i]) +
             "): test reported size " + std::to_string(sizes[i]) + ", sent " +
             std::to_string(expected[i]));
      const std::string bad = checkPattern(data[i], expected[i], seeds[i]);
      if (!bad.empty()) fail(w + ": buffer " + std::to_string(i) + ": " + bad);
    }
  };
  return op;
}

/// An isend op of `size` bytes from `data` (registered as `mh`), checking the reported size.
inline Op sendOp(Net& net, void* sendComm, void* data, size_t size, int tag, void* mh,
                 std::string what) {
  Op op;
  op.what = std::move(what);
  op.comm = sendComm;
  op.post = [&net, sendComm, data, size, tag, mh](void** req) {
    return net.isend(sendComm, data, size, tag, mh, req);
  };
  op.check = [size, w = op.what](const int* sizes) {
    // NCCL ignores a send's size; when the plugin reports one it must be the sent size. Not
    // fatal: the rest of the test still runs.
    if (sizes[0] != -1 && sizes[0] != static_cast<int>(std::min<size_t>(size, INT_MAX)))
      ADD_FAILURE() << w << ": test reported size " << sizes[0] << ", sent " << size;
  };
  return op;
}

/// One message each way over `c`: `bytes` from fresh registered buffers, tag `tag`.
inline void exchange(Rank& r, const Conn& c, size_t bytes, int tag, int index) {
  Buffer out(bytes), in(bytes);
  out.reg(r.net(), c.send);
  in.reg(r.net(), c.recv);
  fillPattern(out.data(), bytes, seedOf(r.rank, tag, index));
  std::vector<Op> ops;
  ops.push_back(recvOp(r.net(), c.recv, {in.data()}, {bytes}, {tag}, {in.mhandle()}, {bytes},
                       {seedOf(r.peer(), tag, index)}, "irecv " + std::to_string(bytes) + " B"));
  ops.push_back(sendOp(r.net(), c.send, out.data(), bytes, tag, out.mhandle(),
                       "isend " + std::to_string(bytes) + " B"));
  runOps(r.net(), ops);
  out.dereg();
  in.dereg();
}

}  // namespace sharc::testing::nccl

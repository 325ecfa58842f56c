// Drives the CollNet half of libnccl-net-sharc.so as NCCL's proxy does: the plugin is
// dlopen'ed in the rank process, each exported ncclCollNetPlugin_vN is called through its own
// ABI struct (nccl_abi.h), listen handles travel out of band (socketpairs made by the parent
// before the fork), every rank connects with all handles, and requests are tested until done
// (one at a time, or several in flight round-robin: Posted / complete).
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "nccl_abi.h"
#include "plugin_driver.hpp"

namespace sharc::testing::nccl {

/// One scatter/gather part, widened (v8's are uint32_t-sized).
struct Part {
  void* mhandle = nullptr;
  void* address = nullptr;
  size_t size = 0;
};

/// One exported ncclCollNetPlugin_vN behind a version-independent surface; arguments are
/// converted as NCCL converts them (v8 int counts and uint32_t SGE sizes, v11 contexts).
class CollNet {
 private:
  // Defined first: member functions with deduced return types must be seen before use.
  template <typename P>
  static constexpr bool isV11 = std::is_same_v<std::decay_t<P>, ncclCollNet_v11_t>;
  template <typename P>
  static auto narrow(const std::vector<Part>& parts) {
    if constexpr (std::is_same_v<std::decay_t<P>, ncclCollNet_v8_t>) {
      std::vector<ncclNetSGE_v8_t> out;
      for (const Part& x : parts) {
        if (x.size > UINT32_MAX) fail("v8 SGE of more than 4 GiB");
        out.push_back({x.mhandle, x.address, static_cast<uint32_t>(x.size)});
      }
      return out;
    } else {
      std::vector<ncclNetSGE_v9_t> out;
      for (const Part& x : parts) out.push_back({x.mhandle, x.address, x.size});
      return out;
    }
  }
  template <typename F>
  decltype(auto) visit(F&& f) const {
    switch (version_) {
      case 8: return f(*v8_);
      case 9: return f(*v9_);
      case 10: return f(*v10_);
      default: return f(*v11_);
    }
  }

 public:
  static std::unique_ptr<CollNet> load(int version) {
    const char* path = std::getenv("SHARC_NCCL_PLUGIN");
    if (!path || !*path) fail("SHARC_NCCL_PLUGIN is not set");
    void* dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) fail(std::string("dlopen: ") + dlerror());
    const std::string symbol = "ncclCollNetPlugin_v" + std::to_string(version);
    void* sym = dlsym(dl, symbol.c_str());
    if (!sym) fail("dlsym " + symbol + ": not exported");
    std::unique_ptr<CollNet> c(new CollNet(version, sym));
    if (!c->name() || std::string(c->name()).empty()) fail(symbol + ".name is empty");
    return c;
  }

  int version() const { return version_; }
  const char* name() const {
    return visit([](const auto& p) { return p.name; });
  }
  /// v11: init(&ctx, commId, logger); older: init(logger).
  ncclResult_t init(uint64_t commId = 0xc011ec7) {
    return visit([&](const auto& p) {
      if constexpr (isV11<decltype(p)>)
        return p.init(&ctx_, commId, netLogger);
      else
        return p.init(netLogger);
    });
  }
  /// v11 only (finalize(ctx)); NCCL never finalizes older versions.
  ncclResult_t finalize() { return version_ == 11 ? v11_->finalize(ctx_) : ncclSuccess; }
  ncclResult_t devices(int* ndev) {
    return visit([&](const auto& p) { return p.devices(ndev); });
  }
  /// name, pciPath (null or not), speed, ptrSupport, maxRecvs, maxCollBytes (v9+).
  ncclResult_t getProperties(int dev, Props* out, bool* pciPathNull = nullptr) {
    return visit([&](const auto& p) {
      using T = std::decay_t<decltype(p)>;
      using P =
          std::conditional_t<std::is_same_v<T, ncclCollNet_v8_t>, ncclNetProperties_v8_t,
                             std::conditional_t<std::is_same_v<T, ncclCollNet_v11_t>,
                                                ncclNetProperties_v11_t, ncclNetProperties_v9_t>>;
      P props{};
      const ncclResult_t r = p.getProperties(dev, &props);
      if (r != ncclSuccess) return r;
      out->name = props.name ? props.name : "";
      if (pciPathNull) *pciPathNull = props.pciPath == nullptr;
      out->ptrSupport = props.ptrSupport;
      out->speed = props.speed;
      out->maxComms = props.maxComms;
      out->maxRecvs = props.maxRecvs;
      if constexpr (!std::is_same_v<P, ncclNetProperties_v8_t>) {
        out->hasV9Fields = true;
        out->maxP2pBytes = props.maxP2pBytes;
        out->maxCollBytes = props.maxCollBytes;
        out->vProps = props.vProps;
      }
      return r;
    });
  }
  ncclResult_t listen(int dev, void* handle, void** listenComm) {
    return visit([&](const auto& p) {
      if constexpr (isV11<decltype(p)>)
        return p.listen(ctx_, dev, handle, listenComm);
      else
        return p.listen(dev, handle, listenComm);
    });
  }
  ncclResult_t connect(void* handles[], int nranks, int rank, void* listenComm, void** comm) {
    return visit([&](const auto& p) { return p.connect(handles, nranks, rank, listenComm, comm); });
  }
  ncclResult_t reduceSupport(int type, int op, int* supported) {
    return visit([&](const auto& p) {
      return p.reduceSupport(static_cast<ncclDataType_t>(type), static_cast<ncclRedOp_t>(op),
                             supported);
    });
  }
  ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
    return visit([&](const auto& p) { return p.regMr(comm, data, size, type, mhandle); });
  }
  ncclResult_t regMrDmaBuf(void* comm, void* data, size_t size, int type, int fd, void** mhandle) {
    return visit(
        [&](const auto& p) { return p.regMrDmaBuf(comm, data, size, type, 0, fd, mhandle); });
  }
  ncclResult_t deregMr(void* comm, void* mhandle) {
    return visit([&](const auto& p) { return p.deregMr(comm, mhandle); });
  }
  ncclResult_t iallreduce(void* comm, void* send, void* recv, size_t count, int type, int op,
                          void* smh, void* rmh, void** request) {
    return visit([&](const auto& p) {
      const auto t = static_cast<ncclDataType_t>(type);
      const auto o = static_cast<ncclRedOp_t>(op);
      if constexpr (std::is_same_v<std::decay_t<decltype(p)>, ncclCollNet_v8_t>) {
        if (count > static_cast<size_t>(INT_MAX)) fail("v8 iallreduce of more than INT_MAX");
        return p.iallreduce(comm, send, recv, static_cast<int>(count), t, o, smh, rmh, request);
      } else {
        return p.iallreduce(comm, send, recv, count, t, o, smh, rmh, request);
      }
    });
  }
  ncclResult_t iallgather(void* comm, void* send, const std::vector<Part>& parts, size_t bpr,
                          size_t offset, size_t bytes, void* smh, void** request) {
    return visit([&](const auto& p) {
      auto sges = narrow<decltype(p)>(parts);
      return p.iallgather(comm, send, static_cast<int>(sges.size()), sges.data(), bpr, offset,
                          bytes, smh, request);
    });
  }
  ncclResult_t ireducescatter(void* comm, const std::vector<Part>& parts, void* recv, size_t bpr,
                              size_t offset, size_t bytes, int type, int op, void* rmh,
                              void** request) {
    return visit([&](const auto& p) {
      auto sges = narrow<decltype(p)>(parts);
      return p.ireducescatter(comm, static_cast<int>(sges.size()), sges.data(), recv, bpr, offset,
                              bytes, static_cast<ncclDataType_t>(type),
                              static_cast<ncclRedOp_t>(op), rmh, request);
    });
  }
  ncclResult_t iflush(void* comm, void* data, int size, void* mhandle, void** request) {
    return visit([&](const auto& p) { return p.iflush(comm, data, size, mhandle, request); });
  }
  ncclResult_t test(void* request, int* done, int* size) {
    return visit([&](const auto& p) { return p.test(request, done, size); });
  }
  ncclResult_t closeColl(void* comm) {
    return visit([&](const auto& p) { return p.closeColl(comm); });
  }
  ncclResult_t closeListen(void* listenComm) {
    return visit([&](const auto& p) { return p.closeListen(listenComm); });
  }

  /// Tests `request` until done (failing on an error or after `timeout`); returns *size.
  int wait(void* request, const std::string& what, milliseconds timeout = seconds(60)) {
    if (!request) fail(what + ": no request");
    const Deadline deadline(timeout);
    for (;;) {
      int done = 0, size = -1;
      const ncclResult_t r = test(request, &done, &size);
      if (r != ncclSuccess) fail(what + ": test returned " + resultName(r));
      if (done) return size;
      if (deadline.expired())
        fail(what + ": not done after " + std::to_string(timeout.count()) + " ms");
      sched_yield();
    }
  }

 private:
  CollNet(int version, void* sym) : version_(version) {
    switch (version) {
      case 8: v8_ = static_cast<const ncclCollNet_v8_t*>(sym); break;
      case 9: v9_ = static_cast<const ncclCollNet_v9_t*>(sym); break;
      case 10: v10_ = static_cast<const ncclCollNet_v10_t*>(sym); break;
      case 11: v11_ = static_cast<const ncclCollNet_v11_t*>(sym); break;
      default: fail("no such CollNet version " + std::to_string(version));
    }
  }
  int version_;
  void* ctx_ = nullptr;
  const ncclCollNet_v8_t* v8_ = nullptr;
  const ncclCollNet_v9_t* v9_ = nullptr;
  const ncclCollNet_v10_t* v10_ = nullptr;
  const ncclCollNet_v11_t* v11_ = nullptr;
};

/// Every rank: listen, send its handle to every other rank out of band and collect theirs,
/// in rank order (NCCL's allgather of the handles).
inline std::vector<std::string> exchangeHandles(const Oob& oob, int rank, int n,
                                                const std::string& mine) {
  std::vector<std::string> all(static_cast<size_t>(n));
  all[static_cast<size_t>(rank)] = mine;
  for (int r = 0; r < n; ++r)
    if (r != rank) oob.send(rank, r, mine);
  for (int r = 0; r < n; ++r)
    if (r != rank) {
      all[static_cast<size_t>(r)] = oob.recv(rank, r);
      if (all[static_cast<size_t>(r)].size() != NCCL_NET_HANDLE_MAXSIZE)
        fail("oob: handle of the wrong size from rank " + std::to_string(r));
    }
  return all;
}

/// One rank's CollNet communicator, set up as NCCL sets it up: init, devices, listen, handle
/// exchange, connect with every rank's handle, closeListen.
struct CollSession {
  std::unique_ptr<CollNet> net;
  void* comm = nullptr;
  int rank = 0, n = 0;

  CollSession(int version, const Oob& oob, int rank_, int n_) : rank(rank_), n(n_) {
    net = CollNet::load(version);
    NET_CHECK(net->init());
    int ndev = 0;
    NET_CHECK(net->devices(&ndev));
    if (ndev != 1) fail("CollNet devices() reported " + std::to_string(ndev) + " (expected 1)");
    char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
    void* listenComm = nullptr;
    NET_CHECK(net->listen(0, handle, &listenComm));
    if (!listenComm) fail("listen returned ncclSuccess but no listenComm");
    auto all = exchangeHandles(oob, rank, n, std::string(handle, sizeof(handle)));
    std::vector<void*> handles;
    for (std::string& h : all) handles.push_back(h.data());
    NET_CHECK(net->connect(handles.data(), n, rank, listenComm, &comm));
    if (!comm) fail("connect returned ncclSuccess but no collComm");
    NET_CHECK(net->closeListen(listenComm));
  }
  ~CollSession() {
    if (comm) net->closeColl(comm);
    net->finalize();
  }
  CollSession(const CollSession&) = delete;
  CollSession& operator=(const CollSession&) = delete;
  /// Collective close, checked.
  void close() {
    void* c = comm;
    comm = nullptr;
    NET_CHECK(net->closeColl(c));
  }
};

// Host memory with guard bytes on both sides, so that an overrun shows up.
class Guarded {
 public:
  explicit Guarded(size_t size, uint8_t fill = 0xee) : size_(size), mem_(size + 2 * kGuard, fill) {
    std::fill_n(mem_.begin(), kGuard, kPattern);
    std::fill_n(mem_.end() - kGuard, kGuard, kPattern);
  }
  uint8_t* data() { return mem_.data() + kGuard; }
  size_t size() const { return size_; }
  bool intact() const {
    return std::all_of(mem_.begin(), mem_.begin() + kGuard,
                       [](uint8_t b) { return b == kPattern; }) &&
           std::all_of(mem_.end() - kGuard, mem_.end(), [](uint8_t b) { return b == kPattern; });
  }

 private:
  static constexpr size_t kGuard = 64;
  static constexpr uint8_t kPattern = 0x5a;
  size_t size_;
  std::vector<uint8_t> mem_;
};

// A posted call: its request, what it holds on to (buffers, registrations) and the check of
// its result once test reported it done (given test's *size; "" when right).
struct Posted {
  std::string what;
  void* req = nullptr;
  std::vector<std::shared_ptr<void>> keep;
  std::function<std::string(int size)> verify;
};

template <typename T, typename... Args>
T* hold(Posted& p, Args&&... args) {
  auto obj = std::make_shared<T>(std::forward<Args>(args)...);
  p.keep.push_back(obj);
  return obj.get();
}

// Tests the posted calls round-robin, last first, as a proxy with several requests in flight
// does; "" when all completed right, else what went wrong.
std::string complete(CollSession& s, std::vector<Posted> calls) {
  std::string err;
  std::vector<bool> done(calls.size(), false);
  const Deadline deadline(seconds(60));
  for (size_t left = calls.size(); left > 0;) {
    for (size_t i = calls.size(); i-- > 0;) {
      if (done[i]) continue;
      int finished = 0, size = -1;
      const ncclResult_t r = s.net->test(calls[i].req, &finished, &size);
      if (r != ncclSuccess) fail(calls[i].what + ": test returned " + resultName(r));
      if (!finished) continue;
      done[i] = true;
      --left;
      const std::string e = calls[i].verify(size);
      if (!e.empty()) err += calls[i].what + ": " + e + "\n";
    }
    if (left > 0 && deadline.expired()) fail(std::to_string(left) + " calls not done after 60 s");
    if (left > 0) sched_yield();
  }
  return err;
}
std::string complete(CollSession& s, Posted call) {
  std::vector<Posted> calls;
  calls.push_back(std::move(call));
  return complete(s, std::move(calls));
}

}  // namespace sharc::testing::nccl

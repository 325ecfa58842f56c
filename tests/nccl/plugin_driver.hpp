// Drives libnccl-net-sharc.so the way NCCL's proxy does: the plugin is dlopen'ed (in the rank
// process, so each rank has fresh plugin state), each exported ncclNetPlugin_vN is called
// through its own ABI struct (nccl_abi.h), connection setup and requests are non-blocking
// loops, and handles travel out of band (socketpairs made by the parent before the fork).
#pragma once

#include <dlfcn.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "driver_basics.hpp"
#include "nccl_abi.h"

namespace sharc::testing::nccl {

/// getProperties of any version, widened; fields a version lacks keep their defaults.
struct Props {
  std::string name;
  int ptrSupport = 0, regIsGlobal = 0, forceFlush = 0, speed = 0, port = 0, maxComms = 0,
      maxRecvs = 0, netDeviceType = -1;
  float latency = 0;
  bool hasV9Fields = false;  ///< vProps, maxP2pBytes, maxCollBytes, forceFlush
  ncclNetVDeviceProps_v9_t vProps{};
  size_t maxP2pBytes = 0, maxCollBytes = 0;
  bool hasV11Fields = false;  ///< maxMultiRequestSize
  int maxMultiRequestSize = 0;
};

/// One exported ncclNetPlugin_vN behind a version-independent surface. Arguments are converted
/// the way NCCL converts them (v8 int sizes, v10 config, v11 context); everything else is
/// passed straight through, results unchanged.
class Net {
  // Calls f with this version's struct (defined first: the members below deduce from it).
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
  /// dlopens $SHARC_NCCL_PLUGIN as NCCL does (RTLD_NOW | RTLD_LOCAL); kept open.
  static std::unique_ptr<Net> load(int version) {
    const char* path = std::getenv("SHARC_NCCL_PLUGIN");
    if (!path || !*path) fail("SHARC_NCCL_PLUGIN is not set");
    void* dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) fail(std::string("dlopen: ") + dlerror());
    const std::string symbol = "ncclNetPlugin_v" + std::to_string(version);
    void* sym = dlsym(dl, symbol.c_str());
    if (!sym) fail("dlsym " + symbol + ": not exported");
    std::unique_ptr<Net> net(new Net(version, dl, sym));
    if (!net->name() || std::string(net->name()).empty()) fail(symbol + ".name is empty");
    return net;
  }

  int version() const { return version_; }
  void* library() const { return dl_; }
  const char* name() const {
    return visit([](const auto& p) { return p.name; });
  }

  /// v11: a new context for `commId` in *ctx; older versions: *ctx = nullptr.
  ncclResult_t init(void** ctx, uint64_t commId = 0x5ca1ab1e) {
    *ctx = nullptr;
    return visit([&](const auto& p) {
      using T = std::decay_t<decltype(p)>;
      if constexpr (std::is_same_v<T, ncclNet_v11_t>)
        return p.init(ctx, commId, &config_, netLogger, nullptr);
      else if constexpr (std::is_same_v<T, ncclNet_v10_t>)
        return p.init(netLogger, nullptr);
      else
        return p.init(netLogger);
    });
  }
  /// v11 only (finalize(ctx)); a no-op for older versions, which NCCL never finalizes.
  ncclResult_t finalize(void* ctx) { return version_ == 11 ? v11_->finalize(ctx) : ncclSuccess; }
  ncclResult_t devices(int* ndev) {
    return visit([&](const auto& p) { return p.devices(ndev); });
  }
  ncclResult_t getProperties(int dev, Props* out) {
    return visit([&](const auto& p) {
      using T = std::decay_t<decltype(p)>;
      if constexpr (std::is_same_v<T, ncclNet_v8_t>) {
        ncclNetProperties_v8_t props{};
        const ncclResult_t r = p.getProperties(dev, &props);
        if (r == ncclSuccess) widen(props, out);
        return r;
      } else if constexpr (std::is_same_v<T, ncclNet_v11_t>) {
        ncclNetProperties_v11_t props{};
        const ncclResult_t r = p.getProperties(dev, &props);
        if (r == ncclSuccess) {
          widen(props, out);
          widenV9(props, out);
          out->hasV11Fields = true;
          out->maxMultiRequestSize = props.maxMultiRequestSize;
        }
        return r;
      } else {
        ncclNetProperties_v9_t props{};
        const ncclResult_t r = p.getProperties(dev, &props);
        if (r == ncclSuccess) {
          widen(props, out);
          widenV9(props, out);
        }
        return r;
      }
    });
  }
  ncclResult_t listen(void* ctx, int dev, void* handle, void** listenComm) {
    return timed("listen", [&] {
      return visit([&](const auto& p) {
        if constexpr (std::is_same_v<std::decay_t<decltype(p)>, ncclNet_v11_t>)
          return p.listen(ctx, dev, handle, listenComm);
        else
          return p.listen(dev, handle, listenComm);
      });
    });
  }
  ncclResult_t connect(void* ctx, int dev, void* handle, void** sendComm) {
    ncclNetDeviceHandle_v8_t* devComm = nullptr;  // host network: NCCL ignores it
    return timed("connect", [&] {
      return visit([&](const auto& p) {
        using T = std::decay_t<decltype(p)>;
        if constexpr (std::is_same_v<T, ncclNet_v11_t>)
          return p.connect(ctx, dev, handle, sendComm, &devComm);
        else if constexpr (std::is_same_v<T, ncclNet_v10_t>)
          return p.connect(dev, &config_, handle, sendComm, &devComm);
        else
          return p.connect(dev, handle, sendComm, &devComm);
      });
    });
  }
  ncclResult_t accept(void* listenComm, void** recvComm) {
    ncclNetDeviceHandle_v8_t* devComm = nullptr;
    return timed("accept", [&] {
      return visit([&](const auto& p) { return p.accept(listenComm, recvComm, &devComm); });
    });
  }
  ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
    return timed("regMr", [&] {
      return visit([&](const auto& p) { return p.regMr(comm, data, size, type, mhandle); });
    });
  }
  ncclResult_t regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                           void** mhandle) {
    return timed("regMrDmaBuf", [&] {
      return visit([&](const auto& p) {
        return p.regMrDmaBuf(comm, data, size, type, offset, fd, mhandle);
      });
    });
  }
  // Sizes as NCCL passes them to iflush (int, every version): what each buffer received.
  ncclResult_t iflush(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                      void** request) {
    return timed("iflush", [&] {
      return visit(
          [&](const auto& p) { return p.iflush(recvComm, n, data, sizes, mhandles, request); });
    });
  }
  ncclResult_t deregMr(void* comm, void* mhandle) {
    return timed("deregMr",
                 [&] { return visit([&](const auto& p) { return p.deregMr(comm, mhandle); }); });
  }
  ncclResult_t isend(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                     void** request) {
    return timed("isend", [&] {
      return visit([&](const auto& p) {
        using T = std::decay_t<decltype(p)>;
        if constexpr (std::is_same_v<T, ncclNet_v8_t>) {
          if (size > static_cast<size_t>(INT_MAX)) fail("v8 isend of more than INT_MAX bytes");
          return p.isend(sendComm, data, static_cast<int>(size), tag, mhandle, request);
        } else if constexpr (std::is_same_v<T, ncclNet_v9_t>) {
          return p.isend(sendComm, data, size, tag, mhandle, request);
        } else {
          return p.isend(sendComm, data, size, tag, mhandle, nullptr, request);
        }
      });
    });
  }
  // Sizes and tags are copied to locals first: NCCL passes arrays on its proxy's stack, so the
  // plugin may not keep the pointers.
  ncclResult_t irecv(void* recvComm, int n, void** data, const size_t* sizes, const int* tags,
                     void** mhandles, void** request) {
    if (n < 1 || n > 8) fail("irecv: n out of the driver's range");
    int tagCopy[8];
    std::copy(tags, tags + n, tagCopy);
    return timed("irecv", [&] {
      return visit([&](const auto& p) {
        using T = std::decay_t<decltype(p)>;
        if constexpr (std::is_same_v<T, ncclNet_v8_t>) {
          int intSizes[8];
          for (int i = 0; i < n; ++i) {
            if (sizes[i] > static_cast<size_t>(INT_MAX)) fail("v8 irecv of more than INT_MAX");
            intSizes[i] = static_cast<int>(sizes[i]);
          }
          return p.irecv(recvComm, n, data, intSizes, tagCopy, mhandles, request);
        } else {
          size_t sizeCopy[8];
          std::copy(sizes, sizes + n, sizeCopy);
          if constexpr (std::is_same_v<T, ncclNet_v9_t>) {
            return p.irecv(recvComm, n, data, sizeCopy, tagCopy, mhandles, request);
          } else {
            void* phandles[8] = {};
            return p.irecv(recvComm, n, data, sizeCopy, tagCopy, mhandles, phandles, request);
          }
        }
      });
    });
  }
  ncclResult_t test(void* request, int* done, int* sizes) {
    return timed(
        "test", [&] { return visit([&](const auto& p) { return p.test(request, done, sizes); }); });
  }
  ncclResult_t closeSend(void* c) {
    return visit([&](const auto& p) { return p.closeSend(c); });
  }
  ncclResult_t closeRecv(void* c) {
    return visit([&](const auto& p) { return p.closeRecv(c); });
  }
  ncclResult_t closeListen(void* c) {
    return visit([&](const auto& p) { return p.closeListen(c); });
  }
  const ncclNet_v11_t* v11() const { return v11_; }

  /// Calls on NCCL's progress path (listen ... test) that took longer than this: NCCL calls
  /// them from its proxy thread, which must never stall.
  static constexpr double kSlowCallS = 1.0;
  const std::vector<std::string>& slowCalls() const { return slow_; }

 private:
  Net(int version, void* dl, void* sym) : version_(version), dl_(dl) {
    switch (version) {
      case 8: v8_ = static_cast<const ncclNet_v8_t*>(sym); break;
      case 9: v9_ = static_cast<const ncclNet_v9_t*>(sym); break;
      case 10: v10_ = static_cast<const ncclNet_v10_t*>(sym); break;
      case 11: v11_ = static_cast<const ncclNet_v11_t*>(sym); break;
      default: fail("no such net version " + std::to_string(version));
    }
  }
  template <typename F>
  ncclResult_t timed(const char* call, F&& f) {
    const auto start = Clock::now();
    const ncclResult_t r = f();
    const double took = std::chrono::duration<double>(Clock::now() - start).count();
    if (took > kSlowCallS) {
      char text[160];
      std::snprintf(text, sizeof(text), "v%d %s blocked for %.2f s (returned %s)", version_, call,
                    took, resultName(r));
      slow_.push_back(text);
    }
    return r;
  }
  template <typename P>
  static void widen(const P& p, Props* out) {
    out->name = p.name ? p.name : "";
    out->ptrSupport = p.ptrSupport;
    out->regIsGlobal = p.regIsGlobal;
    out->speed = p.speed;
    out->port = p.port;
    out->latency = p.latency;
    out->maxComms = p.maxComms;
    out->maxRecvs = p.maxRecvs;
    out->netDeviceType = p.netDeviceType;
  }
  template <typename P>
  static void widenV9(const P& p, Props* out) {
    out->hasV9Fields = true;
    out->forceFlush = p.forceFlush;
    out->vProps = p.vProps;
    out->maxP2pBytes = p.maxP2pBytes;
    out->maxCollBytes = p.maxCollBytes;
  }

  int version_;
  void* dl_;
  const ncclNet_v8_t* v8_ = nullptr;
  const ncclNet_v9_t* v9_ = nullptr;
  const ncclNet_v10_t* v10_ = nullptr;
  const ncclNet_v11_t* v11_ = nullptr;
  // NCCL's default (NCCL_NET_TRAFFIC_CLASS undefined); lives as long as the plugin uses it.
  ncclNetCommConfig_v11_t config_{-1};
  std::vector<std::string> slow_;
};

/// Out-of-band byte channels between ranks: one socketpair per pair of ranks, made in the
/// parent before runRanks forks (each rank uses its own ends). Messages are length-prefixed.
class Oob {
 public:
  explicit Oob(int n) : n_(n), fds_(static_cast<size_t>(n * n), -1) {
    for (int a = 0; a < n; ++a)
      for (int b = a + 1; b < n; ++b) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) fail("socketpair failed");
        fds_[static_cast<size_t>(a * n + b)] = sv[0];
        fds_[static_cast<size_t>(b * n + a)] = sv[1];
      }
  }
  ~Oob() {
    for (int fd : fds_)
      if (fd >= 0) close(fd);
  }
  Oob(const Oob&) = delete;
  Oob& operator=(const Oob&) = delete;

  void send(int self, int to, const std::string& bytes) const {
    const uint32_t len = static_cast<uint32_t>(bytes.size());
    std::string frame(reinterpret_cast<const char*>(&len), sizeof(len));
    frame += bytes;
    const int fd = end(self, to);
    for (size_t off = 0; off < frame.size();) {
      const ssize_t got = write(fd, frame.data() + off, frame.size() - off);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) fail("oob write to rank " + std::to_string(to) + " failed");
      off += static_cast<size_t>(got);
    }
  }
  std::string recv(int self, int from, milliseconds timeout = seconds(30)) const {
    const Deadline deadline(timeout);
    uint32_t len = 0;
    readExactly(end(self, from), &len, sizeof(len), deadline, from);
    std::string bytes(len, '\0');
    readExactly(end(self, from), bytes.data(), len, deadline, from);
    if (bytes == kAbort) fail("rank " + std::to_string(from) + " failed (see its message)");
    return bytes;
  }
  /// Sent by a failing rank so that peers waiting on it out of band stop at once.
  void abortPeers(int self) const {
    for (int r = 0; r < n_; ++r)
      if (r != self) send(self, r, kAbort);
  }
  /// Every rank of `ranks` waits for all others.
  void barrier(int self, milliseconds timeout = seconds(60)) const {
    for (int r = 0; r < n_; ++r)
      if (r != self) send(self, r, "barrier");
    for (int r = 0; r < n_; ++r)
      if (r != self && recv(self, r, timeout) != "barrier") fail("oob barrier out of step");
  }

 private:
  static constexpr const char* kAbort = "\x01peer-failed";
  int end(int self, int other) const {
    if (self == other || self < 0 || other < 0 || self >= n_ || other >= n_)
      fail("oob: bad rank pair");
    return fds_[static_cast<size_t>(self * n_ + other)];
  }
  static void readExactly(int fd, void* dst, size_t n, const Deadline& deadline, int from) {
    auto* p = static_cast<char*>(dst);
    for (size_t off = 0; off < n;) {
      pollfd pfd{fd, POLLIN, 0};
      const int ready = poll(&pfd, 1, 50);
      if (ready < 0 && errno != EINTR) fail("oob poll failed");
      if (ready > 0) {
        const ssize_t got = read(fd, p + off, n - off);
        if (got == 0) fail("oob: rank " + std::to_string(from) + " closed its channel");
        if (got > 0) off += static_cast<size_t>(got);
      }
      if (off < n && deadline.expired())
        fail("oob: nothing from rank " + std::to_string(from) + " before the deadline");
    }
  }

  int n_;
  std::vector<int> fds_;
};

/// The plugin as one rank opens it: loaded, initialized, device 0's properties read.
struct Plugin {
  std::unique_ptr<Net> net;
  void* ctx = nullptr;
  int ndev = 0;
  int dev = 0;
  Props props;

  static Plugin open(int version) {
    Plugin p;
    p.net = Net::load(version);
    NET_CHECK(p.net->init(&p.ctx));
    NET_CHECK(p.net->devices(&p.ndev));
    if (p.ndev < 1) fail("devices() reported " + std::to_string(p.ndev) + " devices");
    NET_CHECK(p.net->getProperties(p.dev, &p.props));
    return p;
  }
};

/// A connection each way with one peer, plus this rank's listening comm.
struct Conn {
  void* send = nullptr;
  void* recv = nullptr;
  void* listen = nullptr;
};

/// Both ranks call this: listen (never blocks), swap handles out of band, then connect and
/// accept interleaved and non-blocking, as NCCL's proxy progresses them.
inline Conn connectPeers(Plugin& p, const Oob& oob, int self, int peer,
                         milliseconds timeout = seconds(30)) {
  Conn c;
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  NET_CHECK(p.net->listen(p.ctx, p.dev, handle, &c.listen));
  if (!c.listen) fail("listen returned ncclSuccess but no listenComm");
  oob.send(self, peer, std::string(handle, sizeof(handle)));
  std::string peerHandle = oob.recv(self, peer);
  if (peerHandle.size() != NCCL_NET_HANDLE_MAXSIZE) fail("oob: handle of the wrong size");
  const Deadline deadline(timeout);
  while (!c.send || !c.recv) {
    if (!c.send) NET_CHECK(p.net->connect(p.ctx, p.dev, peerHandle.data(), &c.send));
    if (!c.recv) NET_CHECK(p.net->accept(c.listen, &c.recv));
    if (deadline.expired())
      fail(std::string("connection setup not done after ") + std::to_string(timeout.count()) +
           " ms: sendComm " + (c.send ? "set" : "NULL") + ", recvComm " +
           (c.recv ? "set" : "NULL"));
    sched_yield();
  }
  return c;
}

inline void closeConn(Net& net, Conn& c) {
  if (c.send) NET_CHECK(net.closeSend(c.send));
  if (c.recv) NET_CHECK(net.closeRecv(c.recv));
  if (c.listen) NET_CHECK(net.closeListen(c.listen));
  c = Conn{};
}

/// Page-aligned host memory, registered with one comm (regMr NCCL_PTR_HOST) on request.
class Buffer {
 public:
  explicit Buffer(size_t size) : size_(size) {
    const size_t bytes = std::max<size_t>(4096, (size + 4095) / 4096 * 4096);
    data_ = static_cast<uint8_t*>(std::aligned_alloc(4096, bytes));
    if (!data_) fail("out of memory");
  }
  // No deregMr here: the comm may be closed by now (tests deregister explicitly).
  ~Buffer() { std::free(data_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void reg(Net& net, void* comm) {
    net_ = &net;
    comm_ = comm;
    NET_CHECK(net.regMr(comm, data_, size_, NCCL_PTR_HOST, &mhandle_));
    if (!mhandle_) fail("regMr returned ncclSuccess but no mhandle");
  }
  void dereg() {
    if (mhandle_) NET_CHECK(net_->deregMr(comm_, mhandle_));
    mhandle_ = nullptr;
  }
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  void* mhandle() const { return mhandle_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_;
  Net* net_ = nullptr;
  void* comm_ = nullptr;
  void* mhandle_ = nullptr;
};

// Message bytes as a function of (seed, index): a message in the wrong buffer, shifted or
// truncated shows up. Seeds mix sender rank, tag and message number.
inline uint64_t seedOf(int src, int tag, int index) {
  return (uint64_t{static_cast<uint32_t>(src)} << 48) ^
         (uint64_t{static_cast<uint32_t>(tag)} << 24) ^ uint64_t { static_cast<uint32_t>(index) };
}
inline uint8_t patternByte(uint64_t seed, size_t i) {
  return static_cast<uint8_t>(((seed * 0x100000001B3ull) + i) * 0x9E3779B97F4A7C15ull >> 56);
}
inline void fillPattern(uint8_t* p, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = patternByte(seed, i);
}
/// "" if p[0..n) is the pattern, else the first few mismatches.
inline std::string checkPattern(const uint8_t* p, size_t n, uint64_t seed) {
  std::ostringstream os;
  int shown = 0;
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i)
    if (p[i] != patternByte(seed, i)) {
      if (shown++ < 4)
        os << "byte " << i << ": got " << int{p[i]} << " expected " << int{patternByte(seed, i)}
           << "; ";
      ++bad;
    }
  if (bad) os << bad << " of " << n << " bytes wrong";
  return os.str();
}

/// One isend or irecv as NCCL's proxy handles it: posted (retried while the plugin returns no
/// request), then tested until done, then checked.
struct Op {
  std::string what;                             ///< for messages
  void* comm = nullptr;                         ///< posts keep their order per comm
  std::function<ncclResult_t(void**)> post;     ///< isend/irecv into the given request slot
  std::function<void(const int* sizes)> check;  ///< on completion: test's sizes
  void* request = nullptr;
  bool done = false;
};

/// Posts every op (in order per comm; a NULL request means "retry later", meanwhile the others
/// are tested), then tests until all are done. Any error, or the deadline, fails.
inline void runOps(Net& net, std::vector<Op>& ops, milliseconds timeout = seconds(60)) {
  const Deadline deadline(timeout);
  for (;;) {
    bool pending = false, progress = false;
    std::vector<void*> blocked;  // comms whose next post returned no request this pass
    for (Op& op : ops) {
      if (op.done || op.request) continue;
      if (std::find(blocked.begin(), blocked.end(), op.comm) != blocked.end()) continue;
      const ncclResult_t r = op.post(&op.request);
      if (r != ncclSuccess) fail(op.what + ": post returned " + resultName(r));
      if (op.request)
        progress = true;
      else
        blocked.push_back(op.comm);
    }
    for (Op& op : ops) {
      if (op.done) continue;
      pending = true;
      if (!op.request) continue;
      int done = 0;
      int sizes[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
      const ncclResult_t r = net.test(op.request, &done, sizes);
      if (r != ncclSuccess) fail(op.what + ": test returned " + resultName(r));
      if (done) {
        op.done = true;
        progress = true;
        if (op.check) op.check(sizes);
      }
    }
    if (!pending) return;
    if (deadline.expired()) {
      std::string left;
      for (const Op& op : ops)
        if (!op.done) left += " [" + op.what + (op.request ? ": posted]" : ": not posted]");
      fail("requests not done after " + std::to_string(timeout.count()) + " ms:" + left);
    }
    if (!progress) sched_yield();
  }
}

}  // namespace sharc::testing::nccl

// sharc-net-perf: point-to-point bandwidth and latency through the NCCL net plugin
// (libnccl-net-sharc.so, dlopen'ed and driven through ncclNetPlugin_v11 as NCCL's proxy drives
// it) and, in the same run and interleaved, through plain libfabric on the same provider: the
// gap between the two columns is what the plugin costs. Two forked processes; rank 0 sends.
#include "net_perf.hpp"

#include <dlfcn.h>
#include <signal.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "nccl_abi.h"
#include "net_perf_options.hpp"

namespace sharc::netperf {
namespace {

// ---- the plugin side ---------------------------------------------------------------------------

int gRank = 0;
int gLogLevel = NCCL_LOG_WARN;

extern "C" void pluginLogger(ncclDebugLogLevel level, unsigned long, const char* file, int line,
                             const char* fmt, ...) {
  if (level != NCCL_LOG_ABORT && level > gLogLevel) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "[rank %d] plugin %s:%d %s\n", gRank, file != nullptr ? file : "?", line,
               msg);
}

[[noreturn]] void ncclFail(const std::string& call, ncclResult_t rc) {
  throw Failure("plugin: " + call + " returned ncclResult_t " + std::to_string(rc) +
                ", expected ncclSuccess (0)");
}
void checkNccl(ncclResult_t rc, const char* call) {
  if (rc != ncclSuccess) ncclFail(call, rc);
}

/// Rank 0 holds (sendComm to rank 1, recvComm from it), rank 1 the mirror image: the forward
/// direction carries the data, the reverse one the acks and pongs.
class PluginLink final : public Link {
 public:
  PluginLink(const Options& o, Control& ctl) {
    lib_ = dlopen(o.plugin.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib_ == nullptr)
      throw Failure("plugin: dlopen(" + o.plugin + ") failed: " + dlerror() +
                    "; expected the built libnccl-net-sharc.so (--plugin, SHARC_NCCL_PLUGIN)");
    net_ = static_cast<ncclNet_v11_t*>(dlsym(lib_, "ncclNetPlugin_v11"));
    if (net_ == nullptr)
      throw Failure("plugin: dlsym(ncclNetPlugin_v11) found nothing in " + o.plugin +
                    ", expected the v11 plugin struct");
    config_.trafficClass = -1;  // NCCL_NET_TRAFFIC_CLASS_UNDEF
    checkNccl(net_->init(&ctx_, 0, &config_, pluginLogger, nullptr), "init");
    int ndev = 0;
    checkNccl(net_->devices(&ndev), "devices");
    if (o.dev >= ndev)
      throw Failure("plugin: devices() reports " + std::to_string(ndev) + " devices, expected " +
                    "more than --dev " + std::to_string(o.dev));
    for (int d = 0; d < ndev; ++d) {
      ncclNetProperties_v11_t p{};
      checkNccl(net_->getProperties(d, &p), "getProperties");
      devices_ += std::string(d ? ", " : "") + (p.name != nullptr ? p.name : "?");
      if (d == o.dev) props_ = p;
    }
    char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
    checkNccl(net_->listen(ctx_, o.dev, handle, &listen_), "listen");
    const std::string peer =
        ctl.exchange(std::string(handle, sizeof(handle)), "the peer's plugin handle");
    if (peer.size() != NCCL_NET_HANDLE_MAXSIZE)
      throw Failure("plugin: peer handle of " + std::to_string(peer.size()) +
                    " bytes, expected NCCL_NET_HANDLE_MAXSIZE");
    std::memcpy(handle, peer.data(), sizeof(handle));
    Deadline dl(o.timeout);
    while (send_ == nullptr || recv_ == nullptr) {  // both are non-blocking: NULL = not yet
      ncclNetDeviceHandle_v11_t* devHandle = nullptr;
      if (send_ == nullptr)
        checkNccl(net_->connect(ctx_, o.dev, handle, &send_, &devHandle), "connect");
      if (recv_ == nullptr) checkNccl(net_->accept(listen_, &recv_, &devHandle), "accept");
      dl.check("plugin: connect/accept (sendComm and recvComm still NULL)");
      if (send_ == nullptr || recv_ == nullptr) std::this_thread::yield();
    }
  }

  ~PluginLink() override {
    try {
      close();
    } catch (const Failure&) {  // an error path already: the first failure is reported
    }
  }
  std::string describe() const override {
    return std::string("ncclNetPlugin_v11 \"") + (net_->name ? net_->name : "?") + "\", device \"" +
           (props_.name ? props_.name : "?") + "\" (devices: " + devices_ + "), speed " +
           std::to_string(props_.speed) + " Mbps, maxP2pBytes " +
           std::to_string(props_.maxP2pBytes);
  }
  size_t maxP2pBytes() const { return props_.maxP2pBytes; }

  void attach(void* tx, size_t txBytes, void* rx, size_t rxBytes) override {
    checkNccl(net_->regMr(send_, tx, txBytes, NCCL_PTR_HOST, &txMr_), "regMr(sendComm)");
    checkNccl(net_->regMr(recv_, rx, rxBytes, NCCL_PTR_HOST, &rxMr_), "regMr(recvComm)");
  }

  bool isend(int slot, const void* buf, size_t size, int tag) override {
    void* req = nullptr;
    checkNccl(net_->isend(send_, const_cast<void*>(buf), size, tag, txMr_, nullptr, &req), "isend");
    req_[slot] = req;
    return req != nullptr;  // NULL: the plugin cannot take it yet
  }

  bool irecv(int slot, void* buf, size_t size, int tag) override {
    void* req = nullptr;
    void* phandle = nullptr;
    checkNccl(net_->irecv(recv_, 1, &buf, &size, &tag, &rxMr_, &phandle, &req), "irecv");
    req_[slot] = req;
    return req != nullptr;
  }

  bool test(int slot, size_t& size) override {
    int done = 0;
    int sizes[NCCL_NET_MAX_REQUESTS] = {};
    checkNccl(net_->test(req_[slot], &done, sizes), "test");
    if (!done) return false;
    req_[slot] = nullptr;
    size = static_cast<size_t>(sizes[0]);
    return true;
  }

  /// Deregisters, closes and finalizes, each once; throws the first call that failed.
  void close() override {
    if (net_ == nullptr) return;
    ncclResult_t rc = ncclSuccess;
    const char* failed = nullptr;
    auto call = [&](void*& handle, const char* name, auto&& fn) {
      if (handle == nullptr) return;
      const ncclResult_t r = fn(handle);
      handle = nullptr;
      if (r != ncclSuccess && failed == nullptr) rc = r, failed = name;
    };
    call(txMr_, "deregMr(sendComm)", [&](void* h) { return net_->deregMr(send_, h); });
    call(rxMr_, "deregMr(recvComm)", [&](void* h) { return net_->deregMr(recv_, h); });
    call(send_, "closeSend", net_->closeSend);
    call(recv_, "closeRecv", net_->closeRecv);
    call(listen_, "closeListen", net_->closeListen);
    call(ctx_, "finalize", net_->finalize);
    net_ = nullptr;  // the library stays loaded: plugins are not made to be unloaded
    if (failed != nullptr) ncclFail(failed, rc);
  }

 private:
  void* lib_ = nullptr;
  ncclNet_v11_t* net_ = nullptr;
  ncclNetCommConfig_v11_t config_{};
  ncclNetProperties_v11_t props_{};
  std::string devices_;
  void* ctx_ = nullptr;
  void* listen_ = nullptr;
  void* send_ = nullptr;
  void* recv_ = nullptr;
  void* txMr_ = nullptr;
  void* rxMr_ = nullptr;
  void* req_[kSlots] = {};
};

// ---- the measurements, the same code for both links ------------------------------------------

constexpr int kAckSlot = kSlots - 2;
constexpr int kPongSlot = kSlots - 1;

struct Run {
  const Options& o;
  int rank;
  Control& ctl;
  unsigned char* tx;  // filled with the pattern of the current size when checking
  unsigned char* rx;  // rank 1: window slots of the largest size; rank 0: acks and pongs
  long wrong = 0;     // messages that arrived short or with wrong bytes, on this rank

  void post(Link& l, bool send, int slot, void* buf, size_t size, int tag, const char* what) {
    Deadline dl(o.timeout);
    while (!(send ? l.isend(slot, buf, size, tag) : l.irecv(slot, buf, size, tag))) dl.check(what);
  }
  size_t wait(Link& l, int slot, const char* what) {
    Deadline dl(o.timeout);
    size_t n = 0;
    while (!l.test(slot, n)) dl.check(what);
    return n;
  }
  void verify(const unsigned char* got, size_t n, size_t size) {
    if (n != size || (o.check && std::memcmp(got, tx, size) != 0)) ++wrong;
    if (o.check) std::memset(const_cast<unsigned char*>(got), 0xee, size);
  }

  /// Window bandwidth: `iters` x `window` messages of `size`, then a 0-byte ack back; rank 0
  /// returns the seconds from its first send to the ack.
  double bandwidth(Link& l, size_t size, int iters) {
    const int window = o.window;
    const long total = static_cast<long>(window) * iters;
    long posted = 0, completed = 0;
    bool busy[kMaxWindow] = {};
    Deadline dl(o.timeout);
    const char* what = rank == 0 ? "bandwidth: send window" : "bandwidth: receive window";
    const auto t0 = Clock::now();
    while (completed < total) {
      for (int s = 0; s < window && posted < total; ++s) {
        if (busy[s]) continue;
        const bool ok =
            rank == 0 ? l.isend(s, tx, size, kTagData) : l.irecv(s, rx + s * size, size, kTagData);
        if (!ok) break;
        busy[s] = true, ++posted;
      }
      for (int s = 0; s < window; ++s) {
        size_t n = 0;
        if (!busy[s] || !l.test(s, n)) continue;
        busy[s] = false, ++completed;
        dl.restart();  // the limit is on progress, not on the whole measurement
        if (rank == 1) verify(rx + s * size, n, size);
      }
      try {
        dl.check(what);
      } catch (const Failure& e) {
        throw Failure(std::string(e.what()) + "; " + std::to_string(posted) + " of " +
                      std::to_string(total) + " messages of " + std::to_string(size) +
                      " B posted, " + std::to_string(completed) + " completed");
      }
    }
    if (rank == 0) {
      post(l, false, kAckSlot, rx, 0, kTagAck, "bandwidth: post the ack's receive");
      wait(l, kAckSlot, "bandwidth: the receiver's 0-byte ack");
    } else {
      post(l, true, kAckSlot, tx, 0, kTagAck, "bandwidth: post the 0-byte ack");
      wait(l, kAckSlot, "bandwidth: the 0-byte ack's send");
    }
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }

  /// Ping-pong; rank 0 returns the seconds of `iters` round trips after `warm` untimed ones.
  double latency(Link& l, size_t size, int warm, int iters) {
    auto t0 = Clock::now();
    for (int i = 0; i < warm + iters; ++i) {
      if (i == warm) t0 = Clock::now();
      if (rank == 0) {
        post(l, false, kPongSlot, rx, size, kTagData, "latency: post the pong's receive");
        post(l, true, 0, tx, size, kTagData, "latency: post the ping");
        wait(l, 0, "latency: the ping's send");
        verify(rx, wait(l, kPongSlot, "latency: the pong"), size);
      } else {
        post(l, false, 0, rx, size, kTagData, "latency: post the ping's receive");
        verify(rx, wait(l, 0, "latency: the ping"), size);
        post(l, true, kPongSlot, tx, size, kTagData, "latency: post the pong");
        wait(l, kPongSlot, "latency: the pong's send");
      }
    }
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }

  /// Both ranks in step; returns the wrong count of both ranks (rank 0) for this measurement.
  long collectWrong(long before) {
    long mine = wrong - before, peer = 0;
    ctl.send(&mine, sizeof(mine));
    ctl.recv(&peer, sizeof(peer), "the peer's data-check count");
    return mine + peer;
  }
};

/// One rank's whole run. Exit status: 0 fine, 1 error, 2 wrong data, 3 overhead over the limit.
int runRank(int rank, int fd, const Options& o) {
  gRank = rank;
  Control ctl(fd, o.timeout);
  std::vector<size_t> sizes;
  for (size_t s = o.minBytes; s <= o.maxBytes; s *= o.factor) {
    sizes.push_back(s);
    if (s == 0) break;
  }
  const size_t window = static_cast<size_t>(o.window);
  const size_t latMax = std::min(o.latMax, o.maxBytes);
  const size_t txBytes = std::max<size_t>(o.maxBytes, 64);
  const size_t rxBytes =
      rank == 1 ? std::max<size_t>(window * o.maxBytes, latMax) + 64 : std::max<size_t>(latMax, 64);
  Buffer tx = allocBuffer(txBytes), rx = allocBuffer(rxBytes);

  PluginLink plugin(o, ctl);
  std::unique_ptr<RawLink> raw = openRawLink(o.provider);
  raw->connect(ctl.exchange(raw->address(), "the peer's libfabric address"));
  plugin.attach(tx.get(), txBytes, rx.get(), rxBytes);
  raw->attach(tx.get(), txBytes, rx.get(), rxBytes);
  if (plugin.maxP2pBytes() != 0 && o.maxBytes > plugin.maxP2pBytes())
    throw Failure("-e " + std::to_string(o.maxBytes) + " exceeds the plugin's maxP2pBytes " +
                  std::to_string(plugin.maxP2pBytes()) + ", expected -e <= maxP2pBytes");
  Link* links[2] = {&plugin, raw.get()};

  if (rank == 0) {
    std::printf(
        "# sharc-net-perf: NCCL net plugin vs raw libfabric, rank 0 -> rank 1 (2 processes)\n"
        "# plugin: %s\n#         %s\n# raw:    %s\n"
        "# window %d, %d iterations + %d warmup; latency: %d round trips, sizes <= %zu B\n"
        "# %d reps: GB/s and us are medians, ratio the median of each rep's plugin/raw "
        "pair; check %s\n#\n"
        "# %10s %12s %12s %7s %10s %11s %11s %7s\n",
        o.plugin.c_str(), plugin.describe().c_str(), raw->describe().c_str(), o.window, o.iters,
        o.warmup, o.latIters, latMax, o.reps, o.check ? "on" : "off", "size", "plugin GB/s",
        "raw GB/s", "ratio", "overhead%", "plugin us", "raw us", "#wrong");
    std::fflush(stdout);
  }
  Run run{o, rank, ctl, tx.get(), rx.get()};
  long wrongTotal = 0;
  std::vector<double> bigOverheads, bestOverheads;
  for (const size_t size : sizes) {
    if (o.check) fillPattern(tx.get(), size);
    std::vector<double> bw[2], lat[2];
    long wrong = 0;
    for (int rep = 0; rep < o.reps; ++rep) {
      for (int j = 0; j < 2; ++j) {  // plugin then raw; raw first on odd reps (no order bias)
        const int k = rep % 2 == 0 ? j : 1 - j;
        const long before = run.wrong;
        ctl.barrier("the start of a bandwidth measurement");
        if (o.warmup > 0) run.bandwidth(*links[k], size, o.warmup);
        const double sec = run.bandwidth(*links[k], size, o.iters);
        bw[k].push_back(static_cast<double>(size) * window * o.iters / sec / 1e9);
        if (size <= latMax && o.latMax > 0) {
          ctl.barrier("the start of a latency measurement");
          const double l = run.latency(*links[k], size, std::max(1, o.latIters / 10), o.latIters);
          lat[k].push_back(l / o.latIters / 2 * 1e6);
        }
        wrong += run.collectWrong(before);
      }
    }
    wrongTotal += wrong;
    if (rank != 0) continue;
    // The ratio is the median of each rep's back-to-back pair: drift common to both cancels.
    std::vector<double> ratios;
    for (int rep = 0; rep < o.reps; ++rep)
      ratios.push_back(bw[1][rep] > 0 ? bw[0][rep] / bw[1][rep] : 0);
    const double pbw = median(bw[0]), rbw = median(bw[1]);
    const double ratio = median(ratios), overhead = (1 - ratio) * 100;
    if (size >= (size_t{1} << 20)) {
      bigOverheads.push_back(overhead);  // and from each side's best rep (robust to other load)
      bestOverheads.push_back(100 * (1 - std::ranges::max(bw[0]) / std::ranges::max(bw[1])));
    }
    char latText[2][16] = {"-", "-"};
    for (int k = 0; k < 2; ++k)
      if (!lat[k].empty()) std::snprintf(latText[k], sizeof(latText[k]), "%.2f", median(lat[k]));
    std::printf("  %10zu %12.3f %12.3f %7.3f %10.1f %11s %11s %7ld\n", size, pbw, rbw, ratio,
                overhead, latText[0], latText[1], wrong);
    std::fflush(stdout);
  }
  ctl.barrier("the end of the run");
  plugin.close();
  raw->close();
  if (rank != 0) return 0;
  int status = 0;
  if (bigOverheads.empty()) {
    std::printf("# overhead at >= 1 MiB: n/a (no size >= 1 MiB)\n");
  } else {
    const double m = median(bigOverheads);
    std::printf("# overhead at >= 1 MiB: median %.1f %% (%zu sizes; from best reps: %.1f %%)\n", m,
                bigOverheads.size(), median(bestOverheads));
    if (o.checkOverhead >= 0) {
      const bool ok = m <= o.checkOverhead;
      std::printf("# --check-overhead %g %%: %s\n", o.checkOverhead, ok ? "passed" : "FAILED");
      if (!ok) status = 3;
    }
  }
  std::printf("# data check: %s, %ld wrong messages\n", o.check ? "on" : "off (-c 1 checks)",
              wrongTotal);
  if (wrongTotal != 0) status = 2;
  std::fflush(stdout);
  return status;
}

int rankMain(int rank, int fd, const Options& o) {
  try {
    return runRank(rank, fd, o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] error: %s\n", rank, e.what());
    return 1;
  }
}

}  // namespace
}  // namespace sharc::netperf

int main(int argc, char** argv) {
  using namespace sharc::netperf;
  Options o;
  try {
    o = parseOptions(argc, argv);
  } catch (const Failure& e) {
    std::fprintf(stderr, "sharc-net-perf: %s\n", e.what());
    return 1;
  }
  const char* debug = std::getenv("NCCL_DEBUG") != nullptr ? std::getenv("NCCL_DEBUG") : "";
  gLogLevel = !strcasecmp(debug, "TRACE")  ? NCCL_LOG_TRACE
              : !strcasecmp(debug, "INFO") ? NCCL_LOG_INFO
                                           : NCCL_LOG_WARN;
  if (access(o.plugin.c_str(), R_OK) != 0) {
    std::fprintf(stderr,
                 "sharc-net-perf: plugin '%s' not readable (%s); expected the built "
                 "libnccl-net-sharc.so (--plugin, SHARC_NCCL_PLUGIN)\nFAILED\n",
                 o.plugin.c_str(), std::strerror(errno));
    return 1;
  }
  // Both sides on the same provider and interface: the plugin reads SHARC_FI_PROVIDER, the
  // tcp provider FI_TCP_IFACE (the raw side picks that domain too).
  setenv("SHARC_FI_PROVIDER", o.provider.c_str(), 1);
  if (o.provider.find("tcp") != std::string::npos) setenv("FI_TCP_IFACE", "lo", 0);
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    std::fprintf(stderr, "sharc-net-perf: socketpair: %s\nFAILED\n", std::strerror(errno));
    return 1;
  }
  std::fflush(nullptr);
  pid_t pids[2] = {-1, -1};
  for (int r = 0; r < 2; ++r) {
    pids[r] = fork();
    if (pids[r] < 0) {
      std::fprintf(stderr, "sharc-net-perf: fork: %s\nFAILED\n", std::strerror(errno));
      if (r == 1) kill(pids[0], SIGKILL);
      return 1;
    }
    if (pids[r] == 0) {
      ::close(sv[1 - r]);
      const int status = rankMain(r, sv[r], o);
      std::fflush(nullptr);
      _exit(status);
    }
  }
  ::close(sv[0]), ::close(sv[1]);
  // Wait for both; once one has failed, the other gets -T (+5 s) to notice before SIGKILL.
  int status[2] = {-1, -1};
  bool running[2] = {true, true};
  Clock::time_point killAt = Clock::time_point::max();
  while (running[0] || running[1]) {
    for (int r = 0; r < 2; ++r) {
      if (!running[r]) continue;
      int st = 0;
      const pid_t p = waitpid(pids[r], &st, WNOHANG);
      if (p != pids[r]) continue;
      running[r] = false;
      status[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
      if (status[r] != 0 && killAt == Clock::time_point::max())
        killAt = Clock::now() + std::chrono::seconds(static_cast<int>(o.timeout) + 5);
    }
    if (Clock::now() > killAt)
      for (int r = 0; r < 2; ++r)
        if (running[r]) {
          std::fprintf(stderr, "sharc-net-perf: killing rank %d: rank %d failed\n", r, 1 - r);
          kill(pids[r], SIGKILL);
          killAt = Clock::time_point::max();
        }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (status[0] == 0 && status[1] == 0) {
    std::printf("# sharc-net-perf: all checks passed\n");
    return 0;
  }
  for (int r = 0; r < 2; ++r) {
    const char* why = status[r] == 2    ? " (data check)"
                      : status[r] == 3  ? " (overhead over --check-overhead)"
                      : status[r] > 128 ? " (killed by a signal)"
                                        : "";
    if (status[r] != 0) std::printf("# rank %d FAILED: exit status %d%s\n", r, status[r], why);
  }
  return 1;
}

#include "calibrate.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "core/reduce.hpp"

namespace sharc::perf {
namespace {

constexpr size_t kBig = size_t{16} << 20;
constexpr int kReps = 15;

// Median of `reps` timed runs of fn (microseconds), after two untimed ones.
double medianUs(int reps, const std::function<void()>& fn) {
  fn();
  fn();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t.size() % 2 ? t[t.size() / 2] : (t[t.size() / 2 - 1] + t[t.size() / 2]) / 2;
}

std::string nodeKey() {
  if (const char* id = std::getenv("SHARC_NODE_ID"); id && *id) return id;
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}

struct Link {
  bool measured = false;
  double alphaUs = 0, gbps = 0, smallUs = 0, bigUs = 0;
};

// Ping-pong of broadcasts between the two ranks of `pair`: one call's time, alpha and rate.
Link measurePair(Communicator& pair, double stepUs) {
  std::vector<std::byte> buf(kBig);
  std::memset(buf.data(), 1, buf.size());
  auto pingPong = [&](size_t bytes) {
    return medianUs(kReps,
                    [&] {
                      pair.broadcast(buf.data(), buf.data(), bytes, DataType::Uint8, 0);
                      pair.broadcast(buf.data(), buf.data(), bytes, DataType::Uint8, 1);
                    }) /
           2;
  };
  Link l;
  l.smallUs = pingPong(8);
  l.bigUs = pingPong(kBig);
  double worst[2] = {l.smallUs, l.bigUs}, both[2] = {};
  pair.allReduce(worst, both, 2, DataType::Float64, RedOp::Max);
  l.smallUs = both[0];
  l.bigUs = both[1];
  l.measured = true;
  l.alphaUs = std::max(0.0, l.smallUs - 2 * stepUs);
  l.gbps = static_cast<double>(kBig) / 1e3 / std::max(l.bigUs - l.smallUs, 1e-3);
  return l;
}

// Single-copy rate between the two ranks of a one-node `pair` (cma.gbps): a ReduceScatter of
// 16 MiB blocks, when the tuner runs it as direct_read (each rank reads its block from the
// peer and reduces it: 2 handshakes + m/cma + m/reduce), less the handshakes and the
// reduction. 0 where the pair does not run direct_read (no cross-memory attach).
double measureCma(Communicator& pair, double alphaUs, double stepUs, double reduceGbps) {
  const size_t count = kBig / sizeof(float);
  if (pair.plan(CollectiveKind::ReduceScatter, count, DataType::Float32).algorithm != "direct_read")
    return 0;
  std::vector<float> in(2 * count, 1.0f), out(count);
  const double us = medianUs(kReps, [&] {
    pair.reduceScatter(in.data(), out.data(), count, DataType::Float32, RedOp::Sum);
  });
  double worst = us, slowest = 0;
  pair.allReduce(&worst, &slowest, 1, DataType::Float64, RedOp::Max);
  const double reduceUs = reduceGbps > 0 ? static_cast<double>(kBig) / 1e3 / reduceGbps : 0;
  const double copyUs = slowest - 2 * (alphaUs + stepUs) - reduceUs;
  return copyUs > 0 ? static_cast<double>(kBig) / 1e3 / copyUs : 0;
}

// The pair {0, other} as a communicator on those two ranks (nullptr elsewhere); every rank
// calls it (split is collective).
std::shared_ptr<Communicator> pairWith(Communicator& comm, int other) {
  const int r = comm.rank();
  const bool in = other > 0 && (r == 0 || r == other);
  return comm.split(in ? 0 : -1, r);
}

}  // namespace

int runCalibration(Communicator& comm, const Options& options) {
  const int n = comm.size(), rank = comm.rank();
  // Which node each rank is on.
  constexpr size_t kKey = 128;
  char mine[kKey] = {};
  std::strncpy(mine, nodeKey().c_str(), kKey - 1);
  std::vector<char> keys(kKey * static_cast<size_t>(n));
  comm.allGather(mine, keys.data(), kKey, DataType::Uint8);
  auto keyOf = [&](int r) { return std::string(keys.data() + static_cast<size_t>(r) * kKey); };
  int localPeer = -1, remotePeer = -1;
  for (int r = 1; r < n; ++r) {
    if (keyOf(r) == keyOf(0) && localPeer < 0) localPeer = r;
    if (keyOf(r) != keyOf(0) && remotePeer < 0) remotePeer = r;
  }

  auto self = comm.split(rank, 0);
  double in = 1, out = 0;
  double stepUs =
      medianUs(kReps * 10, [&] { self->allReduce(&in, &out, 1, DataType::Float64, RedOp::Sum); });
  double copyGbps = 0, reduceGbps = 0;
  if (rank == 0) {
    std::vector<std::byte> a(kBig, std::byte{1}), b(kBig, std::byte{2});
    copyGbps = static_cast<double>(kBig) / 1e3 / medianUs(kReps, [&] {
                 std::memcpy(b.data(), a.data(), kBig);
                 asm volatile("" ::"r"(b.data()) : "memory");
               });
    std::vector<float> x(kBig / sizeof(float), 1.0f), y(x.size(), 2.0f);
    reduceGbps =
        static_cast<double>(kBig) / 1e3 / medianUs(kReps, [&] {
          core::reduce(y.data(), y.data(), x.data(), x.size(), DataType::Float32, RedOp::Sum);
        });
  }
  comm.broadcast(&stepUs, &stepUs, 1, DataType::Float64, 0);
  comm.broadcast(&reduceGbps, &reduceGbps, 1, DataType::Float64, 0);

  Link local, fabric;
  double cmaGbps = 0;
  if (auto pair = pairWith(comm, localPeer)) {
    local = measurePair(*pair, stepUs);
    cmaGbps = measureCma(*pair, local.alphaUs, stepUs, reduceGbps);
  }
  if (auto pair = pairWith(comm, remotePeer)) fabric = measurePair(*pair, stepUs);
  comm.barrier();
  if (rank != 0) return 0;

  std::string text = "# sharc tuner parameters, measured by sharc-perf --calibrate on " +
                     std::to_string(n) + " ranks (provider " + comm.provider() + ")\n";
  char line[256];
  auto add = [&](const char* fmt, auto... v) {
    std::snprintf(line, sizeof line, fmt, v...);
    text += line;
  };
  add("# 1-rank 8 B all_reduce %.2f us\nstep_us = %.3f\n", stepUs, stepUs);
  add("# 16 MiB memcpy, one core\ncopy.gbps = %.3f\n", copyGbps);
  add("# float32 sum kernel, 16 MiB\nreduce.gbps = %.3f\n", reduceGbps);
  if (cmaGbps > 0)
    add("# single-copy reads: ranks 0 and %d, direct_read ReduceScatter of 16 MiB blocks\n"
        "cma.gbps = %.3f\n",
        localPeer, cmaGbps);
  for (const auto& [name, l, peer] :
       {std::tuple{"local", local, localPeer}, std::tuple{"fabric", fabric, remotePeer}}) {
    if (!l.measured) {
      add("# %s: no rank to pair rank 0 with; the tuner keeps its default\n", name);
      continue;
    }
    add("# %s: ranks 0 and %d, broadcast ping-pong: 8 B %.2f us, 16 MiB %.1f us\n", name, peer,
        l.smallUs, l.bigUs);
    add("%s.alpha_us = %.3f\n%s.gbps = %.3f\n", name, l.alphaUs, name, l.gbps);
  }
  std::fputs(text.c_str(), stdout);
  std::FILE* f = std::fopen(options.calibratePath.c_str(), "w");
  if (!f || std::fputs(text.c_str(), f) < 0 || std::fclose(f) != 0) {
    std::fprintf(stderr, "sharc-perf: cannot write %s\n", options.calibratePath.c_str());
    return 1;
  }
  std::printf("# wrote %s (use it with SHARC_TUNER_FILE=%s)\n", options.calibratePath.c_str(),
              options.calibratePath.c_str());
  return 0;
}

}  // namespace sharc::perf

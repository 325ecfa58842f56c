#include "bench.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <sharc/memory.hpp>
#include <string>
#include <utility>
#include <vector>

#include "check.hpp"
#include "launch.hpp"

namespace sharc::perf {

namespace {

// The median of v (0 when empty).
double medianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t k = v.size();
  return k == 0 ? 0 : k % 2 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2;
}

// Page-aligned heap memory, or sharc::allocShared memory (--shared-buffers).
struct BufferFree {
  bool shared = false;
  void operator()(std::byte* p) const {
    if (shared)
      sharc::freeShared(p);
    else
      ::operator delete[](p, std::align_val_t{4096});
  }
};
using Buffer = std::unique_ptr<std::byte[], BufferFree>;

Buffer allocate(size_t bytes, bool shared = false) {
  auto* p = shared ? static_cast<std::byte*>(sharc::allocShared(std::max<size_t>(bytes, 1)))
                   : static_cast<std::byte*>(
                         ::operator new[](std::max<size_t>(bytes, 1), std::align_val_t{4096}));
  std::memset(p, 0, bytes);  // fault the pages in before anything is timed
  return Buffer(p, BufferFree{shared});
}

void runOnce(Communicator& comm, CollectiveKind c, const void* send, void* recv, size_t count,
             DataType type, RedOp op) {
  switch (c) {
    case CollectiveKind::AllGather: comm.allGather(send, recv, count, type); return;
    case CollectiveKind::ReduceScatter: comm.reduceScatter(send, recv, count, type, op); return;
    case CollectiveKind::AllReduce: comm.allReduce(send, recv, count, type, op); return;
    default: break;
  }
}

struct Call {
  const void* send;
  void* recv;
};

class Runner {
 public:
  Runner(Communicator& comm, const Options& o, Baseline* baseline)
      : comm_(comm), o_(o), baseline_(baseline), rank_(comm.rank()), n_(comm.size()) {
    maxBytes_ = 0;
    for (size_t s : sizeSequence(o)) maxBytes_ = std::max(maxBytes_, s);
    send_ = allocate(maxBytes_, o.sharedBuffers);
    recv_ = allocate(maxBytes_, o.sharedBuffers);
    if (o.memcpyBaseline) {
      const size_t most = memcpyBytes(maxBytes_);
      copyFrom_ = allocate(most);
      copyTo_ = allocate(most);
      std::memset(copyFrom_.get(), 0x5a, most);  // touched: no page faults while timed
    }
  }

  Row measure(size_t nominalBytes, DataType type, std::optional<RedOp> op, uint64_t rowSeed) {
    const size_t ts = dataTypeSize(type);
    Row row;
    row.count = elementCount(o_.collective, nominalBytes, ts, n_);
    row.bytes = reportedBytes(o_.collective, row.count, ts, n_);
    row.type = type;
    row.op = op;
    const RedOp redop = op.value_or(RedOp::Sum);
    for (int inPlace = 0; inPlace < 2; ++inPlace) {
      Measure& m = inPlace ? row.inPlace : row.outOfPlace;
      const Call call = buffers(row.count, ts, inPlace != 0);
      Pattern timingPattern{type, op, n_, rowSeed * 4 + static_cast<uint64_t>(inPlace)};
      fillInputs(call, row.count, timingPattern, inPlace != 0);
      timeSharc(call, row.count, type, redop, m);
      m.timeUs = o_.median ? m.medianUs : m.meanUs;
      computeBandwidth(o_.collective, n_, row.bytes, m);
      if (o_.check) m.wrong = check(call, row.count, {type, op, n_, rowSeed * 4 + 2}, inPlace != 0);
    }
    if (baseline_) {
      BaselineMeasure b;
      b.available = baseline_->supports(o_.collective, type, op, row.count);
      if (b.available) {
        const Call call = buffers(row.count, ts, false);
        b.timeUs = baseline_->timeUs(o_.collective, call.send, call.recv, row.count, type, op,
                                     o_.iters, o_.warmup);
        b.busBw = busBandwidth(o_.collective, n_, row.bytes, b.timeUs);
      }
      row.baseline = b;
    }
    if (o_.memcpyBaseline) row.memcpy = timeMemcpy(memcpyBytes(row.bytes));
    if (o_.explain) {
      const CollectiveKind kind =
          o_.collective == CollectiveKind::AllGather       ? CollectiveKind::AllGather
          : o_.collective == CollectiveKind::ReduceScatter ? CollectiveKind::ReduceScatter
                                                           : CollectiveKind::AllReduce;
      const CallPlan p = comm_.plan(kind, row.count, type);
      row.plan = PlanInfo{p.algorithm, p.chunkBytes, p.predictedUs, p.breakdown, p.path};
    }
    return row;
  }

 private:
  Call buffers(size_t count, size_t ts, bool inPlace) {
    std::byte* s = send_.get();
    std::byte* r = recv_.get();
    const size_t chunk = count * ts * static_cast<size_t>(rank_);
    if (!inPlace) return {s, r};
    switch (o_.collective) {
      case CollectiveKind::AllGather: return {r + chunk, r};
      case CollectiveKind::ReduceScatter: return {r, r + chunk};
      case CollectiveKind::AllReduce: return {r, r};
      default: break;
    }
    return {s, r};
  }

  // Writes this rank's inputs for `p` and a sentinel everywhere the result will land.
  void fillInputs(const Call& call, size_t count, const Pattern& p, bool inPlace) {
    const size_t n = static_cast<size_t>(n_);
    switch (o_.collective) {
      case CollectiveKind::AllGather:
        fillSentinel(call.recv, p.type, count * n);  // in place: overwritten below for our part
        fillPattern(const_cast<void*>(call.send), p, rank_, 0, count);
        return;
      case CollectiveKind::ReduceScatter:
        if (!inPlace) fillSentinel(call.recv, p.type, count);
        fillPattern(const_cast<void*>(call.send), p, rank_, 0, count * n);
        return;
      case CollectiveKind::AllReduce:
        if (!inPlace) fillSentinel(call.recv, p.type, count);
        fillPattern(const_cast<void*>(call.send), p, rank_, 0, count);
        return;
      default: break;
    }
  }

  // The bytes the bus bandwidth counts per rank for a call of `bytes` (nccl-tests' size).
  size_t memcpyBytes(size_t bytes) const {
    const size_t n = static_cast<size_t>(n_);
    const size_t factor = o_.collective == CollectiveKind::AllReduce ? 2 : 1;
    return bytes / n * (n - 1) * factor + bytes % n * (n - 1) * factor / n;
  }

  // A single core's memcpy of `bytes` (rank 0 copies while the others wait, so it has the
  // memory system to itself): the median over -n.
  MemcpyMeasure timeMemcpy(size_t bytes) {
    MemcpyMeasure m;
    m.bytes = bytes;
    std::vector<double> times;
    comm_.barrier();
    if (bytes > 0 && comm_.rank() == 0) {
      for (int i = 0; i < o_.warmup; ++i) copyOnce(bytes);
      for (int i = 0; i < o_.iters; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        copyOnce(bytes);
        times.push_back(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                .count());
      }
    }
    double mine = medianOf(times);
    comm_.allReduce(&mine, &m.timeUs, 1, DataType::Float64, RedOp::Max);
    m.gbps = m.timeUs > 0 ? static_cast<double>(bytes) / 1.0e3 / m.timeUs : 0;
    return m;
  }

  void copyOnce(size_t bytes) {
    std::memcpy(copyTo_.get(), copyFrom_.get(), bytes);
    asm volatile("" ::"r"(copyTo_.get()) : "memory");  // the copy must happen each time
  }

  // Sets m.meanUs (the -n calls back to back, / -n) and m.medianUs (each call timed on its
  // own, the median), both the slowest rank's.
  void timeSharc(const Call& call, size_t count, DataType type, RedOp op, Measure& m) {
    for (int i = 0; i < o_.warmup; ++i)
      runOnce(comm_, o_.collective, call.send, call.recv, count, type, op);
    std::vector<double> each(static_cast<size_t>(o_.iters));
    comm_.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    auto last = t0;
    for (int i = 0; i < o_.iters; ++i) {
      runOnce(comm_, o_.collective, call.send, call.recv, count, type, op);
      const auto now = std::chrono::steady_clock::now();
      each[static_cast<size_t>(i)] = std::chrono::duration<double, std::micro>(now - last).count();
      last = now;
    }
    const std::chrono::duration<double, std::micro> elapsed = last - t0;
    double mine[2] = {elapsed.count() / o_.iters, medianOf(std::move(each))};
    double slowest[2] = {0, 0};
    comm_.allReduce(mine, slowest, 2, DataType::Float64, RedOp::Max);
    m.meanUs = slowest[0];
    m.medianUs = slowest[1];
  }

  // One call on fresh inputs; returns the mismatches summed over ranks.
  long long check(const Call& call, size_t count, const Pattern& p, bool inPlace) {
    fillInputs(call, count, p, inPlace);
    runOnce(comm_, o_.collective, call.send, call.recv, count, p.type, p.op.value_or(RedOp::Sum));
    size_t wrong = 0;
    switch (o_.collective) {
      case CollectiveKind::AllGather: {
        const size_t ts = dataTypeSize(p.type);
        for (int r = 0; r < n_; ++r)
          wrong += countWrongCopy(
              static_cast<const std::byte*>(call.recv) + static_cast<size_t>(r) * count * ts, p, r,
              0, count);
        break;
      }
      case CollectiveKind::ReduceScatter:
        wrong = countWrongReduced(call.recv, p, static_cast<size_t>(rank_) * count, count);
        break;
      case CollectiveKind::AllReduce: wrong = countWrongReduced(call.recv, p, 0, count); break;
      default: break;
    }
    int64_t mine = static_cast<int64_t>(wrong);
    int64_t total = 0;
    comm_.allReduce(&mine, &total, 1, DataType::Int64, RedOp::Sum);
    return total;
  }

  Communicator& comm_;
  const Options& o_;
  Baseline* baseline_;
  int rank_;
  int n_;
  size_t maxBytes_;
  Buffer send_;
  Buffer recv_;
  Buffer copyFrom_, copyTo_;  // --baseline memcpy
};

}  // namespace

RunInfo describeRun(Communicator& comm, const std::string& launch) {
  RunInfo info;
  info.nranks = comm.size();
  info.provider = comm.provider();
  info.launch = launch;
  constexpr size_t kRecord = 96;
  char mine[kRecord] = {};
  char host[64] = {};
  ::gethostname(host, sizeof host - 1);
  std::snprintf(mine, sizeof mine, "Rank %2d Pid %6d on %s", comm.rank(),
                static_cast<int>(::getpid()), host);
  std::vector<char> all(kRecord * static_cast<size_t>(comm.size()));
  comm.allGather(mine, all.data(), kRecord, DataType::Uint8);
  for (int r = 0; r < comm.size(); ++r) {
    const char* rec = all.data() + static_cast<size_t>(r) * kRecord;
    info.rankLines.emplace_back(rec, strnlen(rec, kRecord));
  }
  return info;
}

int runBenchmark(Communicator& comm, const Options& options, const std::string& launch,
                 Baseline* baseline) {
  const bool root = comm.rank() == 0;
  Reporter report(options, root);
  report.header(describeRun(comm, launch));
  Runner runner(comm, options, baseline);
  std::vector<std::optional<RedOp>> ops;
  if (core::collectiveReduces(options.collective))
    for (RedOp op : options.ops) ops.emplace_back(op);
  else
    ops.emplace_back(std::nullopt);
  uint64_t rowSeed = 1;
  for (DataType type : options.types) {
    for (const auto& op : ops) {
      for (size_t bytes : sizeSequence(options)) {
        ++rowSeed;
        if (elementCount(options.collective, bytes, dataTypeSize(type), comm.size()) == 0) continue;
        report.row(runner.measure(bytes, type, op, rowSeed));
      }
    }
  }
  report.footer();
  if (root && !options.jsonPath.empty() && !report.writeJson(options.jsonPath)) {
    std::fprintf(stderr, "sharc-perf: cannot write %s: %s\n", options.jsonPath.c_str(),
                 std::strerror(errno));
    return 1;
  }
  return report.totalWrong() ? kExitCheckFailed : 0;
}

}  // namespace sharc::perf

// sharc-gpu-perf: nccl-tests style benchmark of sharc's stream-ordered collectives on CUDA
// device buffers. Every rank uses the same GPU (--device) with its own non-blocking stream;
// ranks on one host reach each other's buffers through CUDA IPC.
//
// -N RANKS forks the ranks. The parent makes no CUDA call at all (CUDA does not survive a
// fork): each child checks for a device, and the ranks agree over the host API whether to run.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <optional>
#include <sharc/communicator.hpp>
#include <sharc/cuda.hpp>
#include <string>
#include <vector>

#include "check.hpp"
#include "gpu_cuda.hpp"
#include "gpu_perf_options.hpp"
#include "launch.hpp"
#include "report.hpp"

namespace {

using namespace sharc;
using namespace sharc::perf;

constexpr int kExitSkip = 77;            // no CUDA device: CTest's SKIP_RETURN_CODE
constexpr double kTargetFraction = 0.7;  // the target: busbw >= 70 % of the copy bw
constexpr int kCopyReps = 10;            // timed device copies (the median is reported)

struct GpuRow {
  CollectiveKind collective = CollectiveKind::AllReduce;
  size_t bytes = 0;
  size_t count = 0;
  DataType type = DataType::Float32;
  std::optional<RedOp> op;
  Measure m;          // event time on the rank's stream (max over ranks), algbw, busbw, #wrong
  double wallUs = 0;  // host wall clock of the same calls (max over ranks)
};

// Rank 0's device-to-device cudaMemcpyAsync of the largest size.
struct CopyBaseline {
  size_t bytes = 0;
  double timeUs = 0;     // median of kCopyReps
  double readWrite = 0;  // 2 x bytes / time (GB/s): bytes read + written
  double copied = 0;     // bytes / time (GB/s): bytes copied
};

class GpuBench {
 public:
  GpuBench(Communicator& comm, const GpuOptions& o)
      : comm_(comm),
        o_(o),
        rank_(comm.rank()),
        n_(comm.size()),
        sizes_(sizeSequence(o)),
        maxBytes_(sizes_.empty() ? 0 : *std::max_element(sizes_.begin(), sizes_.end())),
        send_(maxBytes_),
        recv_(maxBytes_) {
    if (o.check) {
      hostIn_.resize(maxBytes_);
      hostOut_.resize(maxBytes_);
    }
  }

  int run(const std::string& launch) {
    header(launch);
    const CopyBaseline copy = timeDeviceCopy();
    printCopy(copy);
    std::vector<GpuRow> rows;
    uint64_t seed = 1;
    for (CollectiveKind c : o_.collectives) {
      tableHeader(c);
      std::vector<std::optional<RedOp>> ops;
      if (core::collectiveReduces(c))
        ops.assign(o_.ops.begin(), o_.ops.end());
      else
        ops.emplace_back(std::nullopt);
      for (DataType type : o_.types)
        for (const auto& op : ops)
          for (size_t bytes : sizes_) {
            ++seed;
            if (elementCount(c, bytes, dataTypeSize(type), n_) == 0) continue;
            rows.push_back(measure(c, bytes, type, op, seed));
            printRow(rows.back());
          }
    }
    return footer(rows, copy);
  }

 private:
  void call(CollectiveKind c, const void* send, void* recv, size_t count, DataType type, RedOp op) {
    switch (c) {
      case CollectiveKind::AllGather:
        comm_.allGather(send, recv, count, type, stream_.get());
        return;
      case CollectiveKind::ReduceScatter:
        comm_.reduceScatter(send, recv, count, type, op, stream_.get());
        return;
      case CollectiveKind::AllReduce:
        comm_.allReduce(send, recv, count, type, op, stream_.get());
        return;
      default: break;
    }
  }

  void throwIfAsyncError() {
    std::string message;
    if (comm_.asyncError(&message) != Result::Success)
      throw std::runtime_error("stream-ordered call failed: " + message);
  }

  // Everything queued so far has finished, on the stream and in the engine.
  void quiesce() {
    SHARC_GPU_PERF_CUDA(cudaStreamSynchronize(stream_.get()));
    comm_.synchronizeStreamCalls();
    throwIfAsyncError();
  }

  void header(const std::string& launch) {
    constexpr size_t kRecord = 192;
    char host[64] = {};
    ::gethostname(host, sizeof host - 1);
    cudaDeviceProp prop{};
    SHARC_GPU_PERF_CUDA(cudaGetDeviceProperties(&prop, o_.device));
    char busId[32] = "?";
    cudaDeviceGetPCIBusId(busId, sizeof busId, o_.device);
    const std::string line = format("Rank %2d Pid %6d on ", rank_, static_cast<int>(::getpid())) +
                             host + " device " + std::to_string(o_.device) + " [" + busId + "] " +
                             prop.name;
    char mine[kRecord] = {};
    std::memcpy(mine, line.data(), std::min(line.size(), kRecord - 1));
    std::vector<char> all(kRecord * static_cast<size_t>(n_));
    comm_.allGather(mine, all.data(), kRecord, DataType::Uint8);
    if (rank_ != 0) return;
    std::string names;
    for (CollectiveKind c : o_.collectives)
      names += std::string(names.empty() ? "" : ",") + core::collectiveToolName(c);
    const std::string step =
        o_.stepFactor > 1 ? format("%llu(factor)", static_cast<unsigned long long>(o_.stepFactor))
                          : format("%zu(bytes)", o_.stepBytes);
    std::printf(
        "# sharc-gpu-perf %s: nranks %d minBytes %zu maxBytes %zu step: %s warmup iters: %d "
        "iters: %d validation: %d\n#\n",
        names.c_str(), n_, o_.minBytes, o_.maxBytes, step.c_str(), o_.warmup, o_.iters,
        o_.check ? 1 : 0);
    std::printf(
        "# Using provider %s, launch %s; stream-ordered calls, every rank on CUDA "
        "device %d with its own non-blocking stream\n",
        comm_.provider().c_str(), launch.c_str(), o_.device);
    for (int r = 0; r < n_; ++r) {
      const char* rec = all.data() + static_cast<size_t>(r) * kRecord;
      std::printf("#  %.*s\n", static_cast<int>(strnlen(rec, kRecord)), rec);
    }
    std::printf("#\n");
    std::fflush(stdout);
  }

  // Rank 0 alone (the others wait) copies the largest size device to device.
  CopyBaseline timeDeviceCopy() {
    CopyBaseline b;
    b.bytes = maxBytes_;
    quiesce();
    comm_.barrier();
    double median = 0;
    if (rank_ == 0 && b.bytes > 0) {
      auto copyOnce = [&] {
        SHARC_GPU_PERF_CUDA(cudaMemcpyAsync(recv_.get(), send_.get(), b.bytes,
                                            cudaMemcpyDeviceToDevice, stream_.get()));
      };
      for (int i = 0; i < 2; ++i) copyOnce();
      std::vector<double> times;
      for (int i = 0; i < kCopyReps; ++i) {
        SHARC_GPU_PERF_CUDA(cudaEventRecord(start_.get(), stream_.get()));
        copyOnce();
        SHARC_GPU_PERF_CUDA(cudaEventRecord(stop_.get(), stream_.get()));
        SHARC_GPU_PERF_CUDA(cudaEventSynchronize(stop_.get()));
        times.push_back(elapsedUs(start_, stop_));
      }
      std::sort(times.begin(), times.end());
      median = (times[kCopyReps / 2 - 1] + times[kCopyReps / 2]) / 2;
    }
    // Rank 0's figure to every rank; also the barrier that held the others.
    comm_.allReduce(&median, &b.timeUs, 1, DataType::Float64, RedOp::Max);
    if (b.timeUs > 0) {
      b.copied = static_cast<double>(b.bytes) / 1.0e3 / b.timeUs;
      b.readWrite = 2 * b.copied;
    }
    return b;
  }

  void printCopy(const CopyBaseline& b) {
    if (rank_ != 0) return;
    std::printf(
        "# Device copy baseline (rank 0 alone, cudaMemcpyAsync device to device, %zu B, median "
        "of %d): %s us\n",
        b.bytes, kCopyReps, timeStr(b.timeUs).c_str());
    std::printf(
        "#   device copy bandwidth %.2f GB/s (bytes read + written: 2 x size / time); "
        "copy rate %.2f GB/s (bytes copied: size / time)\n",
        b.readWrite, b.copied);
    std::printf(
        "# Bound: %d processes time-share one GPU; each rank moves its own (N-1)/N of the data,\n"
        "#   so the GPU carries N = %d times one rank's traffic: busbw (one rank's) is at most\n"
        "#   copy rate / N = %.2f GB/s = %.1f %% of the device copy bandwidth; aggregate busbw "
        "= N x busbw\n#\n",
        n_, n_, b.copied / n_, 100.0 / (2.0 * n_));
    std::fflush(stdout);
  }

  void tableHeader(CollectiveKind c) {
    if (rank_ != 0) return;
    std::printf("# %s\n", core::collectiveToolName(c));
    std::printf("# %10s  %12s  %8s  %6s  %7s  %6s  %6s  %6s  %7s\n", "size", "count", "type",
                "redop", "time", "algbw", "busbw", "#wrong", "wall");
    std::printf("# %10s  %12s  %8s  %6s  %7s  %6s  %6s  %6s  %7s\n", "(B)", "(elements)", "", "",
                "(us)", "(GB/s)", "(GB/s)", "", "(us)");
    std::fflush(stdout);
  }

  void printRow(const GpuRow& r) {
    if (rank_ != 0) return;
    const std::string wrong = r.m.wrong < 0 ? "N/A" : format("%lld", r.m.wrong);
    std::printf("%12zu  %12zu  %8s  %6s  %7s  %6.2f  %6.2f  %6s  %7s\n", r.bytes, r.count,
                typeName(r.type), r.op ? redOpName(*r.op) : "none", timeStr(r.m.timeUs).c_str(),
                r.m.algBw, r.m.busBw, wrong.c_str(), timeStr(r.wallUs).c_str());
    std::fflush(stdout);
  }

  GpuRow measure(CollectiveKind c, size_t nominal, DataType type, std::optional<RedOp> op,
                 uint64_t seed) {
    const size_t ts = dataTypeSize(type);
    GpuRow row;
    row.collective = c;
    row.count = elementCount(c, nominal, ts, n_);
    row.bytes = reportedBytes(c, row.count, ts, n_);
    row.type = type;
    row.op = op;
    const RedOp redop = op.value_or(RedOp::Sum);
    for (int i = 0; i < o_.warmup; ++i) call(c, send_.get(), recv_.get(), row.count, type, redop);
    quiesce();
    comm_.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    SHARC_GPU_PERF_CUDA(cudaEventRecord(start_.get(), stream_.get()));
    for (int i = 0; i < o_.iters; ++i) call(c, send_.get(), recv_.get(), row.count, type, redop);
    SHARC_GPU_PERF_CUDA(cudaEventRecord(stop_.get(), stream_.get()));
    SHARC_GPU_PERF_CUDA(cudaEventSynchronize(stop_.get()));
    const std::chrono::duration<double, std::micro> wall = std::chrono::steady_clock::now() - t0;
    quiesce();
    double mine[2] = {elapsedUs(start_, stop_) / o_.iters, wall.count() / o_.iters};
    double slowest[2] = {0, 0};
    comm_.allReduce(mine, slowest, 2, DataType::Float64, RedOp::Max);
    row.m.timeUs = slowest[0];
    row.wallUs = slowest[1];
    computeBandwidth(c, n_, row.bytes, row.m);
    if (o_.check) row.m.wrong = check(c, row.count, Pattern{type, op, n_, seed});
    return row;
  }

  // One call on fresh inputs, compared with the float64 host reference; the mismatches
  // summed over ranks.
  long long check(CollectiveKind c, size_t count, const Pattern& p) {
    const size_t ts = dataTypeSize(p.type);
    const size_t n = static_cast<size_t>(n_);
    const size_t inCount = c == CollectiveKind::ReduceScatter ? count * n : count;
    const size_t outCount = c == CollectiveKind::AllGather ? count * n : count;
    fillPattern(hostIn_.data(), p, rank_, 0, inCount);
    fillSentinel(hostOut_.data(), p.type, outCount);
    cudaStream_t s = stream_.get();
    SHARC_GPU_PERF_CUDA(
        cudaMemcpyAsync(send_.get(), hostIn_.data(), inCount * ts, cudaMemcpyHostToDevice, s));
    SHARC_GPU_PERF_CUDA(
        cudaMemcpyAsync(recv_.get(), hostOut_.data(), outCount * ts, cudaMemcpyHostToDevice, s));
    call(c, send_.get(), recv_.get(), count, p.type, p.op.value_or(RedOp::Sum));
    SHARC_GPU_PERF_CUDA(
        cudaMemcpyAsync(hostOut_.data(), recv_.get(), outCount * ts, cudaMemcpyDeviceToHost, s));
    quiesce();
    size_t wrong = 0;
    switch (c) {
      case CollectiveKind::AllGather:
        for (int r = 0; r < n_; ++r)
          wrong +=
              countWrongCopy(hostOut_.data() + static_cast<size_t>(r) * count * ts, p, r, 0, count);
        break;
      case CollectiveKind::ReduceScatter:
        wrong = countWrongReduced(hostOut_.data(), p, static_cast<size_t>(rank_) * count, count);
        break;
      case CollectiveKind::AllReduce:
        wrong = countWrongReduced(hostOut_.data(), p, 0, count);
        break;
      default: break;
    }
    int64_t mineWrong = static_cast<int64_t>(wrong), total = 0;
    comm_.allReduce(&mineWrong, &total, 1, DataType::Int64, RedOp::Sum);
    return total;
  }

  // The summary: totals, then each collective's largest rows against the device copy.
  int footer(const std::vector<GpuRow>& rows, const CopyBaseline& copy) {
    long long wrong = 0;
    double busSum = 0;
    for (const auto& r : rows) {
      wrong += std::max(r.m.wrong, 0LL);
      busSum += r.m.busBw;
    }
    if (rank_ != 0) return wrong ? kExitCheckFailed : 0;
    if (o_.check)
      std::printf("# Out of bounds values : %lld %s\n", wrong, wrong ? "FAILED" : "OK");
    else
      std::printf("# Out of bounds values : N/A (not checked: --check)\n");
    std::printf("# Avg bus bandwidth    : %g \n#\n",
                rows.empty() ? 0.0 : busSum / static_cast<double>(rows.size()));
    const bool manyKinds = o_.types.size() > 1 || o_.ops.size() > 1;
    for (CollectiveKind c : o_.collectives) {
      size_t largest = 0;
      for (const auto& r : rows)
        if (r.collective == c) largest = std::max(largest, r.bytes);
      for (const auto& r : rows) {
        if (r.collective != c || r.bytes != largest || copy.readWrite <= 0) continue;
        std::string what = core::collectiveToolName(c);
        if (manyKinds)
          what +=
              format(" %s%s%s", typeName(r.type), r.op ? " " : "", r.op ? redOpName(*r.op) : "");
        what += " " + sizeLabel(r.bytes);
        const double bw = r.m.busBw;
        std::printf(
            "# %s busbw %.2f GB/s = %.1f %% of device copy bandwidth (bytes "
            "read+written) %.2f GB/s\n",
            what.c_str(), bw, 100 * bw / copy.readWrite, copy.readWrite);
        std::printf(
            "# %s busbw %.2f GB/s = %.1f %% of device copy rate (bytes copied) %.2f "
            "GB/s\n",
            what.c_str(), bw, 100 * bw / copy.copied, copy.copied);
        std::printf(
            "# %s aggregate busbw (%d x busbw) %.2f GB/s = %.1f %% of device copy "
            "bandwidth, %.1f %% of copy rate\n",
            what.c_str(), n_, n_ * bw, 100 * n_ * bw / copy.readWrite, 100 * n_ * bw / copy.copied);
        if (c != CollectiveKind::AllReduce)
          std::printf(
              "# %s target %.0f %%: %s (busbw vs device copy bandwidth, bytes "
              "read+written; informational; with aggregate busbw: %s)\n",
              what.c_str(), 100 * kTargetFraction,
              bw >= kTargetFraction * copy.readWrite ? "PASS" : "FAIL",
              n_ * bw >= kTargetFraction * copy.readWrite ? "PASS" : "FAIL");
      }
    }
    if (o_.check && !wrong)
      std::printf("# sharc-gpu-perf: all checks passed\n");
    else if (!o_.check)
      std::printf("# sharc-gpu-perf: done (results not checked; use --check)\n");
    std::fflush(stdout);
    return wrong ? kExitCheckFailed : 0;
  }

  Communicator& comm_;
  const GpuOptions& o_;
  int rank_;
  int n_;
  std::vector<size_t> sizes_;
  size_t maxBytes_;
  Stream stream_;
  Event start_, stop_;
  DeviceBuffer send_, recv_;
  std::vector<std::byte> hostIn_, hostOut_;  // --check: inputs and results on the host
};

// Whether this rank can run: 2 yes, 1 error (reason in `why`), 0 no CUDA device.
int probeDevice(int device, std::string& why) {
  if (!cudaAvailable(&why)) return 0;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaSuccess && device >= count) {
    why = "--device " + std::to_string(device) + ": only " + std::to_string(count) +
          " CUDA device(s)";
    return 1;
  }
  if (e == cudaSuccess) e = cudaSetDevice(device);
  if (e == cudaSuccess) e = cudaFree(nullptr);  // create the context now, not while timed
  if (e != cudaSuccess) {
    why = std::string("device ") + std::to_string(device) + ": " + cudaGetErrorString(e);
    return 1;
  }
  return 2;
}

// One rank. Returns 0, kExitSkip (no device), kExitCheckFailed, or 1 on errors.
int runRank(const GpuOptions& o, const std::string& launch) {
  std::string why;
  const int mine = probeDevice(o.device, why);
  auto comm = Communicator::createFromEnvironment();
  int32_t state = mine, least = 0;
  comm->allReduce(&state, &least, 1, DataType::Int32, RedOp::Min);
  int rc = 0;
  if (least == 0) {
    if (comm->rank() == 0)
      std::printf("sharc-gpu-perf: no CUDA device (%s): skipped\n",
                  mine == 0 ? why.c_str() : "not on every rank");
    rc = kExitSkip;
  } else if (least == 1) {
    if (mine == 1) std::fprintf(stderr, "sharc-gpu-perf: rank %d: %s\n", comm->rank(), why.c_str());
    rc = 1;
  } else {
    try {
      GpuBench bench(*comm, o);
      rc = bench.run(launch);
      comm->barrier();  // no rank frees its buffers while a peer may still map them
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sharc-gpu-perf: rank %d: %s\n", comm->rank(), e.what());
      rc = 1;
    }
  }
  std::fflush(stdout);
  comm->destroy();
  return rc;
}

bool envSet(const char* name) {
  const char* v = std::getenv(name);
  return v && *v;
}

int run(const GpuOptions& o) {
  if (o.launchRanks <= 0) {
    if (!envSet("SHARC_ROOT") && !envSet("MASTER_ADDR") && !envSet("SHARC_WORLD_SIZE"))
      throw UsageError(
          "give -N RANKS, or start the ranks with SHARC_ROOT/SHARC_RANK/"
          "SHARC_WORLD_SIZE (or torchrun's variables) set");
    const int rc = runRank(o, "environment");
    return rc == kExitCheckFailed ? 1 : rc;
  }
  // The children tell the parent about a skip through a shared page: the launcher counts
  // every exit status other than 0 (and kExitCheckFailed) as a failure.
  void* page = ::mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) throw std::runtime_error(std::string("mmap: ") + std::strerror(errno));
  auto* skipped = new (page) std::atomic<int>(0);
  const std::string launch = "fork (-N " + std::to_string(o.launchRanks) + ")";
  int rc = launchLocalRanks(o.launchRanks, o.timeoutSec, [&](int rank) {
    if (o.nodes > 1) {  // before the child reads its configuration
      const std::string node = "node" + std::to_string(rank * o.nodes / o.launchRanks);
      ::setenv("SHARC_NODE_ID", node.c_str(), 1);
    }
    const int r = runRank(o, launch);
    if (r != kExitSkip) return r;
    skipped->store(1);
    return 0;
  });
  if (rc == 0 && skipped->load()) rc = kExitSkip;
  ::munmap(page, sizeof(std::atomic<int>));
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  GpuOptions options;
  try {
    options = parseGpuOptions(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "sharc-gpu-perf: %s\n%s", e.what(), gpuUsageText(argv[0]).c_str());
    return 2;
  }
  if (options.help) {
    std::fputs(gpuUsageText(argv[0]).c_str(), stdout);
    return 0;
  }
  try {
    return run(options);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "sharc-gpu-perf: %s\n", e.what());
    return 2;
  } catch (const sharc::Error& e) {
    std::fprintf(stderr, "sharc-gpu-perf: %s (%s)\n", e.what(), sharc::resultString(e.code()));
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sharc-gpu-perf: %s\n", e.what());
    return 1;
  }
}

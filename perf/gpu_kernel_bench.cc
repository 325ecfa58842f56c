// sharc-gpu-kernel-bench: bandwidth of sharc's CUDA kernels (kernels/) on one GPU, against the
// device's own copy (cudaMemcpyAsync device to device) as the reference.
//
// Each row is the median of --reps timed runs (CUDA events around one call on a stream) after
// --warmup untimed ones, on buffers of --bytes each. Bandwidth counts the bytes read plus the
// bytes written: 2x the buffer for the copies, 3x for a reduction of two inputs into a third
// buffer. The closing lines compare each reduction with the device copy against the target
// (>= 0.85 of the copy's bandwidth); they are informational: the exit status is 0 unless
// something failed, 77 when there is no CUDA device (a skip for CTest), 2 for a usage error.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/kernels.hpp"

namespace {

constexpr double kTargetRatio = 0.85;
constexpr int kSkipped = 77;

struct Options {
  size_t bytes = size_t{256} << 20;
  int reps = 20;
  int warmup = 3;
  int device = 0;
};

void usage(FILE* out) {
  std::fprintf(out,
               "usage: sharc-gpu-kernel-bench [--bytes N[K|M|G]] [--reps N] [--warmup N] "
               "[--device N]\n"
               "  --bytes   size of each buffer (default 256M; K/M/G are powers of 1024)\n"
               "  --reps    timed runs per row, the median is reported (default 20)\n"
               "  --warmup  untimed runs before them (default 3)\n"
               "  --device  CUDA device number (default 0)\n");
}

bool parseSize(const char* text, size_t* out) {
  errno = 0;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (end == text || errno != 0) return false;
  unsigned shift = 0;
  switch (*end) {
    case 'k':
    case 'K':
      shift = 10;
      ++end;
      break;
    case 'm':
    case 'M':
      shift = 20;
      ++end;
      break;
    case 'g':
    case 'G':
      shift = 30;
      ++end;
      break;
    default: break;
  }
  if (*end == 'i') ++end;  // KiB, MiB, GiB
  if (*end == 'B' || *end == 'b') ++end;
  if (*end != '\0') return false;
  if (value > (~0ull >> shift)) return false;
  *out = static_cast<size_t>(value << shift);
  return true;
}

bool parseInt(const char* text, int minimum, int* out) {
  errno = 0;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || errno != 0 || value < minimum || value > 1000000) {
    return false;
  }
  *out = static_cast<int>(value);
  return true;
}

// Parses argv; returns -1 to go on, else the exit status.
int parseOptions(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      usage(stdout);
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "sharc-gpu-kernel-bench: %s needs a value\n", arg.c_str());
      usage(stderr);
      return 2;
    }
    const char* value = argv[++i];
    bool ok = false;
    if (arg == "--bytes" || arg == "-b") {
      ok = parseSize(value, &o->bytes) && o->bytes >= 16;
    } else if (arg == "--reps" || arg == "-n") {
      ok = parseInt(value, 1, &o->reps);
    } else if (arg == "--warmup" || arg == "-w") {
      ok = parseInt(value, 0, &o->warmup);
    } else if (arg == "--device" || arg == "-d") {
      ok = parseInt(value, 0, &o->device);
    } else {
      std::fprintf(stderr, "sharc-gpu-kernel-bench: unknown option %s\n", arg.c_str());
      usage(stderr);
      return 2;
    }
    if (!ok) {
      std::fprintf(stderr, "sharc-gpu-kernel-bench: bad value for %s: %s\n", arg.c_str(), value);
      return 2;
    }
  }
  return -1;
}

[[noreturn]] void fail(const char* what, cudaError_t status) {
  std::fprintf(stderr, "sharc-gpu-kernel-bench: %s: %s: %s\n", what, cudaGetErrorName(status),
               cudaGetErrorString(status));
  std::exit(1);
}

#define BENCH_CHECK(call)                                         \
  do {                                                            \
    const cudaError_t bench_status_ = (call);                     \
    if (bench_status_ != cudaSuccess) fail(#call, bench_status_); \
  } while (0)

struct Row {
  std::string name;
  size_t moved;  // bytes read + written per call
  double micros;
  double gbps;
};

class Bench {
 public:
  explicit Bench(const Options& o) : o_(o) {
    BENCH_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    BENCH_CHECK(cudaEventCreate(&start_));
    BENCH_CHECK(cudaEventCreate(&stop_));
  }
  ~Bench() {
    (void)cudaEventDestroy(start_);
    (void)cudaEventDestroy(stop_);
    (void)cudaStreamDestroy(stream_);
  }
  Bench(const Bench&) = delete;
  Bench& operator=(const Bench&) = delete;

  cudaStream_t stream() const { return stream_; }

  // Times op (one call on stream()) and returns its row.
  template <typename Op>
  Row measure(const std::string& name, size_t moved, Op&& op) {
    for (int i = 0; i < o_.warmup; ++i) {
      const cudaError_t status = op();
      if (status != cudaSuccess) fail(name.c_str(), status);
    }
    BENCH_CHECK(cudaStreamSynchronize(stream_));
    std::vector<double> micros;
    for (int r = 0; r < o_.reps; ++r) {
      BENCH_CHECK(cudaEventRecord(start_, stream_));
      const cudaError_t status = op();
      if (status != cudaSuccess) fail(name.c_str(), status);
      BENCH_CHECK(cudaEventRecord(stop_, stream_));
      BENCH_CHECK(cudaEventSynchronize(stop_));
      float ms = 0;
      BENCH_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
      micros.push_back(static_cast<double>(ms) * 1e3);
    }
    std::sort(micros.begin(), micros.end());
    const size_t m = micros.size();
    const double median = m % 2 ? micros[m / 2] : (micros[m / 2 - 1] + micros[m / 2]) / 2;
    // bytes / microseconds = MB/s; / 1e3 = GB/s (10^9 bytes).
    return Row{name, moved, median, median > 0 ? static_cast<double>(moved) / median / 1e3 : 0};
  }

 private:
  Options o_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (const int status = parseOptions(argc, argv, &o); status >= 0) return status;

  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess || devices <= 0) {
    const std::string reason =
        status != cudaSuccess
            ? std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status)
            : std::string("cudaGetDeviceCount found 0 devices");
    std::printf("sharc-gpu-kernel-bench: no CUDA device (%s): skipped\n", reason.c_str());
    return kSkipped;
  }
  if (o.device >= devices) {
    std::fprintf(stderr, "sharc-gpu-kernel-bench: no device %d (%d found)\n", o.device, devices);
    return 2;
  }
  BENCH_CHECK(cudaSetDevice(o.device));
  cudaDeviceProp prop{};
  BENCH_CHECK(cudaGetDeviceProperties(&prop, o.device));

  // Whole 16-byte words, so every row moves the same bytes on the vectorised paths.
  const size_t bytes = o.bytes & ~size_t{15};
  std::printf(
      "# sharc-gpu-kernel-bench: device %d (%s, %d SMs), %zu bytes per buffer, median "
      "of %d reps after %d warm-up\n",
      o.device, prop.name, prop.multiProcessorCount, bytes, o.reps, o.warmup);

  void* a = nullptr;
  void* b = nullptr;
  void* out = nullptr;
  BENCH_CHECK(cudaMalloc(&a, bytes));
  BENCH_CHECK(cudaMalloc(&b, bytes));
  BENCH_CHECK(cudaMalloc(&out, bytes));
  // Finite values for every type (0x3C3C.. and 0x3F3F..: no NaN, infinity or subnormal).
  BENCH_CHECK(cudaMemset(a, 0x3C, bytes));
  BENCH_CHECK(cudaMemset(b, 0x3F, bytes));
  BENCH_CHECK(cudaMemset(out, 0, bytes));
  BENCH_CHECK(cudaDeviceSynchronize());

  std::vector<Row> rows;
  {
    Bench bench(o);
    const cudaStream_t s = bench.stream();
    rows.push_back(bench.measure("memcpy_d2d", 2 * bytes, [&] {
      return cudaMemcpyAsync(out, a, bytes, cudaMemcpyDeviceToDevice, s);
    }));
    rows.push_back(bench.measure("kernels_copy", 2 * bytes,
                                 [&] { return sharc::kernels::copy(out, a, bytes, s); }));
    struct ReduceCase {
      const char* name;
      sharc::DataType type;
    };
    const ReduceCase cases[] = {{"reduce_sum_f32", sharc::DataType::Float32},
                                {"reduce_sum_bf16", sharc::DataType::BFloat16},
                                {"reduce_sum_f16", sharc::DataType::Float16},
                                {"reduce_sum_i32", sharc::DataType::Int32}};
    const void* inputs[2] = {a, b};
    for (const ReduceCase& c : cases) {
      const size_t count = bytes / sharc::dataTypeSize(c.type);
      rows.push_back(bench.measure(c.name, 3 * bytes, [&] {
        return sharc::kernels::reduce(out, inputs, 2, count, c.type, sharc::RedOp::Sum, 1, s);
      }));
    }
  }
  BENCH_CHECK(cudaFree(a));
  BENCH_CHECK(cudaFree(b));
  BENCH_CHECK(cudaFree(out));

  const double reference = rows[0].gbps;
  std::printf("%-18s %14s %12s %10s %8s\n", "name", "bytes_moved", "median_us", "GB/s", "ratio");
  for (const Row& r : rows) {
    std::printf("%-18s %14zu %12.1f %10.1f %8.3f\n", r.name.c_str(), r.moved, r.micros, r.gbps,
                reference > 0 ? r.gbps / reference : 0.0);
  }
  for (const Row& r : rows) {
    if (r.name.rfind("reduce_", 0) != 0) continue;
    const double ratio = reference > 0 ? r.gbps / reference : 0.0;
    std::printf("%s ratio %.2f >= %.2f: %s\n", r.name.c_str(), ratio, kTargetRatio,
                ratio >= kTargetRatio ? "PASS" : "FAIL");
  }
  return 0;
}

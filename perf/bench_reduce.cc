// Microbenchmark of the host reduction kernels (core::reduce) against a memcpy baseline.
//
// Each benchmark moves the same output bytes: reduce reads two inputs and writes one output,
// memcpy reads one and writes one. Bytes/second counts everything read plus written, so the
// numbers show how close a kernel gets to the memory system's streaming rate; the ratio to
// memcpy of the same output size is the figure of merit (about 1.5x memcpy's bytes/second
// when a kernel is purely bandwidth-bound: three streams instead of two).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/copy.hpp"
#include "core/reduce.hpp"
#include "core/reduce_dispatch.hpp"

namespace {

using sharc::DataType;
using sharc::RedOp;

// Per-input sizes: in L1/L2, around L2/L3, and well beyond the last-level cache.
constexpr int64_t kSizes[] = {64 << 10, 1 << 20, 16 << 20};

// Buffers filled with moderate, finite values of the element type so that float16/bfloat16
// sums do not run into inf/NaN (the kernels are branch-free, but keep the data realistic).
struct Buffers {
  std::vector<unsigned char> a, b, dst;
  Buffers(size_t bytes, DataType type) : a(bytes), b(bytes), dst(bytes) {
    std::mt19937 rng(42);
    const size_t esize = sharc::dataTypeSize(type);
    const size_t n = bytes / esize;
    std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
    for (auto* buf : {&a, &b}) {
      for (size_t i = 0; i < n; ++i) {
        const float f = dist(rng);
        unsigned char* p = buf->data() + i * esize;
        switch (type) {
          case DataType::Float16: {
            const uint16_t h = sharc::core::floatToHalf(f);
            std::memcpy(p, &h, 2);
            break;
          }
          case DataType::BFloat16: {
            const uint16_t h = sharc::core::floatToBfloat16(f);
            std::memcpy(p, &h, 2);
            break;
          }
          case DataType::Float32: std::memcpy(p, &f, 4); break;
          case DataType::Float64: {
            const double d = f;
            std::memcpy(p, &d, 8);
            break;
          }
          default: {
            const int32_t v = static_cast<int32_t>(rng());
            std::memcpy(p, &v, esize < 4 ? esize : 4);
            break;
          }
        }
      }
    }
  }
};

void BM_Reduce(benchmark::State& state, DataType type, RedOp op) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t count = bytes / sharc::dataTypeSize(type);
  Buffers buf(bytes, type);
  for (auto _ : state) {
    sharc::core::reduce(buf.dst.data(), buf.a.data(), buf.b.data(), count, type, op);
    benchmark::DoNotOptimize(buf.dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 3 * bytes);
}

// One implementation forced (reduce_dispatch.hpp), to compare the instruction-set variants on
// the same machine; BM_Reduce above measures whatever reduce() selects on this CPU.
void BM_ReduceWith(benchmark::State& state, sharc::core::ReduceIsa isa, DataType type, RedOp op) {
  if (!sharc::core::isaAvailable(isa)) {
    state.SkipWithError("instruction set not available on this CPU/build");
    return;
  }
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t count = bytes / sharc::dataTypeSize(type);
  Buffers buf(bytes, type);
  for (auto _ : state) {
    sharc::core::reduceWith(isa, buf.dst.data(), buf.a.data(), buf.b.data(), count, type, op);
    benchmark::DoNotOptimize(buf.dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 3 * bytes);
}

// Baseline: copy the same number of output bytes.
void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  Buffers buf(bytes, DataType::Uint8);
  for (auto _ : state) {
    std::memcpy(buf.dst.data(), buf.a.data(), bytes);
    benchmark::DoNotOptimize(buf.dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 2 * bytes);
}

// The streaming copy the shared-memory transport and schedules use for large outputs,
// against memcpy of the same bytes, in 64 KiB pieces (one FIFO slot at a time).
void BM_CopyPieces(benchmark::State& state, bool streaming) {
  const size_t bytes = static_cast<size_t>(state.range(0)), piece = 64 << 10;
  Buffers buf(bytes, DataType::Uint8);
  for (auto _ : state) {
    for (size_t o = 0; o < bytes; o += piece) {
      const size_t n = std::min(piece, bytes - o);
      if (streaming)
        sharc::core::copyStreaming(buf.dst.data() + o, buf.a.data() + o, n);
      else
        std::memcpy(buf.dst.data() + o, buf.a.data() + o, n);
    }
    benchmark::DoNotOptimize(buf.dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 2 * bytes);
}

void sizes(benchmark::internal::Benchmark* b) {
  for (int64_t s : kSizes) b->Arg(s);
}

BENCHMARK(BM_Memcpy)->Apply(sizes);
BENCHMARK_CAPTURE(BM_CopyPieces, memcpy, false)->Arg(32 << 20);
BENCHMARK_CAPTURE(BM_CopyPieces, streaming, true)->Arg(32 << 20);
BENCHMARK_CAPTURE(BM_Reduce, float32_sum, DataType::Float32, RedOp::Sum)->Apply(sizes);
BENCHMARK_CAPTURE(BM_Reduce, float32_max, DataType::Float32, RedOp::Max)->Apply(sizes);
BENCHMARK_CAPTURE(BM_Reduce, bfloat16_sum, DataType::BFloat16, RedOp::Sum)->Apply(sizes);
BENCHMARK_CAPTURE(BM_Reduce, float16_sum, DataType::Float16, RedOp::Sum)->Apply(sizes);
BENCHMARK_CAPTURE(BM_Reduce, int32_sum, DataType::Int32, RedOp::Sum)->Apply(sizes);

using sharc::core::ReduceIsa;
BENCHMARK_CAPTURE(BM_ReduceWith, float16_sum_baseline, ReduceIsa::Baseline, DataType::Float16,
                  RedOp::Sum)
    ->Apply(sizes);
BENCHMARK_CAPTURE(BM_ReduceWith, float16_sum_avx2, ReduceIsa::Avx2, DataType::Float16, RedOp::Sum)
    ->Apply(sizes);
BENCHMARK_CAPTURE(BM_ReduceWith, float16_max_avx2, ReduceIsa::Avx2, DataType::Float16, RedOp::Max)
    ->Apply(sizes);
BENCHMARK_CAPTURE(BM_ReduceWith, bfloat16_sum_baseline, ReduceIsa::Baseline, DataType::BFloat16,
                  RedOp::Sum)
    ->Apply(sizes);
BENCHMARK_CAPTURE(BM_ReduceWith, bfloat16_sum_avx2, ReduceIsa::Avx2, DataType::BFloat16, RedOp::Sum)
    ->Apply(sizes);
BENCHMARK_CAPTURE(BM_ReduceWith, bfloat16_max_avx2, ReduceIsa::Avx2, DataType::BFloat16, RedOp::Max)
    ->Apply(sizes);
BENCHMARK_CAPTURE(BM_Reduce, float64_sum, DataType::Float64, RedOp::Sum)->Apply(sizes);

}  // namespace

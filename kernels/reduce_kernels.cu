// Element-wise reduction of up to eight device-readable buffers (kernels.hpp).
//
// One kernel template per (element type, operator, input bound): reduceKernel<E, Op, kMaxN>
// with kMaxN = 2 (one or two inputs, the pairwise case of ring algorithms) or 8 (three to
// eight). Avg is the Sum kernel with a division at the end (a uniform run-time flag).
//
// Memory access: when the output and every input are 16-byte aligned, each thread loads whole
// uint4 words (16 bytes: 16 int8, 8 float16, 4 float32, 2 float64, ...), kUnroll of them per
// input, all before any arithmetic or store, so that many loads are in flight per thread; a
// block covers kThreads * kUnroll consecutive words per step (coalesced), and the grid strides
// over the buffer. Pointers that are all misaligned alike (the same address modulo 16, as when
// every buffer is offset by the same number of elements) take the same path after a head of
// fewer than 16 bytes. The head, the count % (16 / size) elements after the last whole word,
// and everything when the pointers are misaligned differently, go through the
// element-at-a-time loop.
//
// Semantics follow the host reductions (src/core/reduce.cc): integer Sum/Prod wrap (computed in
// the unsigned type), floating Max/Min propagate NaN, Avg divides the sum (truncating for
// integers with the same handling of huge divisors as core::finishAverage; true division for
// floating types). float16/bfloat16 are widened to float32, reduced over all inputs in
// float32 (divided there too for Avg) and rounded once to nearest-even. No fast-math: the
// kernels rely on IEEE NaN comparisons and correctly rounded division.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/kernels.hpp"
#include "kernels/launch_config.hpp"

namespace sharc::kernels {
namespace {

constexpr int kThreads = 256;

// Kernel arguments, passed by value (constant parameter memory).
struct ReduceParams {
  const void* in[kMaxReduceInputs];  // [n, 8) are null
  void* out;
  size_t count;
  uint64_t divisor;  // Avg's divisor as given (integers)
  double divisorD;   // ... converted for float64
  float divisorF;    // ... converted for float32, float16, bfloat16
  int n;
  int intAvgMode;   // integers: kAvgDivide, kAvgZero or kAvgMinToMinusOne
  size_t head;      // vectorized: elements before the first 16-byte boundary (< 16 bytes)
  bool vectorized;  // out and every input at the same address modulo 16
  bool average;     // Avg with a divisor > 1
};

// How an integer Avg divides (core::finishAverage's rules for divisors T cannot hold).
constexpr int kAvgDivide = 0;         // x / T(divisor)
constexpr int kAvgZero = 1;           // divisor larger than any |x|: 0
constexpr int kAvgMinToMinusOne = 2;  // signed, divisor == 2^(bits-1): min -> -1, else 0

// ---- element types -----------------------------------------------------------------------
//
// Raw: the in-memory element; Acc: what it is reduced in.

struct Half {};      // IEEE binary16
struct BFloat16 {};  // bfloat16

template <typename T>
struct Elem {
  using Raw = T;
  using Acc = T;
  __device__ __forceinline__ static Acc load(Raw r) { return r; }
  __device__ __forceinline__ static Raw store(Acc a) { return a; }
};

template <>
struct Elem<Half> {
  using Raw = uint16_t;
  using Acc = float;
  __device__ __forceinline__ static float load(uint16_t r) {
    return __half2float(__ushort_as_half(r));
  }
  __device__ __forceinline__ static uint16_t store(float a) {
    return __half_as_ushort(__float2half_rn(a));
  }
};

template <>
struct Elem<BFloat16> {
  using Raw = uint16_t;
  using Acc = float;
  __device__ __forceinline__ static float load(uint16_t r) {
    return __bfloat162float(__ushort_as_bfloat16(r));
  }
  __device__ __forceinline__ static uint16_t store(float a) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(a));
  }
};

// ---- operators ---------------------------------------------------------------------------

// Integer arithmetic in the unsigned type (at least unsigned int) wraps instead of overflowing.
template <typename T>
using WrapType =
    std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

struct SumOp {
  static constexpr bool kSum = true;
  template <typename A>
  __device__ __forceinline__ static A apply(A a, A b) {
    if constexpr (std::is_integral_v<A>) {
      return static_cast<A>(static_cast<WrapType<A>>(a) + static_cast<WrapType<A>>(b));
    } else {
      return a + b;
    }
  }
};

struct ProdOp {
  static constexpr bool kSum = false;
  template <typename A>
  __device__ __forceinline__ static A apply(A a, A b) {
    if constexpr (std::is_integral_v<A>) {
      return static_cast<A>(static_cast<WrapType<A>>(a) * static_cast<WrapType<A>>(b));
    } else {
      return a * b;
    }
  }
};

// NaN-propagating: a NaN accumulator stays; a NaN operand b is taken (a > NaN is false).
struct MaxOp {
  static constexpr bool kSum = false;
  template <typename A>
  __device__ __forceinline__ static A apply(A a, A b) {
    if constexpr (std::is_integral_v<A>) {
      return a > b ? a : b;
    } else {
      return (a > b || a != a) ? a : b;
    }
  }
};

struct MinOp {
  static constexpr bool kSum = false;
  template <typename A>
  __device__ __forceinline__ static A apply(A a, A b) {
    if constexpr (std::is_integral_v<A>) {
      return a < b ? a : b;
    } else {
      return (a < b || a != a) ? a : b;
    }
  }
};

// Avg's last step on the accumulator.
template <typename A>
__device__ __forceinline__ A divideAverage(A x, const ReduceParams& p) {
  if constexpr (std::is_same_v<A, float>) {
    return x / p.divisorF;
  } else if constexpr (std::is_same_v<A, double>) {
    return x / p.divisorD;
  } else {
    if (p.intAvgMode == kAvgZero) return A{0};
    if constexpr (std::is_signed_v<A>) {
      if (p.intAvgMode == kAvgMinToMinusOne) {
        const A minValue = static_cast<A>(WrapType<A>{1} << (sizeof(A) * 8 - 1));
        return x == minValue ? A{-1} : A{0};
      }
    }
    return static_cast<A>(x / static_cast<A>(p.divisor));
  }
}

// ---- kernel ------------------------------------------------------------------------------

template <int kMaxN>
__host__ __device__ constexpr int unrollFor() {
  return kMaxN <= 2 ? 4 : 2;  // uint4 words per input a thread loads per step
}

// Reduces one 16-byte word of each input (v[0..n)).
template <typename E, typename Op, int kMaxN>
__device__ __forceinline__ uint4 combineWord(const uint4 (&v)[kMaxN], int n,
                                             const ReduceParams& p) {
  using Tr = Elem<E>;
  using Raw = typename Tr::Raw;
  using Acc = typename Tr::Acc;
  constexpr int kPer = 16 / sizeof(Raw);
  union Pack {
    uint4 word;
    Raw e[kPer];
  };
  Acc acc[kPer];
  Pack x;
  x.word = v[0];
#pragma unroll
  for (int j = 0; j < kPer; ++j) acc[j] = Tr::load(x.e[j]);
#pragma unroll
  for (int k = 1; k < kMaxN; ++k) {
    if (k < n) {
      Pack y;
      y.word = v[k];
#pragma unroll
      for (int j = 0; j < kPer; ++j) acc[j] = Op::apply(acc[j], Tr::load(y.e[j]));
    }
  }
  if constexpr (Op::kSum) {
    if (p.average) {
#pragma unroll
      for (int j = 0; j < kPer; ++j) acc[j] = divideAverage(acc[j], p);
    }
  }
  Pack r;
#pragma unroll
  for (int j = 0; j < kPer; ++j) r.e[j] = Tr::store(acc[j]);
  return r.word;
}

template <typename E, typename Op, int kMaxN>
__global__ void __launch_bounds__(kThreads) reduceKernel(const __grid_constant__ ReduceParams p) {
  using Tr = Elem<E>;
  using Raw = typename Tr::Raw;
  using Acc = typename Tr::Acc;
  constexpr int kUnroll = unrollFor<kMaxN>();
  const int n = p.n;
  const size_t threads = static_cast<size_t>(gridDim.x) * kThreads;
  const size_t tid = static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x;

  // Elements [vecBegin, vecEnd) go as whole 16-byte words, the others one by one.
  size_t vecBegin = 0;
  size_t vecEnd = 0;
  if (p.vectorized) {
    constexpr size_t kPer = 16 / sizeof(Raw);
    const size_t words = (p.count - p.head) / kPer;
    vecBegin = p.head;
    vecEnd = p.head + words * kPer;
    const uint4* in[kMaxN];
#pragma unroll
    for (int k = 0; k < kMaxN; ++k) {
      in[k] = k < n ? reinterpret_cast<const uint4*>(static_cast<const Raw*>(p.in[k]) + p.head)
                    : nullptr;
    }
    uint4* out = reinterpret_cast<uint4*>(static_cast<Raw*>(p.out) + p.head);
    for (size_t base = static_cast<size_t>(blockIdx.x) * (kThreads * kUnroll) + threadIdx.x;
         base < words; base += threads * kUnroll) {
      uint4 v[kUnroll][kMaxN];
      // Every load of the step before any store: out may be inputs[0] (each word is read and
      // then written by the same thread, so in-place is safe).
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const size_t i = base + static_cast<size_t>(u) * kThreads;
        if (i < words) {
          v[u][0] = in[0][i];
#pragma unroll
          for (int k = 1; k < kMaxN; ++k) {
            if (k < n) v[u][k] = in[k][i];
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const size_t i = base + static_cast<size_t>(u) * kThreads;
        if (i < words) out[i] = combineWord<E, Op, kMaxN>(v[u], n, p);
      }
    }
  }

  // Element at a time: the head before the first word and the tail after the last one (fewer
  // than 16 bytes each), or the whole call when the pointers are misaligned differently.
  Raw* out = static_cast<Raw*>(p.out);
  const size_t scalarCount = vecBegin + (p.count - vecEnd);
  for (size_t s = tid; s < scalarCount; s += threads) {
    const size_t i = s < vecBegin ? s : vecEnd + (s - vecBegin);
    Acc acc = Tr::load(static_cast<const Raw*>(p.in[0])[i]);
#pragma unroll
    for (int k = 1; k < kMaxN; ++k) {
      if (k < n) acc = Op::apply(acc, Tr::load(static_cast<const Raw*>(p.in[k])[i]));
    }
    if constexpr (Op::kSum) {
      if (p.average) acc = divideAverage(acc, p);
    }
    out[i] = Tr::store(acc);
  }
}

// ---- host side ---------------------------------------------------------------------------

template <typename E, typename Op, int kMaxN>
cudaError_t launch(const ReduceParams& p, cudaStream_t stream) noexcept {
  static detail::OccupancyCache cache;
  int limit = 0;
  const cudaError_t status =
      detail::residentBlocks(reduceKernel<E, Op, kMaxN>, kThreads, cache, &limit);
  if (status != cudaSuccess) return status;
  // Enough blocks for one step of every thread over the data, at most one resident wave.
  size_t perBlock = kThreads;  // elements (scalar) or words (vectorized) per block step
  size_t work = p.count;
  if (p.vectorized) {
    work = (p.count - p.head) / (16 / sizeof(typename Elem<E>::Raw));
    perBlock = static_cast<size_t>(kThreads) * unrollFor<kMaxN>();
  }
  size_t blocks = (work + perBlock - 1) / perBlock;
  if (blocks < 1) blocks = 1;  // a vectorized call shorter than one word: head and tail only
  if (blocks > static_cast<size_t>(limit)) blocks = static_cast<size_t>(limit);
  reduceKernel<E, Op, kMaxN><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

template <typename E, typename Op>
cudaError_t launchInputs(const ReduceParams& p, cudaStream_t stream) noexcept {
  return p.n <= 2 ? launch<E, Op, 2>(p, stream) : launch<E, Op, kMaxReduceInputs>(p, stream);
}

template <typename E>
cudaError_t launchOp(RedOp op, const ReduceParams& p, cudaStream_t stream) noexcept {
  switch (op) {
    case RedOp::Sum:
    case RedOp::Avg: return launchInputs<E, SumOp>(p, stream);
    case RedOp::Prod: return launchInputs<E, ProdOp>(p, stream);
    case RedOp::Max: return launchInputs<E, MaxOp>(p, stream);
    case RedOp::Min: return launchInputs<E, MinOp>(p, stream);
  }
  return cudaErrorInvalidValue;
}

// core::finishAverage's handling of divisors the integer type cannot hold.
template <typename T>
int intAvgMode(uint64_t divisor) noexcept {
  if constexpr (std::is_unsigned_v<T>) {
    return divisor > static_cast<uint64_t>(static_cast<T>(~T{0})) ? kAvgZero : kAvgDivide;
  } else {
    constexpr uint64_t kMinMagnitude = uint64_t{1} << (sizeof(T) * 8 - 1);
    if (divisor > kMinMagnitude) return kAvgZero;
    if (divisor == kMinMagnitude) return kAvgMinToMinusOne;
    return kAvgDivide;
  }
}

int intAvgModeFor(DataType type, uint64_t divisor) noexcept {
  switch (type) {
    case DataType::Int8: return intAvgMode<int8_t>(divisor);
    case DataType::Uint8: return intAvgMode<uint8_t>(divisor);
    case DataType::Int32: return intAvgMode<int32_t>(divisor);
    case DataType::Uint32: return intAvgMode<uint32_t>(divisor);
    case DataType::Int64: return intAvgMode<int64_t>(divisor);
    case DataType::Uint64: return intAvgMode<uint64_t>(divisor);
    default: return kAvgDivide;
  }
}

unsigned misalignment(const void* ptr) noexcept {
  return static_cast<unsigned>(reinterpret_cast<uintptr_t>(ptr) & 15u);
}

}  // namespace

cudaError_t reduce(void* out, const void* const* inputs, int n, size_t count, DataType type,
                   RedOp op, uint64_t avgDivisor, cudaStream_t stream) noexcept {
  if (n < 1 || n > kMaxReduceInputs) return cudaErrorInvalidValue;
  const size_t size = dataTypeSize(type);  // 0 for an invalid type
  if (size == 0) return cudaErrorInvalidValue;
  if (static_cast<unsigned>(op) >= static_cast<unsigned>(kNumRedOps)) {
    return cudaErrorInvalidValue;
  }
  if (count == 0) return cudaSuccess;
  if (out == nullptr || inputs == nullptr) return cudaErrorInvalidValue;

  ReduceParams p{};
  p.out = out;
  p.count = count;
  p.n = n;
  // Whole 16-byte words when every pointer is at the same address modulo 16, after a head
  // of elements up to the first boundary (none when all are aligned).
  const unsigned mis = misalignment(out);
  p.vectorized = mis % size == 0;
  for (int k = 0; k < n; ++k) {
    if (inputs[k] == nullptr) return cudaErrorInvalidValue;
    p.in[k] = inputs[k];
    p.vectorized = p.vectorized && misalignment(inputs[k]) == mis;
  }
  if (p.vectorized) {
    const size_t head = ((16u - mis) & 15u) / size;
    p.head = head < count ? head : count;
  }
  // As core::finishAverage: a divisor of 0 or 1 leaves the sum unchanged.
  p.average = op == RedOp::Avg && avgDivisor > 1;
  p.divisor = avgDivisor;
  p.divisorF = static_cast<float>(avgDivisor);
  p.divisorD = static_cast<double>(avgDivisor);
  p.intAvgMode = intAvgModeFor(type, avgDivisor);

  switch (type) {
    case DataType::Int8: return launchOp<int8_t>(op, p, stream);
    case DataType::Uint8: return launchOp<uint8_t>(op, p, stream);
    case DataType::Int32: return launchOp<int32_t>(op, p, stream);
    case DataType::Uint32: return launchOp<uint32_t>(op, p, stream);
    case DataType::Int64: return launchOp<int64_t>(op, p, stream);
    case DataType::Uint64: return launchOp<uint64_t>(op, p, stream);
    case DataType::Float16: return launchOp<Half>(op, p, stream);
    case DataType::Float32: return launchOp<float>(op, p, stream);
    case DataType::Float64: return launchOp<double>(op, p, stream);
    case DataType::BFloat16: return launchOp<BFloat16>(op, p, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sharc::kernels

// Element-wise host reduction kernels and the float16/bfloat16 <-> float32 conversions.
//
// Structure: one kernel template per (element traits, operator, aliasing pattern). The traits
// say how a kernel step loads, combines and stores its data: native types one element at a
// time; float16/bfloat16 two elements per 32-bit word, widened to float32 with the branch-free
// conversions of core/half.hpp. Everything is written so that GCC/Clang vectorise the loops at
// -O3 with the baseline ISA (SSE2 on x86-64, NEON on aarch64); no F16C or other ISA extension
// is required. On x86-64 CPUs with AVX2 and F16C, float16/bfloat16 go to the kernels of
// reduce_avx2.cc instead (chosen once, see reduce_dispatch.hpp), which give identical bits.
#include "core/reduce.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/half.hpp"
#include "core/reduce_dispatch.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif

namespace sharc::core {
namespace {

// ---- element traits ----------------------------------------------------------------------
//
// Elem: the in-memory element. Word: what one loop step loads and stores, holding kPerWord
// elements. combine<Op>(a, b): the reduced word.

template <typename T>
struct NativeTraits {
  using Elem = T;
  using Word = T;
  static constexpr size_t kPerWord = 1;
  static T loadWord(const T* p, size_t i) noexcept { return p[i]; }
  static void storeWord(T* p, size_t i, T w) noexcept { p[i] = w; }
  template <typename Op>
  static T combine(T a, T b) noexcept {
    return Op::apply(a, b);
  }
};

// float16/bfloat16 are processed as pairs in 32-bit words: each half of the word is widened to
// float32 in a 32-bit lane, reduced, narrowed and put back in its half. Element-at-a-time code
// vectorises too, but needs 16 <-> 32-bit lane unpacking/packing around the arithmetic, which
// SSE2 has no cheap instructions for (no packusdw); the paired form is several times faster.
// Each lane maps back to the memory position it came from, so byte order does not matter.
template <typename Codec>
struct Packed16Traits {
  using Elem = uint16_t;
  using Word = uint32_t;
  static constexpr size_t kPerWord = 2;
  // memcpy: a uint16_t buffer must not be read through a uint32_t lvalue (strict aliasing);
  // compilers turn these into plain (unaligned) vector loads and stores.
  [[gnu::always_inline]] static uint32_t loadWord(const uint16_t* p, size_t i) noexcept {
    uint32_t w;
    std::memcpy(&w, p + 2 * i, sizeof w);
    return w;
  }
  [[gnu::always_inline]] static void storeWord(uint16_t* p, size_t i, uint32_t w) noexcept {
    std::memcpy(p + 2 * i, &w, sizeof w);
  }
  template <typename Op>
  [[gnu::always_inline]] static uint32_t combine(uint32_t a, uint32_t b) noexcept {
    return Codec::narrowLo(apply<Op>(Codec::widenLo(a), Codec::widenLo(b))) |
           Codec::narrowHi(apply<Op>(Codec::widenHi(a), Codec::widenHi(b)));
  }
  // Sum/Prod with a NaN operand: x if x is NaN, else x op y (y's NaN, or the default NaN for
  // inf - inf, 0 * inf). Left to the hardware, NaN op NaN gives the first instruction
  // operand's NaN, but the compiler may swap the operands of a commutative operation (and did,
  // differently for the two halves of a word), so the payload would depend on code
  // generation. float16/bfloat16 results must be bit-identical to the AVX2 kernels
  // (reduce_avx2.cc, addFirst()), which pin the same rule. Max/Min already select x or y.
  template <typename Op>
  [[gnu::always_inline]] static float apply(float x, float y) noexcept {
    const float r = Op::apply(x, y);
    if constexpr (Op::kArithmetic) {
      return std::bit_cast<float>(
          select32(x != x, std::bit_cast<uint32_t>(x), std::bit_cast<uint32_t>(r)));
    } else {
      return r;
    }
  }
};

struct HalfCodec {
  [[gnu::always_inline]] static float widenLo(uint32_t w) noexcept {
    return halfBitsToFloat(w & 0xFFFFu);
  }
  [[gnu::always_inline]] static float widenHi(uint32_t w) noexcept {
    return halfBitsToFloat(w >> 16);
  }
  [[gnu::always_inline]] static uint32_t narrowLo(float f) noexcept { return floatToHalfBits(f); }
  [[gnu::always_inline]] static uint32_t narrowHi(float f) noexcept {
    return floatToHalfBits(f) << 16;
  }
};

// Widening skips bfloat16BitsToFloat()'s quieting of signalling NaNs: every operator either
// computes on a NaN (which yields a quiet NaN) or selects it, and narrowing quiets it then.
struct Bf16Codec {
  [[gnu::always_inline]] static float widenLo(uint32_t w) noexcept {
    return std::bit_cast<float>(w << 16);
  }
  [[gnu::always_inline]] static float widenHi(uint32_t w) noexcept {
    return std::bit_cast<float>(w & 0xFFFF0000u);
  }
  [[gnu::always_inline]] static uint32_t narrowLo(float f) noexcept {
    return floatToBfloat16High(f) >> 16;
  }
  [[gnu::always_inline]] static uint32_t narrowHi(float f) noexcept {
    return floatToBfloat16High(f);
  }
};

using HalfTraits = Packed16Traits<HalfCodec>;
using Bf16Traits = Packed16Traits<Bf16Codec>;

// ---- operators ---------------------------------------------------------------------------

// Integer arithmetic in the unsigned type wraps modulo 2^bits instead of overflowing (UB).
// Types narrower than unsigned int are widened to unsigned int first: uint8 * uint8 would
// otherwise promote to (signed) int, which is fine for 8 bits but keeps the rule uniform.
template <typename T>
using WrapType =
    std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

struct SumOp {
  static constexpr bool kArithmetic = true;  // computes a new value
  template <typename T>
  static T apply(T a, T b) noexcept {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<WrapType<T>>(a) + static_cast<WrapType<T>>(b));
    } else {
      return a + b;
    }
  }
};

struct ProdOp {
  static constexpr bool kArithmetic = true;  // computes a new value
  template <typename T>
  static T apply(T a, T b) noexcept {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<WrapType<T>>(a) * static_cast<WrapType<T>>(b));
    } else {
      return a * b;
    }
  }
};

// Floating Max/Min propagate NaN: if either input is NaN the result is NaN (the first NaN
// operand; float16/bfloat16 results are quiet NaNs), like IEEE 754-2019 maximum/minimum and
// unlike fmaxf/fminf, which return the other operand: a reduction must not hide a NaN that one
// rank produced. -0.0 and +0.0 compare equal, so max(-0.0, +0.0) may return either.
struct MaxOp {
  static constexpr bool kArithmetic = false;  // selects an operand
  template <typename T>
  static T apply(T a, T b) noexcept {
    if constexpr (std::is_integral_v<T>) {
      return a > b ? a : b;
    } else {
      return (a > b || a != a) ? a : b;  // b is returned when b is NaN (a > NaN is false)
    }
  }
};

struct MinOp {
  static constexpr bool kArithmetic = false;  // selects an operand
  template <typename T>
  static T apply(T a, T b) noexcept {
    if constexpr (std::is_integral_v<T>) {
      return a < b ? a : b;
    } else {
      return (a < b || a != a) ? a : b;
    }
  }
};

// ---- kernels -----------------------------------------------------------------------------
//
// __restrict tells the compiler the stores to dst cannot change the inputs, so it vectorises
// without runtime overlap checks. Exact aliasing (dst == a and/or dst == b) is allowed by the
// API, so those cases get their own kernels in which only distinct pointers are restricted.
// The kernels are kept out of line so each shows up as its own symbol in profiles.

template <typename Tr>
using Elem = typename Tr::Elem;

// The element left over after the last whole word (float16/bfloat16 with an odd count): the
// low half of a word built from one element is that element's result.
template <typename Tr, typename Op>
void tail(Elem<Tr>* dst, const Elem<Tr>* a, const Elem<Tr>* b, size_t n) noexcept {
  static_assert(Tr::kPerWord <= 2);
  if constexpr (Tr::kPerWord == 2) {
    if (n % 2 != 0) {
      const size_t i = n - 1;
      dst[i] = static_cast<Elem<Tr>>(Tr::template combine<Op>(a[i], b[i]));
    }
  }
}

template <typename Tr, typename Op>
[[gnu::noinline]] void kernelDistinct(Elem<Tr>* __restrict dst, const Elem<Tr>* __restrict a,
                                      const Elem<Tr>* __restrict b, size_t n) noexcept {
  const size_t words = n / Tr::kPerWord;
  for (size_t i = 0; i < words; ++i) {
    Tr::storeWord(dst, i, Tr::template combine<Op>(Tr::loadWord(a, i), Tr::loadWord(b, i)));
  }
  tail<Tr, Op>(dst, a, b, n);
}

// dst == a (kSwap = false: dst = dst op other) or dst == b (kSwap = true: dst = other op dst).
// Operand order is kept because it decides which NaN payload Max/Min return, so an in-place
// reduction matches an out-of-place one bitwise. (For float32/float64 Sum/Prod of two NaNs
// the payload is whatever the hardware returns for the operand order the compiler picked;
// float16/bfloat16 pin it, see Packed16Traits::apply().)
template <typename Tr, typename Op, bool kSwap>
[[gnu::noinline]] void kernelInPlace(Elem<Tr>* __restrict dst, const Elem<Tr>* __restrict other,
                                     size_t n) noexcept {
  const size_t words = n / Tr::kPerWord;
  for (size_t i = 0; i < words; ++i) {
    const auto d = Tr::loadWord(dst, i);
    const auto o = Tr::loadWord(other, i);
    Tr::storeWord(dst, i, kSwap ? Tr::template combine<Op>(o, d) : Tr::template combine<Op>(d, o));
  }
  if constexpr (kSwap) {
    tail<Tr, Op>(dst, other, dst, n);
  } else {
    tail<Tr, Op>(dst, dst, other, n);
  }
}

// dst == a == b.
template <typename Tr, typename Op>
[[gnu::noinline]] void kernelSelf(Elem<Tr>* __restrict dst, size_t n) noexcept {
  const size_t words = n / Tr::kPerWord;
  for (size_t i = 0; i < words; ++i) {
    const auto d = Tr::loadWord(dst, i);
    Tr::storeWord(dst, i, Tr::template combine<Op>(d, d));
  }
  tail<Tr, Op>(dst, dst, dst, n);
}

template <typename Tr, typename Op>
void runOp(void* dst, const void* a, const void* b, size_t n) noexcept {
  auto* d = static_cast<Elem<Tr>*>(dst);
  const auto* pa = static_cast<const Elem<Tr>*>(a);
  const auto* pb = static_cast<const Elem<Tr>*>(b);
  if (d == pa && d == pb) {
    kernelSelf<Tr, Op>(d, n);
  } else if (d == pa) {
    kernelInPlace<Tr, Op, false>(d, pb, n);
  } else if (d == pb) {
    kernelInPlace<Tr, Op, true>(d, pa, n);
  } else {
    // a == b (with dst distinct) is fine here: restrict only constrains objects that are
    // modified, and neither input is.
    kernelDistinct<Tr, Op>(d, pa, pb, n);
  }
}

template <typename Tr>
void runType(void* dst, const void* a, const void* b, size_t n, RedOp op) noexcept {
  switch (op) {
    case RedOp::Sum:
    case RedOp::Avg: runOp<Tr, SumOp>(dst, a, b, n); return;
    case RedOp::Prod: runOp<Tr, ProdOp>(dst, a, b, n); return;
    case RedOp::Max: runOp<Tr, MaxOp>(dst, a, b, n); return;
    case RedOp::Min: runOp<Tr, MinOp>(dst, a, b, n); return;
  }
  // Invalid op: callers validate, nothing to do.
}

// ---- finishAverage -----------------------------------------------------------------------

// Floating types: true division. float16/bfloat16 divide in float32 and round once more;
// float32 carries more than 2p+2 bits of either type, so this double rounding still gives the
// correctly rounded quotient (for bfloat16 quotients below 2^-126, where float32 itself is
// subnormal, as long as the divisor is below 2^16: far more ranks than anyone runs).
template <typename T>
void divideNative(void* data, size_t n, uint64_t divisor) noexcept {
  auto* __restrict p = static_cast<T*>(data);
  const T d = static_cast<T>(divisor);
  for (size_t i = 0; i < n; ++i) p[i] = p[i] / d;
}

template <typename Codec>
void divide16(void* data, size_t n, uint64_t divisor) noexcept {
  auto* __restrict p = static_cast<uint16_t*>(data);
  const float d = static_cast<float>(divisor);
  for (size_t i = 0; i < n; ++i) {
    p[i] = static_cast<uint16_t>(Codec::narrowLo(Codec::widenLo(p[i]) / d));
  }
}

// Integer types: truncating division, as C++ '/'. The divisor is converted carefully: mixing a
// signed element with a uint64_t divisor would otherwise divide in unsigned arithmetic.
template <typename T>
void divideIntegral(void* data, size_t n, uint64_t divisor) noexcept {
  auto* __restrict p = static_cast<T*>(data);
  if constexpr (std::is_unsigned_v<T>) {
    if (divisor > std::numeric_limits<T>::max()) {
      std::fill(p, p + n, T{0});
      return;
    }
    const T d = static_cast<T>(divisor);
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / d);
  } else {
    // |x| <= 2^(bits-1): a divisor of exactly 2^(bits-1) maps the minimum to -1 and everything
    // else to 0; a larger one maps everything to 0. Otherwise the divisor fits in T.
    constexpr uint64_t kMinMagnitude = uint64_t{1} << (sizeof(T) * 8 - 1);
    if (divisor >= kMinMagnitude) {
      const bool half = divisor == kMinMagnitude;
      for (size_t i = 0; i < n; ++i) {
        p[i] = (half && p[i] == std::numeric_limits<T>::min()) ? T{-1} : T{0};
      }
      return;
    }
    const T d = static_cast<T>(divisor);
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / d);
  }
}

void reduceBaseline(void* dst, const void* a, const void* b, size_t count, DataType type,
                    RedOp op) {
  switch (type) {
    case DataType::Int8: runType<NativeTraits<int8_t>>(dst, a, b, count, op); return;
    case DataType::Uint8: runType<NativeTraits<uint8_t>>(dst, a, b, count, op); return;
    case DataType::Int32: runType<NativeTraits<int32_t>>(dst, a, b, count, op); return;
    case DataType::Uint32: runType<NativeTraits<uint32_t>>(dst, a, b, count, op); return;
    case DataType::Int64: runType<NativeTraits<int64_t>>(dst, a, b, count, op); return;
    case DataType::Uint64: runType<NativeTraits<uint64_t>>(dst, a, b, count, op); return;
    case DataType::Float16: runType<HalfTraits>(dst, a, b, count, op); return;
    case DataType::Float32: runType<NativeTraits<float>>(dst, a, b, count, op); return;
    case DataType::Float64: runType<NativeTraits<double>>(dst, a, b, count, op); return;
    case DataType::BFloat16: runType<Bf16Traits>(dst, a, b, count, op); return;
  }
  // Invalid type: callers validate, nothing to do.
}

void finishAverageBaseline(void* data, size_t count, DataType type, uint64_t divisor) {
  switch (type) {
    case DataType::Int8: divideIntegral<int8_t>(data, count, divisor); return;
    case DataType::Uint8: divideIntegral<uint8_t>(data, count, divisor); return;
    case DataType::Int32: divideIntegral<int32_t>(data, count, divisor); return;
    case DataType::Uint32: divideIntegral<uint32_t>(data, count, divisor); return;
    case DataType::Int64: divideIntegral<int64_t>(data, count, divisor); return;
    case DataType::Uint64: divideIntegral<uint64_t>(data, count, divisor); return;
    case DataType::Float16: divide16<HalfCodec>(data, count, divisor); return;
    case DataType::Float32: divideNative<float>(data, count, divisor); return;
    case DataType::Float64: divideNative<double>(data, count, divisor); return;
    case DataType::BFloat16: divide16<Bf16Codec>(data, count, divisor); return;
  }
}

// ---- instruction-set dispatch --------------------------------------------------------------

bool is16Bit(DataType type) noexcept {
  return type == DataType::Float16 || type == DataType::BFloat16;
}

bool cpuHasAvx2F16c() noexcept {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  // Harmless if already done; needed only if we run before libgcc's constructor. The "avx2"
  // feature is reported only when the OS saves the YMM registers (XGETBV), not just CPUID.
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2")) return false;
  // F16C from CPUID directly: clang 14's __builtin_cpu_supports does not know "f16c".
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
#else
  return false;
#endif
}

bool useAvx2(ReduceIsa isa, DataType type) noexcept {
  return isa == ReduceIsa::Avx2 && is16Bit(type) && isaAvailable(ReduceIsa::Avx2);
}

}  // namespace

bool isaAvailable(ReduceIsa isa) noexcept {
  switch (isa) {
    case ReduceIsa::Baseline: return true;
    case ReduceIsa::Avx2: {
      static const bool available = avx2::compiled() && cpuHasAvx2F16c();
      return available;
    }
  }
  return false;
}

ReduceIsa selectedIsa() noexcept {
  // Decided once, from the CPU only (no environment variable): tests use reduceWith().
  static const ReduceIsa isa =
      isaAvailable(ReduceIsa::Avx2) ? ReduceIsa::Avx2 : ReduceIsa::Baseline;
  return isa;
}

void reduceWith(ReduceIsa isa, void* dst, const void* a, const void* b, size_t count, DataType type,
                RedOp op) {
  if (count == 0) return;
  if (useAvx2(isa, type)) {
    avx2::reduce16(dst, a, b, count, type, op);
  } else {
    reduceBaseline(dst, a, b, count, type, op);
  }
}

void finishAverageWith(ReduceIsa isa, void* data, size_t count, DataType type, uint64_t divisor) {
  // Division by 1 is the identity; by 0 is undefined (callers pass the rank count >= 1).
  if (count == 0 || divisor <= 1) return;
  if (useAvx2(isa, type)) {
    avx2::divide16(data, count, type, divisor);
  } else {
    finishAverageBaseline(data, count, type, divisor);
  }
}

void reduce(void* dst, const void* a, const void* b, size_t count, DataType type, RedOp op) {
  reduceWith(selectedIsa(), dst, a, b, count, type, op);
}

void finishAverage(void* data, size_t count, DataType type, uint64_t divisor) {
  finishAverageWith(selectedIsa(), data, count, type, divisor);
}

float halfToFloat(uint16_t h) noexcept {
  return halfBitsToFloat(h);
}
uint16_t floatToHalf(float f) noexcept {
  return static_cast<uint16_t>(floatToHalfBits(f));
}
float bfloat16ToFloat(uint16_t b) noexcept {
  return bfloat16BitsToFloat(b);
}
uint16_t floatToBfloat16(float f) noexcept {
  return static_cast<uint16_t>(floatToBfloat16High(f) >> 16);
}

}  // namespace sharc::core

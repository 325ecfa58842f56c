// Element-wise host reduction kernels and the float16/bfloat16 <-> float32 conversions.
//
// Structure: one kernel template per (element traits, operator, aliasing pattern). The traits
// widen an element to the type the operator computes in (float32 for float16/bfloat16,
// the unsigned type for integer Sum/Prod) and narrow it back. All conversions are branchless
// selects on integer bit patterns so that GCC/Clang vectorise the whole loop at -O3 with the
// baseline ISA (SSE2 on x86-64, NEON on aarch64); no F16C or other ISA extension is required.
#include "core/reduce.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace sharc::core {
namespace {

// ---- float16 / bfloat16 conversions ------------------------------------------------------
//
// These are always_inline so the loops below see straight-line code they can vectorise.
//
// Every select goes through select32() (and/andnot/or on a mask) rather than '?:'. With GCC's
// default -ftrapping-math, a '?:' lets the optimiser sink the float operation feeding one arm
// into a branch, and it then refuses to if-convert (a float op may trap), so the whole loop
// stays scalar. A mask select keeps every float op unconditional, as written.

[[gnu::always_inline]] inline uint32_t select32(bool cond, uint32_t if_true,
                                                uint32_t if_false) noexcept {
  const uint32_t mask = 0u - static_cast<uint32_t>(cond);
  return (if_true & mask) | (if_false & ~mask);
}

[[gnu::always_inline]] inline float halfToFloatImpl(uint16_t h) noexcept {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7FFFu;  // exponent and mantissa
  // Normal numbers: rebias the exponent (15 -> 127) and widen the mantissa (10 -> 23 bits).
  uint32_t bits = (em << 13) + ((127u - 15u) << 23);
  // Inf/NaN (exponent 31): the rebias above lands on exponent 143; push it to 255.
  bits = select32(em >= 0x7C00u, bits + ((128u - 16u) << 23), bits);
  // NaN: force the quiet bit, keep sign and payload.
  bits = select32(em > 0x7C00u, bits | 0x00400000u, bits);
  // Zero and subnormals (exponent 0): the value is em * 2^-24, which is a normal float (or
  // zero). int -> float and the power-of-two scale are both exact, and the result is never a
  // float subnormal, so flush-to-zero modes cannot affect it.
  const uint32_t sub = std::bit_cast<uint32_t>(static_cast<float>(static_cast<int32_t>(em)) *
                                               0x1p-24f);
  bits = select32(em < 0x0400u, sub, bits);
  return std::bit_cast<float>(bits | sign);
}

[[gnu::always_inline]] inline uint16_t floatToHalfImpl(float f) noexcept {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7FFFFFFFu;
  // Normal half results (|f| >= 2^-14): rebias the exponent, then round to nearest-even with
  // the classic "add 0x0FFF plus the lowest kept bit" trick; a carry out of the mantissa bumps
  // the exponent, which also turns values >= 65520 into 0x7C00 (inf) exactly as IEEE wants.
  const uint32_t odd = (ax >> 13) & 1u;
  const uint32_t normal = (ax - ((127u - 15u) << 23) + 0x0FFFu + odd) >> 13;
  // Zero and subnormal half results (|f| < 2^-14): adding 0.5f aligns the value so that the
  // half's subnormal ulp (2^-24) is the float's ulp; the FPU's own round-to-nearest-even does
  // the rounding (this assumes the default rounding mode). The sum is >= 0.5, so no float
  // subnormal is produced; flush-to-zero/denormals-are-zero only affect inputs that round to
  // zero anyway.
  const float magic = 0.5f;
  const uint32_t sub = std::bit_cast<uint32_t>(std::bit_cast<float>(ax) + magic) -
                       std::bit_cast<uint32_t>(magic);
  // Inputs >= 65536 (including inf): overflow to inf. NaN: quiet NaN with the top payload bits.
  const uint32_t nan = 0x7E00u | ((ax >> 13) & 0x03FFu);
  uint32_t r = select32(ax < 0x38800000u, sub, normal);
  r = select32(ax >= 0x47800000u, 0x7C00u, r);
  r = select32(ax > 0x7F800000u, nan, r);
  return static_cast<uint16_t>(r | sign);
}

[[gnu::always_inline]] inline float bfloat16ToFloatImpl(uint16_t b) noexcept {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  // bfloat16 is the top half of a float32; only a signalling NaN needs its quiet bit set.
  bits = select32((b & 0x7FFFu) > 0x7F80u, bits | 0x00400000u, bits);
  return std::bit_cast<float>(bits);
}

[[gnu::always_inline]] inline uint16_t floatToBfloat16Impl(float f) noexcept {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  // Round to nearest-even on the dropped 16 bits; the carry propagates into the exponent, so
  // the largest finite values round to inf and subnormals need no special case. NaN is
  // excluded (it could carry into the sign) and truncated with the quiet bit set instead.
  const uint32_t rounded = (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16;
  const uint32_t nan = (x >> 16) | 0x0040u;
  return static_cast<uint16_t>(select32((x & 0x7FFFFFFFu) > 0x7F800000u, nan, rounded));
}

// ---- element traits ----------------------------------------------------------------------
//
// Storage: the in-memory element. Compute: what the operator sees. load/store convert.

template <typename T>
struct NativeTraits {
  using Storage = T;
  using Compute = T;
  static T load(T v) noexcept { return v; }
  static T store(T v) noexcept { return v; }
};

struct HalfTraits {
  using Storage = uint16_t;
  using Compute = float;
  [[gnu::always_inline]] static float load(uint16_t v) noexcept { return halfToFloatImpl(v); }
  [[gnu::always_inline]] static uint16_t store(float v) noexcept { return floatToHalfImpl(v); }
};

struct Bf16Traits {
  using Storage = uint16_t;
  using Compute = float;
  [[gnu::always_inline]] static float load(uint16_t v) noexcept { return bfloat16ToFloatImpl(v); }
  [[gnu::always_inline]] static uint16_t store(float v) noexcept {
    return floatToBfloat16Impl(v);
  }
};

// ---- operators ---------------------------------------------------------------------------

// Integer arithmetic in the unsigned type wraps modulo 2^bits instead of overflowing (UB).
// Types narrower than unsigned int are widened to unsigned int first: uint8 * uint8 would
// otherwise promote to (signed) int, which is fine for 8 bits but keeps the rule uniform.
template <typename T>
using WrapType =
    std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

struct SumOp {
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
// operand; float16/bfloat16 results are quiet NaNs). This is the IEEE 754-2019
// maximum/minimum behaviour and what MPI_MAX on NaN data usually gives, not fmaxf/fminf
// (which drop a NaN): a reduction should not silently hide a NaN on one rank. -0.0 and +0.0
// compare equal, so either may be returned for max(-0.0, +0.0).
struct MaxOp {
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
using Elem = typename Tr::Storage;

template <typename Tr, typename Op>
[[gnu::noinline]] void kernelDistinct(Elem<Tr>* __restrict dst, const Elem<Tr>* __restrict a,
                                      const Elem<Tr>* __restrict b, size_t n) noexcept {
  for (size_t i = 0; i < n; ++i) dst[i] = Tr::store(Op::apply(Tr::load(a[i]), Tr::load(b[i])));
}

// dst == a (kSwap = false: dst = dst op b) or dst == b (kSwap = true: dst = other op dst).
// Operand order is kept because it decides which NaN payload Max/Min return, so an in-place
// reduction matches an out-of-place one bitwise. (For Sum/Prod of two NaNs the payload is
// whatever the hardware returns for the operand order the compiler picked.)
template <typename Tr, typename Op, bool kSwap>
[[gnu::noinline]] void kernelInPlace(Elem<Tr>* __restrict dst, const Elem<Tr>* __restrict other,
                                     size_t n) noexcept {
  for (size_t i = 0; i < n; ++i) {
    const auto d = Tr::load(dst[i]);
    const auto o = Tr::load(other[i]);
    dst[i] = Tr::store(kSwap ? Op::apply(o, d) : Op::apply(d, o));
  }
}

// dst == a == b.
template <typename Tr, typename Op>
[[gnu::noinline]] void kernelSelf(Elem<Tr>* __restrict dst, size_t n) noexcept {
  for (size_t i = 0; i < n; ++i) {
    const auto d = Tr::load(dst[i]);
    dst[i] = Tr::store(Op::apply(d, d));
  }
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

// Floating types: true division in the compute type. For float16/bfloat16 the quotient is
// computed in float32 and rounded once more; float32 carries more than 2p+2 bits of either
// type, so this double rounding still gives the correctly rounded quotient.
template <typename Tr>
void divideFloating(void* data, size_t n, uint64_t divisor) noexcept {
  using S = typename Tr::Storage;
  using C = typename Tr::Compute;
  auto* __restrict p = static_cast<S*>(data);
  const C d = static_cast<C>(divisor);
  for (size_t i = 0; i < n; ++i) p[i] = Tr::store(Tr::load(p[i]) / d);
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

}  // namespace

void reduce(void* dst, const void* a, const void* b, size_t count, DataType type, RedOp op) {
  if (count == 0) return;
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

void finishAverage(void* data, size_t count, DataType type, uint64_t divisor) {
  // Division by 1 is the identity; by 0 is undefined (callers pass the rank count >= 1).
  if (count == 0 || divisor <= 1) return;
  switch (type) {
    case DataType::Int8: divideIntegral<int8_t>(data, count, divisor); return;
    case DataType::Uint8: divideIntegral<uint8_t>(data, count, divisor); return;
    case DataType::Int32: divideIntegral<int32_t>(data, count, divisor); return;
    case DataType::Uint32: divideIntegral<uint32_t>(data, count, divisor); return;
    case DataType::Int64: divideIntegral<int64_t>(data, count, divisor); return;
    case DataType::Uint64: divideIntegral<uint64_t>(data, count, divisor); return;
    case DataType::Float16: divideFloating<HalfTraits>(data, count, divisor); return;
    case DataType::Float32: divideFloating<NativeTraits<float>>(data, count, divisor); return;
    case DataType::Float64: divideFloating<NativeTraits<double>>(data, count, divisor); return;
    case DataType::BFloat16: divideFloating<Bf16Traits>(data, count, divisor); return;
  }
}

float halfToFloat(uint16_t h) noexcept { return halfToFloatImpl(h); }
uint16_t floatToHalf(float f) noexcept { return floatToHalfImpl(f); }
float bfloat16ToFloat(uint16_t b) noexcept { return bfloat16ToFloatImpl(b); }
uint16_t floatToBfloat16(float f) noexcept { return floatToBfloat16Impl(f); }

}  // namespace sharc::core

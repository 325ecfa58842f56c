// AVX2 + F16C reduction kernels for float16 and bfloat16 (see core/reduce_dispatch.hpp).
//
// Compiled with -mavx2 -mf16c on x86-64 (src/core/CMakeLists.txt); everywhere else, or if the
// flags are missing, the file only defines compiled() == false and the dispatcher never calls
// the kernels. Only reduce.cc calls in here, and only after checking the CPU: nothing in this
// file may run, or be inlined into code that runs, on a CPU without AVX2/F16C.
//
// The results must be bit-identical to the baseline kernels in reduce.cc (half.hpp
// conversions), NaN payloads included, so that they never depend on which CPU ran them:
//  - float16 widening (vcvtph2ps) is exact, like halfBitsToFloat(); a signalling NaN may or
//    may not be quieted here, but narrowing quiets every NaN anyway.
//  - float16 narrowing (vcvtps2ph, immediate round-to-nearest-even, so MXCSR.RC is ignored)
//    rounds like floatToHalfBits() and turns a NaN into sign | 0x7E00 | top 9 payload bits,
//    as floatToHalfBits() does. The float inputs to it are never float32 subnormals (sums and
//    products of float16 values are multiples of 2^-48; quotients by a uint64_t divisor are
//    at least 2^-88 in magnitude), so MXCSR.DAZ cannot matter either.
//  - bfloat16 uses the same integer bit arithmetic as Bf16Codec/floatToBfloat16High().
//  - the float operations are the same IEEE operations (vaddps = addss etc., same MXCSR);
//    there is no multiply-add to contract (and the file is not built with -mfma).
//  - Sum/Prod NaN operands: the result is a if a is NaN, else a op b (see addFirst()), exactly
//    as Packed16Traits::apply() in reduce.cc. Max/Min select as MaxOp/MinOp do.
#include "core/reduce_dispatch.hpp"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__F16C__)

#include <immintrin.h>

#include <cstring>

namespace sharc::core::avx2 {
namespace {

// ---- operators on 8 float32 lanes ------------------------------------------------------------

[[gnu::always_inline]] inline __m256 isNan(__m256 x) noexcept {
  return _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
}

// Sum/Prod must give x (quieted) if x is NaN, else x op y. That is exactly what VADDPS/VMULPS
// do with x as the first source operand (Intel SDM vol. 1, 4.8.3.5: with two NaN operands the
// first source's is returned), but the compiler may swap the operands of a commutative
// intrinsic, so the instructions are written out: this pins the order at no cost, where an
// explicit compare-and-blend would add three uops per vector.
[[gnu::always_inline]] inline __m256 addFirst(__m256 x, __m256 y) noexcept {
  __m256 r;
  asm("vaddps %2, %1, %0" : "=x"(r) : "x"(x), "x"(y));  // AT&T: r = x + y, x is SRC1
  return r;
}
[[gnu::always_inline]] inline __m256 mulFirst(__m256 x, __m256 y) noexcept {
  __m256 r;
  asm("vmulps %2, %1, %0" : "=x"(r) : "x"(x), "x"(y));
  return r;
}

// kSelects: the result may be an input operand as is, so a NaN result may be signalling.
struct SumOp {
  static constexpr bool kSelects = false;
  static __m256 apply(__m256 x, __m256 y) noexcept { return addFirst(x, y); }
};
struct ProdOp {
  static constexpr bool kSelects = false;
  static __m256 apply(__m256 x, __m256 y) noexcept { return mulFirst(x, y); }
};
// (x > y || x is NaN) ? x : y, as MaxOp in reduce.cc: y when y is NaN or when x == y
// (-0.0 vs +0.0). Not vmaxps, which returns the second operand for any NaN.
struct MaxOp {
  static constexpr bool kSelects = true;
  static __m256 apply(__m256 x, __m256 y) noexcept {
    return _mm256_blendv_ps(y, x, _mm256_or_ps(_mm256_cmp_ps(x, y, _CMP_GT_OQ), isNan(x)));
  }
};
struct MinOp {
  static constexpr bool kSelects = true;
  static __m256 apply(__m256 x, __m256 y) noexcept {
    return _mm256_blendv_ps(y, x, _mm256_or_ps(_mm256_cmp_ps(x, y, _CMP_LT_OQ), isNan(x)));
  }
};
// finishAverage: x / divisor (never NaN, so no payload question).
struct DivOp {
  static constexpr bool kSelects = false;
  static __m256 apply(__m256 x, __m256 d) noexcept { return _mm256_div_ps(x, d); }
};

// ---- codecs: one block of kBlock 16-bit elements <-> float32 lanes ---------------------------
//
// block<Op>(dst, a, b) loads both inputs completely before storing, so dst may alias a or b
// exactly. unary<Op>(p, y) does p = p op y with y broadcast.

struct HalfCodec {
  static constexpr size_t kBlock = 8;
  [[gnu::always_inline]] static __m256 load(const uint16_t* p) noexcept {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  [[gnu::always_inline]] static void store(uint16_t* p, __m256 v) noexcept {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  template <typename Op>
  [[gnu::always_inline]] static void block(uint16_t* dst, const uint16_t* a,
                                           const uint16_t* b) noexcept {
    const __m256 x = load(a);
    const __m256 y = load(b);
    store(dst, Op::apply(x, y));
  }
  template <typename Op>
  [[gnu::always_inline]] static void unary(uint16_t* p, __m256 y) noexcept {
    store(p, Op::apply(load(p), y));
  }
};

// bfloat16 is the top half of a float32. A 256-bit load holds 16 elements: shifting each
// 32-bit lane left by 16 widens the even (low) elements, masking off the low half widens the
// odd ones; narrowing leaves each result in the high half of its lane, and one 16-bit blend
// puts the pairs back together (the paired scheme of Packed16Traits in reduce.cc).
struct Bf16Codec {
  static constexpr size_t kBlock = 16;
  [[gnu::always_inline]] static __m256i loadRaw(const uint16_t* p) noexcept {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  [[gnu::always_inline]] static __m256 widenLo(__m256i w) noexcept {
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  [[gnu::always_inline]] static __m256 widenHi(__m256i w) noexcept {
    return _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32(int(0xFFFF0000u))));
  }
  // floatToBfloat16High() on 8 lanes for the results of Op, low 16 bits left as garbage. In
  // general: round to nearest-even by adding 0x7FFF plus the lowest kept bit, except that a
  // NaN instead gets its quiet bit set (rounding could carry through its exponent).
  //
  // Two shortcuts give the same bits for less work, depending on the operator:
  //  - Sum/Prod/Div (kSelects false) skip the NaN case, which then changes nothing: every
  //    NaN they produce is already quiet (the arithmetic quiets it) and has its low 16 bits
  //    zero (a widened bfloat16 operand's NaN, or the default NaN 0xFFC00000), so the
  //    rounding increment (at most 0x8000) cannot carry into the kept bits.
  //  - Max/Min (kSelects true) return an operand unchanged, a widened bfloat16 with its low
  //    16 bits zero, which rounding leaves alone; only a signalling NaN needs its quiet bit.
  template <bool kSelects>
  [[gnu::always_inline]] static __m256i narrowHigh(__m256 f) noexcept {
    const __m256i x = _mm256_castps_si256(f);
    if constexpr (kSelects) {
      const __m256i quiet_bit = _mm256_set1_epi32(0x00400000);
      return _mm256_or_si256(x, _mm256_and_si256(_mm256_castps_si256(isNan(f)), quiet_bit));
    } else {
      const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
      return _mm256_add_epi32(x, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF)));
    }
  }
  template <typename Op>
  [[gnu::always_inline]] static void storePair(uint16_t* p, __m256 lo, __m256 hi) noexcept {
    // Even 16-bit words from lo's high halves (shifted down), odd words from hi's high halves.
    constexpr bool kSel = Op::kSelects;
    const __m256i w =
        _mm256_blend_epi16(_mm256_srli_epi32(narrowHigh<kSel>(lo), 16), narrowHigh<kSel>(hi), 0xAA);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), w);
  }
  template <typename Op>
  [[gnu::always_inline]] static void block(uint16_t* dst, const uint16_t* a,
                                           const uint16_t* b) noexcept {
    const __m256i x = loadRaw(a);
    const __m256i y = loadRaw(b);
    storePair<Op>(dst, Op::apply(widenLo(x), widenLo(y)), Op::apply(widenHi(x), widenHi(y)));
  }
  template <typename Op>
  [[gnu::always_inline]] static void unary(uint16_t* p, __m256 y) noexcept {
    const __m256i x = loadRaw(p);
    storePair<Op>(p, Op::apply(widenLo(x), y), Op::apply(widenHi(x), y));
  }
};

// ---- kernels ---------------------------------------------------------------------------------
//
// Two blocks per iteration, then one, then the remainder (< one block) through a zero-padded
// stack copy, so that every element goes through the same instructions whatever the count.

template <typename Codec, typename Op>
[[gnu::noinline]] void kernel(uint16_t* dst, const uint16_t* a, const uint16_t* b,
                              size_t n) noexcept {
  constexpr size_t kB = Codec::kBlock;
  size_t i = 0;
  for (; i + 2 * kB <= n; i += 2 * kB) {
    Codec::template block<Op>(dst + i, a + i, b + i);
    Codec::template block<Op>(dst + i + kB, a + i + kB, b + i + kB);
  }
  if (i + kB <= n) {
    Codec::template block<Op>(dst + i, a + i, b + i);
    i += kB;
  }
  if (i < n) {
    const size_t rest = n - i;
    uint16_t ta[kB] = {}, tb[kB] = {}, td[kB];
    std::memcpy(ta, a + i, rest * sizeof(uint16_t));
    std::memcpy(tb, b + i, rest * sizeof(uint16_t));
    Codec::template block<Op>(td, ta, tb);
    std::memcpy(dst + i, td, rest * sizeof(uint16_t));
  }
}

template <typename Codec>
[[gnu::noinline]] void divideKernel(uint16_t* p, size_t n, float divisor) noexcept {
  constexpr size_t kB = Codec::kBlock;
  const __m256 d = _mm256_set1_ps(divisor);
  size_t i = 0;
  for (; i + kB <= n; i += kB) Codec::template unary<DivOp>(p + i, d);
  if (i < n) {
    const size_t rest = n - i;
    uint16_t t[kB] = {};
    std::memcpy(t, p + i, rest * sizeof(uint16_t));
    Codec::template unary<DivOp>(t, d);
    std::memcpy(p + i, t, rest * sizeof(uint16_t));
  }
}

template <typename Codec>
void runType(void* dst, const void* a, const void* b, size_t n, RedOp op) noexcept {
  auto* d = static_cast<uint16_t*>(dst);
  const auto* pa = static_cast<const uint16_t*>(a);
  const auto* pb = static_cast<const uint16_t*>(b);
  switch (op) {
    case RedOp::Sum:
    case RedOp::Avg: kernel<Codec, SumOp>(d, pa, pb, n); return;
    case RedOp::Prod: kernel<Codec, ProdOp>(d, pa, pb, n); return;
    case RedOp::Max: kernel<Codec, MaxOp>(d, pa, pb, n); return;
    case RedOp::Min: kernel<Codec, MinOp>(d, pa, pb, n); return;
  }
}

}  // namespace

bool compiled() noexcept {
  return true;
}

void reduce16(void* dst, const void* a, const void* b, size_t count, DataType type, RedOp op) {
  if (type == DataType::Float16) {
    runType<HalfCodec>(dst, a, b, count, op);
  } else if (type == DataType::BFloat16) {
    runType<Bf16Codec>(dst, a, b, count, op);
  }
}

void divide16(void* data, size_t count, DataType type, uint64_t divisor) {
  // The same conversion as divide16() in reduce.cc: uint64_t -> float, round to nearest.
  const float d = static_cast<float>(divisor);
  auto* p = static_cast<uint16_t*>(data);
  if (type == DataType::Float16) {
    divideKernel<HalfCodec>(p, count, d);
  } else if (type == DataType::BFloat16) {
    divideKernel<Bf16Codec>(p, count, d);
  }
}

}  // namespace sharc::core::avx2

#else  // not x86-64 with AVX2 + F16C enabled: no kernels

namespace sharc::core::avx2 {

bool compiled() noexcept {
  return false;
}
void reduce16(void*, const void*, const void*, size_t, DataType, RedOp) {}
void divide16(void*, size_t, DataType, uint64_t) {}

}  // namespace sharc::core::avx2

#endif

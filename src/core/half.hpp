// Branch-free IEEE binary16 / bfloat16 <-> float32 conversions on 32-bit lanes. Internal to
// sharc (not installed); core/reduce.hpp declares the out-of-line versions.
//
// Everything is integer bit manipulation plus a few exact float operations, written so that
// GCC/Clang vectorise loops calling these with the baseline ISA (SSE2 on x86-64, NEON on
// aarch64); no F16C or other extension is needed. The 16-bit value travels in the low half of
// a uint32_t (upper half zero) so that callers can work on 32-bit lanes throughout.
//
// Results are exact and independent of the floating-point environment's flush-to-zero and
// denormals-are-zero modes, except that floatToHalfBits() rounds through one float addition and
// therefore assumes the default round-to-nearest-even mode.
#pragma once

#include <bit>
#include <cstdint>

namespace sharc::core {

// Every select goes through select32() (and/andnot/or on a mask) rather than '?:'. With GCC's
// default -ftrapping-math, a '?:' lets the optimiser sink the float operation feeding one arm
// into a branch, and it then refuses to if-convert the loop (a float op may trap), so the loop
// stays scalar. A mask select keeps every float op unconditional, as written.
[[gnu::always_inline]] inline uint32_t select32(bool cond, uint32_t if_true,
                                                uint32_t if_false) noexcept {
  const uint32_t mask = 0u - static_cast<uint32_t>(cond);
  return (if_true & mask) | (if_false & ~mask);
}

/// binary16 bits (low 16 bits of h, upper bits zero) -> float. NaN stays NaN (quiet, same sign
/// and payload).
[[gnu::always_inline]] inline float halfBitsToFloat(uint32_t h) noexcept {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t em = h & 0x7FFFu;  // exponent and mantissa
  // Normal, inf, NaN: move the fields into place with the exponent biased by 224 instead of
  // the needed 112 (127 - 15), so that exponent 31 lands on 255, i.e. inf/NaN. Multiplying by
  // 2^-112 then removes the extra bias exactly for finite values (the product is a normal
  // float), keeps inf, and turns a signalling NaN into a quiet one with the same payload.
  const float normal = std::bit_cast<float>((em << 13) + (224u << 23)) * 0x1p-112f;
  // Zero and subnormals (exponent 0): the value is em * 2^-24. 0.5f has an ulp of 2^-24, so
  // (0.5f with em as mantissa) - 0.5f is exactly em * 2^-24, a normal float or zero.
  const float sub = std::bit_cast<float>(em | (126u << 23)) - 0.5f;
  return std::bit_cast<float>(
      select32(em < 0x0400u, std::bit_cast<uint32_t>(sub), std::bit_cast<uint32_t>(normal)) | sign);
}

/// float -> binary16 bits in the low 16 bits (upper bits zero); round to nearest-even,
/// overflow to inf, NaN -> quiet NaN with the sign and the top payload bits.
[[gnu::always_inline]] inline uint32_t floatToHalfBits(float f) noexcept {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7FFFFFFFu;
  // Normal half results (|f| >= 2^-14): rebias the exponent, then round to nearest-even by
  // adding 0x0FFF plus the lowest kept bit; a carry out of the mantissa bumps the exponent,
  // which also turns [65520, 65536) into 0x7C00 (inf) exactly as IEEE wants. For smaller ax
  // the subtraction wraps (defined for unsigned) and the value is not selected.
  const uint32_t odd = (ax >> 13) & 1u;
  const uint32_t normal = (ax - ((127u - 15u) << 23) + 0x0FFFu + odd) >> 13;
  // Zero and subnormal half results (|f| < 2^-14): adding 0.5f aligns the value so that the
  // half's subnormal ulp (2^-24) is the float's ulp, and the float addition's own
  // round-to-nearest-even does the rounding. The sum is >= 0.5, never a float subnormal.
  const uint32_t sub =
      std::bit_cast<uint32_t>(std::bit_cast<float>(ax) + 0.5f) - std::bit_cast<uint32_t>(0.5f);
  const uint32_t nan = 0x7E00u | ((ax >> 13) & 0x03FFu);
  uint32_t r = select32(ax < 0x38800000u, sub, normal);
  r = select32(ax >= 0x47800000u, 0x7C00u, r);  // >= 65536 (including inf): inf
  r = select32(ax > 0x7F800000u, nan, r);
  return r | sign;
}

/// bfloat16 bits (low 16 bits of b, upper bits zero) -> float. bfloat16 is the top half of a
/// float32; a signalling NaN gets its quiet bit set.
[[gnu::always_inline]] inline float bfloat16BitsToFloat(uint32_t b) noexcept {
  const uint32_t bits = b << 16;
  return std::bit_cast<float>(select32((b & 0x7FFFu) > 0x7F80u, bits | 0x00400000u, bits));
}

/// float -> bfloat16 bits, returned in the HIGH 16 bits of the result (low 16 bits zero):
/// that is the form the reduction kernels combine directly; shift right by 16 for the value.
/// Round to nearest-even on the dropped 16 bits: the carry propagates into the exponent, so the
/// largest finite values round to inf and subnormals need no special case. NaN is excluded (the
/// carry could reach the sign) and keeps its top bits with the quiet bit set.
[[gnu::always_inline]] inline uint32_t floatToBfloat16High(float f) noexcept {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = x + 0x7FFFu + ((x >> 16) & 1u);
  return select32((x & 0x7FFFFFFFu) > 0x7F800000u, x | 0x00400000u, rounded) & 0xFFFF0000u;
}

}  // namespace sharc::core

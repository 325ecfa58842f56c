// Test-only reference codec for float16 / bfloat16 (independent of sharc's conversions) and
// the buffer-aliasing patterns the reduction tests sweep; shared by the reduction tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <sharc/types.hpp>
#include <string>
#include <vector>

namespace sharc::core::testref {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

inline std::string hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

inline std::vector<DataType> allTypes() {
  std::vector<DataType> v;
  for (int t = 0; t < kNumDataTypes; ++t) v.push_back(static_cast<DataType>(t));
  return v;
}
inline std::vector<RedOp> allOps() {
  std::vector<RedOp> v;
  for (int o = 0; o < kNumRedOps; ++o) v.push_back(static_cast<RedOp>(o));
  return v;
}

struct Format {
  int mant_bits;  // stored mantissa bits
  int exp_bits;
};
constexpr Format kHalf{10, 5};
constexpr Format kBf16{7, 8};

constexpr uint16_t infBits(Format f) {
  return static_cast<uint16_t>(((1u << f.exp_bits) - 1) << f.mant_bits);
}

inline bool refIsNan(uint16_t v, Format f) {
  return (v & 0x7FFFu) > infBits(f);
}

// Value of a bit pattern, straight from the definition of the format.
inline double refDecode(uint16_t v, Format f) {
  const int bias = (1 << (f.exp_bits - 1)) - 1;
  const bool neg = (v & 0x8000u) != 0;
  const int e = (v >> f.mant_bits) & ((1 << f.exp_bits) - 1);
  const int m = v & ((1 << f.mant_bits) - 1);
  double mag;
  if (e == (1 << f.exp_bits) - 1) {
    mag = m != 0 ? kNaN : kInf;
  } else if (e == 0) {
    mag = std::ldexp(m, 1 - bias - f.mant_bits);
  } else {
    mag = std::ldexp(m + (1 << f.mant_bits), e - bias - f.mant_bits);
  }
  return neg ? -mag : mag;
}

// Values of all non-negative finite patterns, in pattern order (which is value order).
inline const std::vector<double>& positiveValues(Format f) {
  static const auto build = [](Format fmt) {
    std::vector<double> v;
    for (uint32_t p = 0; p < infBits(fmt); ++p) v.push_back(refDecode(uint16_t(p), fmt));
    return v;
  };
  static const std::vector<double> half = build(kHalf);
  static const std::vector<double> bf16 = build(kBf16);
  return f.mant_bits == kHalf.mant_bits ? half : bf16;
}

// Round a double to the nearest representable value, ties to the even pattern. Overflow
// follows IEEE: the value after the largest finite one is treated as 2^(emax+1) (an even
// pattern), and reaching it means infinity.
inline uint16_t refEncode(double x, Format f) {
  if (std::isnan(x)) return static_cast<uint16_t>(infBits(f) | (1u << (f.mant_bits - 1)));
  const uint16_t sign = std::signbit(x) ? 0x8000u : 0u;
  const double ax = std::fabs(x);
  const std::vector<double>& vals = positiveValues(f);
  if (ax == kInf) return sign | infBits(f);
  // lo: the largest pattern whose value is <= ax.
  const auto it = std::upper_bound(vals.begin(), vals.end(), ax);
  const uint32_t lo = static_cast<uint32_t>(it - vals.begin()) - 1;
  const double vlo = vals[lo];
  if (vlo == ax) return static_cast<uint16_t>(sign | lo);
  const uint32_t hi = lo + 1;
  const int bias = (1 << (f.exp_bits - 1)) - 1;
  const double vhi = hi == infBits(f) ? std::ldexp(1.0, bias + 1) : vals[hi];
  const double mid = vlo + (vhi - vlo) / 2;  // exact: one bit more than the format
  uint32_t r;
  if (ax < mid) {
    r = lo;
  } else if (ax > mid) {
    r = hi;
  } else {
    r = (lo % 2 == 0) ? lo : hi;
  }
  return static_cast<uint16_t>(sign | r);
}

// Which buffers reduce() gets as dst and b.
enum Alias { kDistinct, kDstIsA, kDstIsB, kDstIsAIsB, kAIsB, kNumAliases };
constexpr const char* kAliasNames[] = {"distinct", "dst==a", "dst==b", "dst==a==b", "a==b"};
constexpr size_t kGuard = 16;  // elements after the end that must stay untouched

}  // namespace sharc::core::testref

#include "check.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace sharc::perf {

// ---- binary16 / bfloat16 ----------------------------------------------------------------

uint16_t floatToHalf(float f) noexcept {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u)  // inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  const int exp = static_cast<int>(absx >> 23) - 127;
  uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
  int shift;  // bits of `mant` to drop
  uint32_t hexp;
  if (exp >= -14) {
    shift = 13;
    hexp = static_cast<uint32_t>(exp + 15);
  } else {
    if (exp < -25) return sign;  // below half the smallest subnormal
    shift = 13 + (-14 - exp);
    hexp = 0;
  }
  uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  // q includes the implicit bit for normals; adding lets a mantissa carry into the exponent.
  uint32_t bits = hexp ? ((hexp << 10) + (q - 0x400u)) : q;
  return static_cast<uint16_t>(sign | bits);
}

float halfToFloat(uint16_t h) noexcept {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t floatToBf16(float f) noexcept {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float bf16ToFloat(uint16_t b) noexcept {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// ---- element codecs ---------------------------------------------------------------------

namespace {

template <class T>
struct Plain {
  using Storage = T;
  static double load(Storage s) { return static_cast<double>(s); }
  static Storage store(double v) { return static_cast<T>(v); }
  static Storage sentinel() {
    if constexpr (std::is_floating_point_v<T>)
      return std::numeric_limits<T>::quiet_NaN();
    else if constexpr (std::is_signed_v<T>)
      return std::numeric_limits<T>::min();
    else
      return std::numeric_limits<T>::max();
  }
};
struct Half {
  using Storage = uint16_t;
  static double load(Storage s) { return halfToFloat(s); }
  static Storage store(double v) { return floatToHalf(static_cast<float>(v)); }
  static Storage sentinel() { return 0x7e00u; }
};
struct Bf16 {
  using Storage = uint16_t;
  static double load(Storage s) { return bf16ToFloat(s); }
  static Storage store(double v) { return floatToBf16(static_cast<float>(v)); }
  static Storage sentinel() { return 0x7fc0u; }
};

template <class F>
void withCodec(DataType t, F&& f) {
  switch (t) {
    case DataType::Int8: f(Plain<int8_t>{}); return;
    case DataType::Uint8: f(Plain<uint8_t>{}); return;
    case DataType::Int32: f(Plain<int32_t>{}); return;
    case DataType::Uint32: f(Plain<uint32_t>{}); return;
    case DataType::Int64: f(Plain<int64_t>{}); return;
    case DataType::Uint64: f(Plain<uint64_t>{}); return;
    case DataType::Float16: f(Half{}); return;
    case DataType::Float32: f(Plain<float>{}); return;
    case DataType::Float64: f(Plain<double>{}); return;
    case DataType::BFloat16: f(Bf16{}); return;
  }
}

// ---- the pattern ------------------------------------------------------------------------

uint64_t mix(uint64_t x) noexcept {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t hash(uint64_t seed, uint64_t a, uint64_t b) noexcept {
  return mix(seed ^ mix(a * 0x100000001b3ull + 0x51ed27ull) ^ mix(b + 0x2545f4914f6cdd1dull));
}

bool isUnsigned(DataType t) noexcept {
  return t == DataType::Uint8 || t == DataType::Uint32 || t == DataType::Uint64;
}

// Largest magnitude every value up to which is exact in `t` (and fits it).
int64_t exactLimit(DataType t) noexcept {
  switch (t) {
    case DataType::Int8: return 127;
    case DataType::Uint8: return 255;
    case DataType::BFloat16: return 256;
    case DataType::Float16: return 2048;
    default: return int64_t{1} << 24;
  }
}

// A value in [lo, hi] from the hash.
int64_t pick(uint64_t h, int64_t lo, int64_t hi) noexcept {
  if (hi <= lo) return lo;
  return lo + static_cast<int64_t>(h % static_cast<uint64_t>(hi - lo + 1));
}

}  // namespace

double patternValue(const Pattern& p, int rank, size_t index) noexcept {
  const bool uns = isUnsigned(p.type);
  const int64_t n = std::max(p.nranks, 1);
  const int64_t limit = exactLimit(p.type);
  const uint64_t h = hash(p.seed, static_cast<uint64_t>(rank), index);
  if (!p.op) return static_cast<double>(uns ? pick(h, 0, 6) : pick(h, -3, 3));
  switch (*p.op) {
    case RedOp::Sum: {
      const int64_t a = std::min<int64_t>(3, limit / n);
      return static_cast<double>(uns ? pick(h, 0, a) : pick(h, -a, a));
    }
    case RedOp::Max:
    case RedOp::Min: return static_cast<double>(uns ? pick(h, 0, 6) : pick(h, -3, 3));
    case RedOp::Prod: {
      // Element i has min(i % 7, n) ranks contributing 2 (product <= 64), one rank in
      // every 13th element contributes 0, and signed types get random signs.
      const uint64_t un = static_cast<uint64_t>(n);
      const uint64_t twos = index % 7;
      if (index % 13 == 12 && static_cast<uint64_t>(rank) == (index / 13) % un) return 0.0;
      double v = ((index + static_cast<uint64_t>(rank)) % un) < twos ? 2.0 : 1.0;
      if (!uns && (h & 1u)) v = -v;
      return v;
    }
    case RedOp::Avg: {
      // Every rank holds m + e_r with sum_r e_r = 0 (ranks 2j and 2j+1 get +-1), so the sum
      // is n*m and the average m is exact; every partial sum stays within n*|m| + 1.
      const int64_t a = std::min<int64_t>(2, (limit - 1) / n);
      const uint64_t hm = hash(p.seed, 0xa11a11ull, index);
      int64_t m = uns ? pick(hm, 1, std::max<int64_t>(a, 1)) : pick(hm, -a, a);
      if (uns && a < 1) m = 0;
      int64_t e = 0;
      if (m != 0 || !uns) {
        const int64_t pair = rank / 2;
        if (!(n % 2 == 1 && rank == n - 1)) {
          const int64_t s =
              (hash(p.seed, 0xbeefull + static_cast<uint64_t>(pair), index) & 1u) ? 1 : -1;
          e = (rank % 2 == 0) ? s : -s;
        }
        if (uns && m == 0) e = 0;
      }
      return static_cast<double>(m + e);
    }
  }
  return 0.0;
}

double expectedValue(const Pattern& p, size_t index) noexcept {
  const RedOp op = p.op.value_or(RedOp::Sum);
  double acc = patternValue(p, 0, index);
  for (int r = 1; r < p.nranks; ++r) {
    const double v = patternValue(p, r, index);
    switch (op) {
      case RedOp::Sum:
      case RedOp::Avg: acc += v; break;
      case RedOp::Prod: acc *= v; break;
      case RedOp::Max: acc = std::max(acc, v); break;
      case RedOp::Min: acc = std::min(acc, v); break;
    }
  }
  if (op == RedOp::Avg) acc /= p.nranks;
  return acc;
}

void fillPattern(void* buf, const Pattern& p, int rank, size_t first, size_t count) {
  withCodec(p.type, [&](auto codec) {
    using C = decltype(codec);
    auto* out = static_cast<typename C::Storage*>(buf);
    for (size_t k = 0; k < count; ++k) out[k] = C::store(patternValue(p, rank, first + k));
  });
}

void fillSentinel(void* buf, DataType type, size_t count) {
  withCodec(type, [&](auto codec) {
    using C = decltype(codec);
    auto* out = static_cast<typename C::Storage*>(buf);
    std::fill(out, out + count, C::sentinel());
  });
}

size_t countWrongCopy(const void* buf, const Pattern& p, int srcRank, size_t first, size_t count) {
  size_t wrong = 0;
  withCodec(p.type, [&](auto codec) {
    using C = decltype(codec);
    const auto* in = static_cast<const typename C::Storage*>(buf);
    for (size_t k = 0; k < count; ++k)
      if (!(C::load(in[k]) == patternValue(p, srcRank, first + k))) ++wrong;
  });
  return wrong;
}

size_t countWrongReduced(const void* buf, const Pattern& p, size_t first, size_t count) {
  size_t wrong = 0;
  withCodec(p.type, [&](auto codec) {
    using C = decltype(codec);
    const auto* in = static_cast<const typename C::Storage*>(buf);
    for (size_t k = 0; k < count; ++k)
      if (!(C::load(in[k]) == expectedValue(p, first + k))) ++wrong;
  });
  return wrong;
}

}  // namespace sharc::perf

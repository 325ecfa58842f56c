// Tests for the host reduction kernels (src/core/reduce.cc).
//
// Every expected value is computed independently of the code under test: integers in 128-bit
// arithmetic, floating types in double, and float16/bfloat16 through a reference decoder
// (ldexp of the fields) and a reference encoder that looks up the neighbouring representable
// values in a sorted table and picks the nearer one, ties to the even bit pattern.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "core/reduce.hpp"
#include "half_reference.hpp"

#if defined(__x86_64__)
#include <xmmintrin.h>  // _mm_getcsr/_mm_setcsr
#endif

namespace sharc::core {
namespace {

using namespace testref;

// ---- per-type test codecs: storage type, exact decode to double, reference rounding ------

template <Format F>
struct SmallFloatCodec {
  using T = uint16_t;
  static constexpr bool kFloating = true;
  static double decode(T v) { return refDecode(v, F); }
  static T encode(double x) { return refEncode(x, F); }
  static bool isNan(T v) { return refIsNan(v, F); }
  static uint64_t bits(T v) { return v; }
  static T random(std::mt19937_64& rng) {
    // Half the time any bit pattern (NaN, inf, subnormals, extremes); otherwise a moderate
    // value, so that sums and products of neighbours exercise the rounding.
    if (rng() % 2) return static_cast<uint16_t>(rng());
    return encode(std::uniform_real_distribution<double>(-8.0, 8.0)(rng));
  }
};
using HalfCodec = SmallFloatCodec<kHalf>;
using Bf16Codec = SmallFloatCodec<kBf16>;

template <typename F>
struct FloatCodec {
  using T = F;
  static constexpr bool kFloating = true;
  static double decode(T v) { return v; }
  // double -> float conversion rounds to nearest-even; identity for double.
  static T encode(double x) { return static_cast<T>(x); }
  static bool isNan(T v) { return std::isnan(v); }
  static uint64_t bits(T v) {
    if constexpr (sizeof(T) == 4)
      return std::bit_cast<uint32_t>(v);
    else
      return std::bit_cast<uint64_t>(v);
  }
  static T random(std::mt19937_64& rng) {
    if (rng() % 2) {
      if constexpr (sizeof(T) == 4)
        return std::bit_cast<float>(static_cast<uint32_t>(rng()));
      else
        return std::bit_cast<double>(rng());
    }
    return static_cast<T>(std::uniform_real_distribution<double>(-100.0, 100.0)(rng));
  }
};

template <typename I>
struct IntCodec {
  using T = I;
  static constexpr bool kFloating = false;
  static uint64_t bits(T v) { return static_cast<uint64_t>(v); }
  static T random(std::mt19937_64& rng) {
    // Mostly the full range (so Sum/Prod wrap), sometimes small values.
    if (rng() % 4 == 0) return static_cast<T>(static_cast<int>(rng() % 21) - 10);
    return static_cast<T>(rng());
  }
};

// ---- reference operators -----------------------------------------------------------------

double refFloatOp(double x, double y, RedOp op) {
  switch (op) {
    case RedOp::Sum:
    case RedOp::Avg: return x + y;
    case RedOp::Prod: return x * y;
    case RedOp::Max:
      if (std::isnan(x) || std::isnan(y)) return kNaN;
      return x > y ? x : y;
    case RedOp::Min:
      if (std::isnan(x) || std::isnan(y)) return kNaN;
      return x < y ? x : y;
  }
  return kNaN;
}

template <typename T>
T refIntOp(T a, T b, RedOp op) {
  // 128-bit arithmetic cannot overflow for 64-bit operands; the conversion back to T is
  // modulo 2^bits (C++20).
  using Wide = std::conditional_t<std::is_signed_v<T>, __int128, unsigned __int128>;
  const Wide x = a, y = b;
  switch (op) {
    case RedOp::Sum:
    case RedOp::Avg: return static_cast<T>(x + y);
    case RedOp::Prod: return static_cast<T>(x * y);
    case RedOp::Max: return x > y ? a : b;
    case RedOp::Min: return x < y ? a : b;
  }
  return T{};
}

template <typename C>
typename C::T expectedValue(typename C::T a, typename C::T b, RedOp op) {
  if constexpr (C::kFloating) {
    return C::encode(refFloatOp(C::decode(a), C::decode(b), op));
  } else {
    return refIntOp(a, b, op);
  }
}

// Bitwise equality, except: any NaN matches a NaN, and for Max/Min -0.0 matches +0.0.
template <typename C>
bool matches(typename C::T got, typename C::T want, RedOp op) {
  if constexpr (C::kFloating) {
    if (C::isNan(want)) return C::isNan(got);
    if ((op == RedOp::Max || op == RedOp::Min) && C::decode(want) == 0) {
      return C::decode(got) == 0;
    }
  }
  return C::bits(got) == C::bits(want);
}

// ---- the type x op x size x aliasing sweep -----------------------------------------------

constexpr size_t kSizes[] = {0, 1, 7, 1023, 4099};

template <typename C>
void checkReduce(DataType type, RedOp op, size_t n, Alias alias, std::mt19937_64& rng) {
  using T = typename C::T;
  SCOPED_TRACE(testing::Message() << dataTypeName(type) << " " << redOpName(op) << " n=" << n << " "
                                  << kAliasNames[alias]);
  std::vector<T> a(n + kGuard), b(n + kGuard);
  for (auto& v : a) v = C::random(rng);
  for (auto& v : b) v = C::random(rng);
  if (alias == kDstIsAIsB || alias == kAIsB) b = a;
  std::vector<T> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = expectedValue<C>(a[i], b[i], op);

  std::vector<T> out(n + kGuard, C::random(rng));
  const std::vector<T> a0 = a, b0 = b, out0 = out;
  // result: the vector reduce() writes; before: its contents beforehand.
  std::vector<T>* result = &out;
  const std::vector<T>* before = &out0;
  if (alias == kDstIsA || alias == kDstIsAIsB) result = &a, before = &a0;
  if (alias == kDstIsB) result = &b, before = &b0;
  const T* pb = (alias == kDstIsAIsB || alias == kAIsB) ? a.data() : b.data();
  reduce(result->data(), a.data(), pb, n, type, op);

  int failures = 0;
  for (size_t i = 0; i < n && failures < 5; ++i) {
    if (!matches<C>((*result)[i], want[i], op)) {
      ++failures;
      ADD_FAILURE() << "i=" << i << " a=" << hex(C::bits(a0[i])) << " b=" << hex(C::bits(b0[i]))
                    << " got=" << hex(C::bits((*result)[i])) << " want=" << hex(C::bits(want[i]));
    }
  }
  // Nothing outside [0, n) of the destination and nothing of a non-destination input changes.
  for (size_t i = n; i < n + kGuard; ++i) {
    ASSERT_EQ(C::bits((*result)[i]), C::bits((*before)[i])) << "wrote past the end, i=" << i;
  }
  if (result != &a) {
    for (size_t i = 0; i < n + kGuard; ++i) ASSERT_EQ(C::bits(a[i]), C::bits(a0[i]));
  }
  if (result != &b) {
    for (size_t i = 0; i < n + kGuard; ++i) ASSERT_EQ(C::bits(b[i]), C::bits(b0[i]));
  }
}

template <typename C>
void sweep(DataType type, RedOp op) {
  std::mt19937_64 rng(1000 * static_cast<int>(type) + static_cast<int>(op));
  for (size_t n : kSizes) {
    for (int alias = 0; alias < kNumAliases; ++alias) {
      checkReduce<C>(type, op, n, static_cast<Alias>(alias), rng);
    }
  }
}

// Calls fn.template operator()<Codec>() for the codec of `type`.
template <typename Fn>
void withCodec(DataType type, Fn&& fn) {
  switch (type) {
    case DataType::Int8: fn.template operator()<IntCodec<int8_t>>(); return;
    case DataType::Uint8: fn.template operator()<IntCodec<uint8_t>>(); return;
    case DataType::Int32: fn.template operator()<IntCodec<int32_t>>(); return;
    case DataType::Uint32: fn.template operator()<IntCodec<uint32_t>>(); return;
    case DataType::Int64: fn.template operator()<IntCodec<int64_t>>(); return;
    case DataType::Uint64: fn.template operator()<IntCodec<uint64_t>>(); return;
    case DataType::Float16: fn.template operator()<HalfCodec>(); return;
    case DataType::Float32: fn.template operator()<FloatCodec<float>>(); return;
    case DataType::Float64: fn.template operator()<FloatCodec<double>>(); return;
    case DataType::BFloat16: fn.template operator()<Bf16Codec>(); return;
  }
  FAIL() << "bad type";
}

// Calls fn.template operator()<Codec>(type) for each floating type.
template <typename Fn>
void forFloatingTypes(Fn&& fn) {
  fn.template operator()<HalfCodec>(DataType::Float16);
  fn.template operator()<Bf16Codec>(DataType::BFloat16);
  fn.template operator()<FloatCodec<float>>(DataType::Float32);
  fn.template operator()<FloatCodec<double>>(DataType::Float64);
}

class ReduceSweep : public testing::TestWithParam<std::tuple<DataType, RedOp>> {};

TEST_P(ReduceSweep, MatchesReferenceForAllSizesAndAliasing) {
  const DataType type = std::get<0>(GetParam());
  const RedOp op = std::get<1>(GetParam());
  withCodec(type, [&]<typename C>() { sweep<C>(type, op); });
}

INSTANTIATE_TEST_SUITE_P(AllTypesAndOps, ReduceSweep,
                         testing::Combine(testing::ValuesIn(allTypes()),
                                          testing::ValuesIn(allOps())),
                         [](const auto& info) {
                           return std::string(dataTypeName(std::get<0>(info.param))) + "_" +
                                  redOpName(std::get<1>(info.param));
                         });

// ---- targeted cases ----------------------------------------------------------------------

// One element through reduce().
template <typename T>
T reduce1(T a, T b, DataType type, RedOp op) {
  T out{};
  reduce(&out, &a, &b, 1, type, op);
  return out;
}

TEST(Reduce, HalfRoundsTiesToEven) {
  // 1 + 2^-11 is halfway between 1 (even) and 1 + 2^-10 (odd): rounds down.
  EXPECT_EQ(reduce1<uint16_t>(0x3C00, 0x1000, DataType::Float16, RedOp::Sum), 0x3C00);
  // (1 + 2^-10) + 2^-11 is halfway between 0x3C01 (odd) and 0x3C02 (even): rounds up.
  EXPECT_EQ(reduce1<uint16_t>(0x3C01, 0x1000, DataType::Float16, RedOp::Sum), 0x3C02);
  // Subnormal ties: 2^-25 -> 0 (even), 3 * 2^-25 -> 2 * 2^-24.
  EXPECT_EQ(floatToHalf(0x1p-25f), 0x0000);
  EXPECT_EQ(floatToHalf(0x3p-25f), 0x0002);
  EXPECT_EQ(floatToHalf(-0x1p-25f), 0x8000);
  EXPECT_EQ(floatToHalf(1.0f + 0x1p-11f), 0x3C00);
  EXPECT_EQ(floatToHalf(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01);  // just above the tie
  // Overflow threshold: 65520 is halfway between 65504 (odd) and "65536" (even) -> inf.
  EXPECT_EQ(floatToHalf(65520.0f), 0x7C00);
  EXPECT_EQ(floatToHalf(65519.996f), 0x7BFF);
  // 2^-14 - tiny rounds up to the smallest normal.
  EXPECT_EQ(floatToHalf(0x1p-14f - 0x1p-30f), 0x0400);
}

TEST(Reduce, Bfloat16RoundsTiesToEven) {
  // 1 + 2^-8 is halfway between 1 (0x3F80, even) and 1 + 2^-7 (0x3F81): rounds down.
  EXPECT_EQ(reduce1<uint16_t>(0x3F80, 0x3B80, DataType::BFloat16, RedOp::Sum), 0x3F80);
  // (1 + 2^-7) + 2^-8 rounds up to 0x3F82.
  EXPECT_EQ(reduce1<uint16_t>(0x3F81, 0x3B80, DataType::BFloat16, RedOp::Sum), 0x3F82);
  EXPECT_EQ(floatToBfloat16(1.0f + 0x1p-8f), 0x3F80);
  EXPECT_EQ(floatToBfloat16(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);
  EXPECT_EQ(floatToBfloat16(std::numeric_limits<float>::max()), 0x7F80);  // rounds to inf
  EXPECT_EQ(floatToBfloat16(-std::numeric_limits<float>::max()), 0xFF80);
}

// NaN in either operand (or both) gives NaN for every operator and floating type.
TEST(Reduce, NaNPropagates) {
  const double nan_cases[][2] = {{kNaN, 1.0},   {1.0, kNaN},  {kNaN, kNaN},
                                 {kNaN, -kInf}, {kInf, kNaN}, {-2.0, kNaN}};
  forFloatingTypes([&]<typename C>(DataType type) {
    for (RedOp op : allOps()) {
      for (const auto& c : nan_cases) {
        const auto got = reduce1(C::encode(c[0]), C::encode(c[1]), type, op);
        EXPECT_TRUE(C::isNan(got))
            << dataTypeName(type) << " " << redOpName(op) << " " << c[0] << " " << c[1];
      }
    }
  });
}

// For Max/Min, in-place reduction gives bitwise the same result as out-of-place, even for the
// NaN payload, which depends on operand order (the kernels keep a op b when dst == b). Sum and
// Prod are left out: which NaN x86 returns for NaN + NaN depends on the order the compiler
// chose for the commutative operation. Three elements: float16/bfloat16 pairs plus a tail.
template <typename T>
void checkNanOrder(DataType type, T nan1, T nan2) {
  for (RedOp op : {RedOp::Max, RedOp::Min}) {
    std::vector<T> a(3, nan1), b(3, nan2), out(3), in_a = a, in_b = b;
    reduce(out.data(), a.data(), b.data(), 3, type, op);
    reduce(in_a.data(), in_a.data(), b.data(), 3, type, op);
    reduce(in_b.data(), a.data(), in_b.data(), 3, type, op);
    EXPECT_EQ(in_a, out) << dataTypeName(type) << " " << redOpName(op);
    EXPECT_EQ(in_b, out) << dataTypeName(type) << " " << redOpName(op);
  }
}

TEST(Reduce, AliasingKeepsOperandOrder) {
  checkNanOrder<uint32_t>(DataType::Float32, 0x7FC00001u, 0xFFC00002u);
  checkNanOrder<uint64_t>(DataType::Float64, 0x7FF8000000000001u, 0xFFF8000000000002u);
  checkNanOrder<uint16_t>(DataType::Float16, 0x7E01u, 0xFE02u);
  checkNanOrder<uint16_t>(DataType::BFloat16, 0x7FC1u, 0xFFC2u);
}

TEST(Reduce, Infinities) {
  struct Case {
    double a, b;
    RedOp op;
    double want;
  };
  const Case cases[] = {
      {kInf, 1.0, RedOp::Sum, kInf},    {-kInf, 1.0, RedOp::Sum, -kInf},
      {kInf, -kInf, RedOp::Sum, kNaN},  {kInf, 0.0, RedOp::Prod, kNaN},
      {kInf, -2.0, RedOp::Prod, -kInf}, {-kInf, 3.0, RedOp::Max, 3.0},
      {-kInf, 3.0, RedOp::Min, -kInf},  {kInf, -kInf, RedOp::Max, kInf},
      {kInf, -kInf, RedOp::Min, -kInf}, {kInf, kInf, RedOp::Avg, kInf},
  };
  forFloatingTypes([&]<typename C>(DataType type) {
    for (const Case& c : cases) {
      const auto got = reduce1(C::encode(c.a), C::encode(c.b), type, c.op);
      EXPECT_TRUE(matches<C>(got, C::encode(c.want), c.op))
          << dataTypeName(type) << " " << c.a << " " << redOpName(c.op) << " " << c.b;
    }
  });
  // Finite overflow to infinity.
  EXPECT_EQ(reduce1<uint16_t>(0x7BFF, 0x7BFF, DataType::Float16, RedOp::Sum), 0x7C00);
  EXPECT_EQ(reduce1<uint16_t>(0xFBFF, 0xFBFF, DataType::Float16, RedOp::Sum), 0xFC00);
  EXPECT_EQ(reduce1<uint16_t>(0x5C00, 0x5C00, DataType::Float16, RedOp::Prod), 0x7C00);  // 256^2
  EXPECT_EQ(reduce1<uint16_t>(0x7F7F, 0x7F7F, DataType::BFloat16, RedOp::Sum), 0x7F80);
}

TEST(Reduce, MinMaxMixedSigns) {
  const double pairs[][2] = {{-1.0, 2.0}, {2.0, -1.0},  {-3.0, 0.5}, {-0.0, 0.0},
                             {0.0, -0.0}, {-5.0, -4.0}, {7.0, -7.0}};
  forFloatingTypes([&]<typename C>(DataType type) {
    for (const auto& p : pairs) {
      const auto a = C::encode(p[0]), b = C::encode(p[1]);
      EXPECT_EQ(C::decode(reduce1(a, b, type, RedOp::Max)), std::max(p[0], p[1]));
      EXPECT_EQ(C::decode(reduce1(a, b, type, RedOp::Min)), std::min(p[0], p[1]));
    }
  });
  EXPECT_EQ(reduce1<int8_t>(-128, 127, DataType::Int8, RedOp::Max), 127);
  EXPECT_EQ(reduce1<int8_t>(-128, 127, DataType::Int8, RedOp::Min), -128);
  EXPECT_EQ(reduce1<int32_t>(-5, 3, DataType::Int32, RedOp::Min), -5);
  EXPECT_EQ(reduce1<int64_t>(std::numeric_limits<int64_t>::min(), 1, DataType::Int64, RedOp::Max),
            1);
  EXPECT_EQ(reduce1<uint8_t>(200, 100, DataType::Uint8, RedOp::Max), 200);  // not signed
  EXPECT_EQ(reduce1<uint64_t>(~0ull, 1, DataType::Uint64, RedOp::Min), 1u);
}

TEST(Reduce, IntegerWraparound) {
  EXPECT_EQ(reduce1<int8_t>(127, 1, DataType::Int8, RedOp::Sum), -128);
  EXPECT_EQ(reduce1<int8_t>(-128, -1, DataType::Int8, RedOp::Sum), 127);
  EXPECT_EQ(reduce1<int8_t>(16, 16, DataType::Int8, RedOp::Prod), 0);
  EXPECT_EQ(reduce1<int8_t>(-128, -1, DataType::Int8, RedOp::Prod), -128);
  EXPECT_EQ(reduce1<int8_t>(100, 100, DataType::Int8, RedOp::Avg), -56);  // Avg sums first
  EXPECT_EQ(reduce1<uint8_t>(255, 1, DataType::Uint8, RedOp::Sum), 0);
  EXPECT_EQ(reduce1<uint8_t>(16, 17, DataType::Uint8, RedOp::Prod), 16);
  EXPECT_EQ(reduce1<int32_t>(std::numeric_limits<int32_t>::max(), 1, DataType::Int32, RedOp::Sum),
            std::numeric_limits<int32_t>::min());
  EXPECT_EQ(reduce1<int64_t>(std::numeric_limits<int64_t>::min(), -1, DataType::Int64, RedOp::Prod),
            std::numeric_limits<int64_t>::min());
  EXPECT_EQ(reduce1<uint64_t>(1ull << 63, 2, DataType::Uint64, RedOp::Prod), 0u);
}

TEST(Reduce, ZeroCountAndInvalidArgumentsDoNothing) {
  reduce(nullptr, nullptr, nullptr, 0, DataType::Float32, RedOp::Sum);
  float a[4] = {1, 2, 3, 4}, b[4] = {1, 1, 1, 1}, out[4] = {9, 9, 9, 9};
  reduce(out, a, b, 4, static_cast<DataType>(kNumDataTypes), RedOp::Sum);
  reduce(out, a, b, 4, DataType::Float32, static_cast<RedOp>(kNumRedOps));
  for (float v : out) EXPECT_EQ(v, 9.0f);
}

// ---- finishAverage -----------------------------------------------------------------------

template <typename C>
void checkFinishAverage(DataType type, uint64_t divisor, std::mt19937_64& rng) {
  using T = typename C::T;
  SCOPED_TRACE(testing::Message() << dataTypeName(type) << " / " << divisor);
  const size_t n = 1023;
  std::vector<T> data(n + kGuard);
  for (auto& v : data) v = C::random(rng);
  const std::vector<T> orig = data;
  finishAverage(data.data(), n, type, divisor);
  int failures = 0;
  for (size_t i = 0; i < n && failures < 5; ++i) {
    T want;
    if constexpr (C::kFloating) {
      want = C::encode(C::decode(orig[i]) / static_cast<double>(divisor));
    } else {
      using Wide = std::conditional_t<std::is_signed_v<T>, __int128, unsigned __int128>;
      want = static_cast<T>(static_cast<Wide>(orig[i]) / static_cast<Wide>(divisor));
    }
    if (!matches<C>(data[i], want, RedOp::Avg)) {
      ++failures;
      ADD_FAILURE() << "i=" << i << " in=" << hex(C::bits(orig[i]))
                    << " got=" << hex(C::bits(data[i])) << " want=" << hex(C::bits(want));
    }
  }
  for (size_t i = n; i < n + kGuard; ++i) EXPECT_EQ(C::bits(data[i]), C::bits(orig[i]));
}

class FinishAverage : public testing::TestWithParam<DataType> {};

TEST_P(FinishAverage, MatchesReference) {
  const DataType type = GetParam();
  std::mt19937_64 rng(77 + static_cast<int>(type));
  withCodec(type, [&]<typename C>() {
    for (uint64_t d : {1ull, 2ull, 3ull, 7ull, 8ull, 100ull, 1000ull}) {
      checkFinishAverage<C>(type, d, rng);
    }
    if constexpr (!C::kFloating) {
      // Divisors at and beyond the type's range.
      for (uint64_t d :
           {127ull, 128ull, 255ull, 256ull, 300ull, 1ull << 31, 1ull << 32, 1ull << 63, ~0ull}) {
        checkFinishAverage<C>(type, d, rng);
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(AllTypes, FinishAverage, testing::ValuesIn(allTypes()),
                         [](const auto& info) { return std::string(dataTypeName(info.param)); });

TEST(FinishAverageEdges, SignedTruncationAndExtremes) {
  int8_t i8[] = {-7, 7, -128, 127};
  finishAverage(i8, 4, DataType::Int8, 2);
  EXPECT_EQ(i8[0], -3);  // truncates toward zero
  EXPECT_EQ(i8[1], 3);
  EXPECT_EQ(i8[2], -64);
  EXPECT_EQ(i8[3], 63);
  int8_t j8[] = {-128, 127, -1};
  finishAverage(j8, 3, DataType::Int8, 128);
  EXPECT_EQ(j8[0], -1);
  EXPECT_EQ(j8[1], 0);
  EXPECT_EQ(j8[2], 0);
  int64_t i64[] = {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  finishAverage(i64, 2, DataType::Int64, 1ull << 63);
  EXPECT_EQ(i64[0], -1);
  EXPECT_EQ(i64[1], 0);
  uint16_t h = 0x3C00;  // 1.0 / 3
  finishAverage(&h, 1, DataType::Float16, 3);
  EXPECT_EQ(h, refEncode(1.0 / 3.0, kHalf));
}

}  // namespace
}  // namespace sharc::core

// Tests for the instruction-set variants of the reduction kernels and the float16/bfloat16
// conversions (src/core/reduce.cc, reduce_avx2.cc); shared reference in half_reference.hpp.
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
#include "core/reduce_dispatch.hpp"
#include "half_reference.hpp"

#if defined(__x86_64__)
#include <xmmintrin.h>  // _mm_getcsr/_mm_setcsr
#endif

namespace sharc::core {
namespace {

using namespace testref;

// ---- instruction-set variants: bit-identical to the baseline -----------------------------
//
// The sweeps above go through reduce()/finishAverage(), i.e. the implementation this CPU
// selects. Here every other implementation must reproduce the baseline's bits exactly (NaN
// payloads, signed zeros, rounding), so that results never depend on the CPU.

// Mixed inputs: special values (NaNs of any sign and payload, signalling ones included,
// infinities, zeros, subnormals, the largest finite values), random bit patterns, moderate
// values, and pairs whose sum is exactly halfway between two representable values.
void fillIsaInputs(std::vector<uint16_t>& a, std::vector<uint16_t>& b, Format f,
                   std::mt19937_64& rng) {
  const uint32_t inf = infBits(f), mant_mask = (1u << f.mant_bits) - 1;
  auto special = [&]() -> uint32_t {
    const uint32_t sign = rng() % 2 ? 0x8000u : 0u;
    switch (rng() % 5) {
      case 0: return sign | inf | (1 + rng() % mant_mask);  // NaN
      case 1: return sign | inf;
      case 2: return sign | (rng() % 3 == 0 ? 0u : (rng() & mant_mask));  // zero or subnormal
      case 3: return sign | (inf - 1 - rng() % 4);                        // largest finite
      default: return static_cast<uint32_t>(rng());
    }
  };
  for (size_t i = 0; i < a.size(); ++i) {
    uint32_t x = static_cast<uint16_t>(rng()), y = static_cast<uint16_t>(rng());
    switch (rng() % 4) {
      case 0: x = special(), y = special(); break;
      case 1: break;
      case 2:
        x = refEncode(std::uniform_real_distribution<double>(-8.0, 8.0)(rng), f);
        y = refEncode(std::uniform_real_distribution<double>(-8.0, 8.0)(rng), f);
        break;
      case 3: {
        // y = half an ulp of x (a power of two mant_bits + 1 binades lower): a tie.
        const uint32_t e = (x >> f.mant_bits) & (inf >> f.mant_bits);
        if (e > uint32_t(f.mant_bits) + 1 && (x & 0x7FFFu) < inf) {
          y = (rng() % 2 ? 0x8000u : 0u) | ((e - f.mant_bits - 1) << f.mant_bits);
        }
        break;
      }
    }
    a[i] = static_cast<uint16_t>(x);
    b[i] = static_cast<uint16_t>(y);
  }
}

constexpr size_t kIsaSizes[] = {0, 1, 7, 15, 16, 17, 31, 32, 33, 1023, 4099};

// Every size and aliasing pattern (plus guard elements) through `isa` and through Baseline.
void compareIsaReduce(ReduceIsa isa, DataType type, RedOp op, std::mt19937_64& rng) {
  const Format f = type == DataType::Float16 ? kHalf : kBf16;
  for (size_t n : kIsaSizes) {
    for (int alias = 0; alias < kNumAliases; ++alias) {
      SCOPED_TRACE(testing::Message() << dataTypeName(type) << " " << redOpName(op) << " n=" << n
                                      << " " << kAliasNames[alias]);
      std::vector<uint16_t> a(n + kGuard), b(n + kGuard), dst(n + kGuard);
      fillIsaInputs(a, b, f, rng);
      for (auto& v : dst) v = static_cast<uint16_t>(rng());
      if (alias == kDstIsAIsB || alias == kAIsB) b = a;
      // Runs one implementation on fresh copies; returns the buffer it wrote.
      auto run = [&](ReduceIsa which) {
        std::vector<uint16_t> ca = a, cb = b, cd = dst;
        std::vector<uint16_t>* out = &cd;
        if (alias == kDstIsA || alias == kDstIsAIsB) out = &ca;
        if (alias == kDstIsB) out = &cb;
        const uint16_t* pb = (alias == kDstIsAIsB || alias == kAIsB) ? ca.data() : cb.data();
        reduceWith(which, out->data(), ca.data(), pb, n, type, op);
        return *out;
      };
      const std::vector<uint16_t> want = run(ReduceIsa::Baseline), got = run(isa);
      int failures = 0;
      for (size_t i = 0; i < n + kGuard && failures < 5; ++i) {
        if (got[i] != want[i]) {
          ++failures;
          ADD_FAILURE() << "i=" << i << " a=" << hex(a[i]) << " b=" << hex(b[i])
                        << " got=" << hex(got[i]) << " baseline=" << hex(want[i]);
        }
      }
    }
  }
}

void compareIsaFinishAverage(ReduceIsa isa, DataType type, std::mt19937_64& rng) {
  const Format f = type == DataType::Float16 ? kHalf : kBf16;
  for (uint64_t d : {2ull, 3ull, 7ull, 100ull, 1000ull, 1ull << 20, 1ull << 40, ~0ull}) {
    for (size_t n : kIsaSizes) {
      SCOPED_TRACE(testing::Message() << dataTypeName(type) << " / " << d << " n=" << n);
      std::vector<uint16_t> data(n + kGuard), unused(n + kGuard);
      fillIsaInputs(data, unused, f, rng);
      std::vector<uint16_t> want = data, got = data;
      finishAverageWith(ReduceIsa::Baseline, want.data(), n, type, d);
      finishAverageWith(isa, got.data(), n, type, d);
      for (size_t i = 0; i < n + kGuard; ++i) {
        ASSERT_EQ(got[i], want[i]) << "i=" << i << " in=" << hex(data[i]);
      }
    }
  }
}

class IsaMatchesBaseline : public testing::TestWithParam<std::tuple<DataType, RedOp>> {
 protected:
  void SetUp() override {
    if (!isaAvailable(ReduceIsa::Avx2)) GTEST_SKIP() << "no AVX2/F16C on this CPU/build";
  }
};

TEST_P(IsaMatchesBaseline, Avx2Reduce) {
  const auto [type, op] = GetParam();
  std::mt19937_64 rng(500 + 10 * static_cast<int>(type) + static_cast<int>(op));
  compareIsaReduce(ReduceIsa::Avx2, type, op, rng);
}

#if defined(__x86_64__)
// Flush-to-zero / denormals-are-zero change float32 arithmetic on subnormals (bfloat16 has
// them), but must change both implementations the same way. Not Max/Min: whether those flush
// a subnormal bfloat16 operand under DAZ depends on how the compiler lowered the baseline's
// compare-and-select (clang 14 uses maxps/minps, which flush; GCC selects bits, as AVX2 does).
TEST_P(IsaMatchesBaseline, Avx2ReduceWithFtzDaz) {
  const auto [type, op] = GetParam();
  if (op == RedOp::Max || op == RedOp::Min) GTEST_SKIP() << "compiler-dependent under DAZ";
  std::mt19937_64 rng(900 + 10 * static_cast<int>(type) + static_cast<int>(op));
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | 0x8040u);  // FTZ | DAZ
  compareIsaReduce(ReduceIsa::Avx2, type, op, rng);
  _mm_setcsr(csr);
}
#endif

INSTANTIATE_TEST_SUITE_P(Float16AndBfloat16, IsaMatchesBaseline,
                         testing::Combine(testing::Values(DataType::Float16, DataType::BFloat16),
                                          testing::ValuesIn(allOps())),
                         [](const auto& info) {
                           return std::string(dataTypeName(std::get<0>(info.param))) + "_" +
                                  redOpName(std::get<1>(info.param));
                         });

TEST(IsaFinishAverage, Avx2MatchesBaseline) {
  if (!isaAvailable(ReduceIsa::Avx2)) GTEST_SKIP() << "no AVX2/F16C on this CPU/build";
  std::mt19937_64 rng(4242);
  compareIsaFinishAverage(ReduceIsa::Avx2, DataType::Float16, rng);
  compareIsaFinishAverage(ReduceIsa::Avx2, DataType::BFloat16, rng);
}

// float16/bfloat16 Sum/Prod pin the NaN payload (unlike float32/float64): a's NaN if a is NaN,
// quieted, in every implementation, with any aliasing, for whole pairs and the odd tail.
TEST(Reduce, Packed16SumProdNaNIsFirstOperand) {
  struct Case {
    DataType type;
    uint16_t nan1, nan2, want;
  };
  const Case cases[] = {{DataType::Float16, 0xFC01u, 0x7E02u, 0xFE01u},
                        {DataType::BFloat16, 0xFF81u, 0x7FC2u, 0xFFC1u}};
  for (ReduceIsa isa : {ReduceIsa::Baseline, ReduceIsa::Avx2}) {
    if (!isaAvailable(isa)) continue;
    for (const Case& c : cases) {
      for (RedOp op : {RedOp::Sum, RedOp::Prod, RedOp::Avg}) {
        for (size_t n : {1, 3, 17, 40}) {
          const std::vector<uint16_t> want(n, c.want);
          std::vector<uint16_t> a(n, c.nan1), b(n, c.nan2), out(n), in_a = a, in_b = b;
          reduceWith(isa, out.data(), a.data(), b.data(), n, c.type, op);
          reduceWith(isa, in_a.data(), in_a.data(), b.data(), n, c.type, op);
          reduceWith(isa, in_b.data(), a.data(), in_b.data(), n, c.type, op);
          EXPECT_EQ(out, want) << dataTypeName(c.type) << " " << redOpName(op) << " n=" << n;
          EXPECT_EQ(in_a, want) << dataTypeName(c.type) << " " << redOpName(op) << " n=" << n;
          EXPECT_EQ(in_b, want) << dataTypeName(c.type) << " " << redOpName(op) << " n=" << n;
        }
      }
    }
  }
}

TEST(ReduceDispatch, SelectsTheBestAvailableIsa) {
  EXPECT_TRUE(isaAvailable(ReduceIsa::Baseline));
  EXPECT_EQ(selectedIsa(), isaAvailable(ReduceIsa::Avx2) ? ReduceIsa::Avx2 : ReduceIsa::Baseline);
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  // GCC knows "f16c" (clang 14 does not): on this build, the AVX2 kernels must be picked
  // whenever the CPU can run them.
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) {
    EXPECT_TRUE(isaAvailable(ReduceIsa::Avx2));
  }
#endif
}

// ---- conversions -------------------------------------------------------------------------

template <Format F>
void exhaustiveRoundTrip(float (*toFloat)(uint16_t), uint16_t (*fromFloat)(float)) {
  const uint16_t quiet_bit = static_cast<uint16_t>(1u << (F.mant_bits - 1));
  int failures = 0;
  for (uint32_t p = 0; p <= 0xFFFF && failures < 10; ++p) {
    const uint16_t h = static_cast<uint16_t>(p);
    const float f = toFloat(h);
    const uint16_t back = fromFloat(f);
    bool ok;
    if (refIsNan(h, F)) {
      // NaN stays NaN: quiet in float32 and back, with its sign and payload.
      ok = std::isnan(f) && (std::bit_cast<uint32_t>(f) & 0x00400000u) != 0 &&
           back == (h | quiet_bit);
    } else {
      const double want = refDecode(h, F);
      ok = static_cast<double>(f) == want && std::signbit(f) == std::signbit(want) && back == h;
    }
    if (!ok) {
      ++failures;
      ADD_FAILURE() << "pattern " << hex(h) << " -> " << f << " -> " << hex(back);
    }
  }
}

TEST(Conversions, HalfExhaustiveRoundTrip) {
  exhaustiveRoundTrip<kHalf>(halfToFloat, floatToHalf);
}

TEST(Conversions, Bfloat16ExhaustiveRoundTrip) {
  exhaustiveRoundTrip<kBf16>(bfloat16ToFloat, floatToBfloat16);
}

// float -> half/bfloat16 on many floats against the reference encoder: random bit patterns,
// plus floats concentrated in the exponent range where the target format rounds and
// overflows/underflows.
template <Format F>
void randomNarrowing(uint16_t (*fromFloat)(float), int min_exp, int max_exp) {
  std::mt19937_64 rng(F.mant_bits);
  int failures = 0;
  for (int i = 0; i < 1'000'000 && failures < 10; ++i) {
    uint32_t bits = static_cast<uint32_t>(rng());
    if (i % 2) {
      const uint32_t e = min_exp + static_cast<uint32_t>(rng() % (max_exp - min_exp + 1));
      bits = (bits & 0x807FFFFFu) | (e << 23);
    }
    const float f = std::bit_cast<float>(bits);
    const uint16_t got = fromFloat(f);
    const uint16_t want = refEncode(f, F);
    const bool ok = refIsNan(want, F) ? refIsNan(got, F) : got == want;
    if (!ok) {
      ++failures;
      ADD_FAILURE() << "float bits " << hex(bits) << " got " << hex(got) << " want " << hex(want);
    }
  }
}

TEST(Conversions, FloatToHalfMatchesReference) {
  randomNarrowing<kHalf>(floatToHalf, 127 - 26, 127 + 17);
}

TEST(Conversions, FloatToBfloat16MatchesReference) {
  // Includes float subnormals (exponent field 0) and the top of the range.
  randomNarrowing<kBf16>(floatToBfloat16, 0, 254);
}

}  // namespace
}  // namespace sharc::core

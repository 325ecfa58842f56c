// Tests for the CUDA reduction kernel of kernels/ (kernels::reduce) on device 0; every test
// skips without a CUDA device (kernel_test_support.hpp).
//
// Reductions are checked against the host references of reduce_reference.hpp: exactly against
// a host model of the documented arithmetic and, for floating types, within a tolerance of a
// float64 reference. Outside the reduced range the output buffer must be unchanged (sentinel /
// original input).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "core/reduce.hpp"
#include "kernel_test_support.hpp"
#include "kernels/kernels.hpp"
#include "reduce_reference.hpp"

namespace sharc {
// Test parameters by name in gtest's output.
[[maybe_unused]] static void PrintTo(DataType type, std::ostream* os) {
  *os << dataTypeName(type);
}
[[maybe_unused]] static void PrintTo(RedOp op, std::ostream* os) {
  *os << redOpName(op);
}
}  // namespace sharc

namespace sharc::kernels {
namespace {

using namespace sharc::kernels::testing;

std::string paramName(DataType type) {
  return dataTypeName(type);
}

// Every element type, in enum order; suites of one type parameter are named by it.
auto everyType() {
  return ::testing::Values(DataType::Int8, DataType::Uint8, DataType::Int32, DataType::Uint32,
                           DataType::Int64, DataType::Uint64, DataType::Float16, DataType::Float32,
                           DataType::Float64, DataType::BFloat16);
}
std::string typeParamName(const ::testing::TestParamInfo<DataType>& info) {
  return paramName(info.param);
}

// ---- argument checking ---------------------------------------------------------------------

using KernelArgs = DeviceTest<::testing::Test>;

TEST_F(KernelArgs, ReduceRejectsBadArguments) {
  char* a = deviceAlloc(1024);
  char* b = deviceAlloc(1024);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const void* ins[kMaxReduceInputs + 1] = {a, b, a, b, a, b, a, b, a};
  for (int n : {0, -1, kMaxReduceInputs + 1, 1000}) {
    EXPECT_EQ(reduce(a, ins, n, 16, DataType::Float32, RedOp::Sum, 1, stream_),
              cudaErrorInvalidValue)
        << "n " << n;
    EXPECT_EQ(reduce(a, ins, n, 0, DataType::Float32, RedOp::Sum, 1, stream_),
              cudaErrorInvalidValue)
        << "n " << n << ", count 0";
  }
  EXPECT_EQ(reduce(a, ins, 2, 16, static_cast<DataType>(kNumDataTypes), RedOp::Sum, 1, stream_),
            cudaErrorInvalidValue);
  EXPECT_EQ(reduce(a, ins, 2, 16, DataType::Float32, static_cast<RedOp>(kNumRedOps), 1, stream_),
            cudaErrorInvalidValue);
  EXPECT_EQ(reduce(nullptr, ins, 2, 16, DataType::Float32, RedOp::Sum, 1, stream_),
            cudaErrorInvalidValue);
  EXPECT_EQ(reduce(a, nullptr, 2, 16, DataType::Float32, RedOp::Sum, 1, stream_),
            cudaErrorInvalidValue);
  const void* withNull[2] = {a, nullptr};
  EXPECT_EQ(reduce(b, withNull, 2, 16, DataType::Float32, RedOp::Sum, 1, stream_),
            cudaErrorInvalidValue);
  // count 0 launches nothing and succeeds, whatever the pointers.
  EXPECT_EQ(reduce(nullptr, nullptr, 2, 0, DataType::Float32, RedOp::Sum, 1, stream_), cudaSuccess);
  // All n in [1, 8] are accepted.
  for (int n = 1; n <= kMaxReduceInputs; ++n) {
    EXPECT_EQ(reduce(a, ins, n, 16, DataType::Float32, RedOp::Sum, 1, stream_), cudaSuccess)
        << "n " << n;
  }
  CUDA_ASSERT(cudaStreamSynchronize(stream_));
}

// ---- the reduction sweep: type x op x n x count x alignment / aliasing --------------------

constexpr size_t kMaxCount = (size_t{1} << 20) + 3;
constexpr size_t kCounts[] = {0, 1, 7, 1001, kMaxCount};
constexpr int kInputCounts[] = {1, 2, 3, 8};

// Where the call's buffers start, in elements from 16-byte aligned allocations.
struct Layout {
  const char* name;
  size_t inOffset;   // every input
  size_t outOffset;  // the output (== inOffset when in place)
  bool inPlace;      // out == inputs[0]
};
constexpr Layout kLayouts[] = {
    {"aligned", 0, 0, false},
    {"every pointer + 1 element (misaligned alike: head, then 16-byte words)", 1, 1, false},
    {"output + 1 element (misaligned differently: element by element)", 0, 1, false},
    {"in place (out == inputs[0])", 0, 0, true},
    {"in place, every pointer + 1 element", 1, 1, true},
};

class ReduceSweep : public DeviceTest<::testing::TestWithParam<std::tuple<DataType, RedOp>>> {
 protected:
  template <typename M>
  void sweep(RedOp op) {
    using T = typename M::T;
    const size_t length = kMaxCount + 2;  // room for an offset of one and a guard element
    Rng rng{0x5EEDull * 131 + static_cast<uint64_t>(M::kType) * 17 + static_cast<uint64_t>(op)};
    std::vector<std::vector<T>> in(kMaxReduceInputs, std::vector<T>(length));
    for (auto& input : in) {
      for (T& x : input) x = randomInput<M>(rng, op);
    }
    char* dIn[kMaxReduceInputs];
    for (int k = 0; k < kMaxReduceInputs; ++k) {
      dIn[k] = deviceAlloc(bytesOf<M>(length));
      ASSERT_NE(dIn[k], nullptr);
      CUDA_ASSERT(cudaMemcpy(dIn[k], in[k].data(), bytesOf<M>(length), cudaMemcpyHostToDevice));
    }
    char* dOut = deviceAlloc(bytesOf<M>(length));
    char* dScratch = deviceAlloc(bytesOf<M>(length));
    ASSERT_NE(dOut, nullptr);
    ASSERT_NE(dScratch, nullptr);
    std::vector<T> got(length);
    T sentinel;
    std::memset(&sentinel, 0xA5, sizeof sentinel);

    for (int n : kInputCounts) {
      const uint64_t divisor = static_cast<uint64_t>(n);
      const Expected<M> expected = computeExpected<M>(in, n, op, divisor, length);
      for (size_t count : kCounts) {
        for (const Layout& layout : kLayouts) {
          SCOPED_TRACE(::testing::Message()
                       << dataTypeName(M::kType) << " " << redOpName(op) << ", n " << n
                       << ", count " << count << ", " << layout.name);
          const bool inPlace = layout.inPlace;
          const size_t inOff = layout.inOffset;
          const size_t off = layout.outOffset;
          char* base = inPlace ? dScratch : dOut;
          if (inPlace) {
            CUDA_ASSERT(cudaMemcpy(dScratch, dIn[0], bytesOf<M>(length), cudaMemcpyDeviceToDevice));
          } else {
            CUDA_ASSERT(cudaMemset(dOut, 0xA5, bytesOf<M>(length)));
          }
          char* out = base + bytesOf<M>(off);
          const void* ins[kMaxReduceInputs] = {};
          ins[0] = inPlace ? out : dIn[0] + bytesOf<M>(inOff);
          for (int k = 1; k < n; ++k) ins[k] = dIn[k] + bytesOf<M>(inOff);
          ASSERT_EQ(reduce(out, ins, n, count, M::kType, op, divisor, stream_), cudaSuccess);
          CUDA_ASSERT(cudaStreamSynchronize(stream_));
          const size_t span = off + count + 1;
          CUDA_ASSERT(cudaMemcpy(got.data(), base, bytesOf<M>(span), cudaMemcpyDeviceToHost));
          // Untouched around the result: the element before (offset output) and the one after.
          for (size_t i : {size_t{0}, off + count}) {
            if (i >= off && i < off + count) continue;
            const T want = inPlace ? in[0][i] : sentinel;
            ASSERT_EQ(std::memcmp(&got[i], &want, sizeof(T)), 0)
                << "element " << i << " of the buffer, outside the result, was written";
          }
          // Output element j is the reduction of input elements inOff + j.
          ASSERT_EQ(checkResults<M>(got.data() + off, expected, inOff, count), 0u);
        }
      }
    }
  }
};

TEST_P(ReduceSweep, AllCountsInputsAndLayouts) {
  const auto [type, op] = GetParam();
  withModel(type, [&](auto model) { sweep<decltype(model)>(op); });
}

INSTANTIATE_TEST_SUITE_P(Kernels, ReduceSweep,
                         ::testing::Combine(everyType(),
                                            ::testing::Values(RedOp::Sum, RedOp::Prod, RedOp::Max,
                                                              RedOp::Min, RedOp::Avg)),
                         [](const ::testing::TestParamInfo<std::tuple<DataType, RedOp>>& info) {
                           return paramName(std::get<0>(info.param)) + "_" +
                                  redOpName(std::get<1>(info.param));
                         });

// ---- Avg divisors, including those core::finishAverage treats specially -------------------

class AvgDivisors : public DeviceTest<::testing::TestWithParam<DataType>> {
 protected:
  template <typename M>
  void run() {
    using T = typename M::T;
    constexpr size_t kCount = 1001;
    constexpr int kN = 3;
    Rng rng{0xA7Eull + static_cast<uint64_t>(M::kType)};
    std::vector<std::vector<T>> in(kN, std::vector<T>(kCount));
    for (auto& input : in) {
      for (T& x : input) x = randomInput<M>(rng, RedOp::Avg);
    }
    // Extremes of the integer range, where the huge-divisor rules differ.
    if constexpr (!M::kFloating) {
      in[0][0] = std::numeric_limits<T>::min();
      in[1][0] = 0;
      in[2][0] = 0;
      in[0][1] = std::numeric_limits<T>::max();
      in[1][1] = 0;
      in[2][1] = 0;
    }
    char* dIn[kN];
    const void* ins[kN];
    for (int k = 0; k < kN; ++k) {
      dIn[k] = deviceAlloc(bytesOf<M>(kCount));
      ASSERT_NE(dIn[k], nullptr);
      CUDA_ASSERT(cudaMemcpy(dIn[k], in[k].data(), bytesOf<M>(kCount), cudaMemcpyHostToDevice));
      ins[k] = dIn[k];
    }
    char* dOut = deviceAlloc(bytesOf<M>(kCount));
    ASSERT_NE(dOut, nullptr);
    std::vector<T> got(kCount);
    const uint64_t kDivisors[] = {0,
                                  1,
                                  2,
                                  3,
                                  7,
                                  127,
                                  128,
                                  129,
                                  255,
                                  256,
                                  65536,
                                  uint64_t{1} << 31,
                                  (uint64_t{1} << 31) + 1,
                                  uint64_t{1} << 32,
                                  uint64_t{1} << 63,
                                  (uint64_t{1} << 63) + 1,
                                  ~uint64_t{0}};
    for (uint64_t divisor : kDivisors) {
      SCOPED_TRACE(::testing::Message() << dataTypeName(M::kType) << " avg, divisor " << divisor);
      const Expected<M> expected = computeExpected<M>(in, kN, RedOp::Avg, divisor, kCount);
      ASSERT_EQ(reduce(dOut, ins, kN, kCount, M::kType, RedOp::Avg, divisor, stream_), cudaSuccess);
      CUDA_ASSERT(cudaStreamSynchronize(stream_));
      CUDA_ASSERT(cudaMemcpy(got.data(), dOut, bytesOf<M>(kCount), cudaMemcpyDeviceToHost));
      ASSERT_EQ(checkResults<M>(got.data(), expected, 0, kCount), 0u);
    }
  }
};

TEST_P(AvgDivisors, FollowFinishAverageRules) {
  withModel(GetParam(), [&](auto model) { run<decltype(model)>(); });
}

INSTANTIATE_TEST_SUITE_P(Kernels, AvgDivisors, everyType(), typeParamName);

// ---- NaN propagation of Max/Min ------------------------------------------------------------

class NanPropagation : public DeviceTest<::testing::TestWithParam<DataType>> {
 protected:
  template <typename M>
  void run() {
    if constexpr (M::kFloating) {
      using T = typename M::T;
      constexpr size_t kCount = 4099;
      constexpr int kN = 3;
      Rng rng{0x4A4Eull + static_cast<uint64_t>(M::kType)};
      std::vector<std::vector<T>> in(kN, std::vector<T>(kCount + 1));
      for (auto& input : in) {
        for (T& x : input) x = M::fromDouble(rng.uniform(-1e3, 1e3));
      }
      // Element i (i % 5 != 4) has a NaN in input i % 3 and, for i % 5 == 1, also in the next.
      // An infinity next to a NaN must not hide it either.
      for (size_t i = 0; i <= kCount; ++i) {
        if (i % 5 == 4) continue;
        in[i % 3][i] = M::nan();
        if (i % 5 == 1) in[(i + 1) % 3][i] = M::nan();
        if (i % 5 == 2) in[(i + 1) % 3][i] = M::inf(i % 2);
      }
      std::vector<char*> dIn(kN);
      for (int k = 0; k < kN; ++k) {
        dIn[k] = deviceAlloc(bytesOf<M>(kCount + 1));
        ASSERT_NE(dIn[k], nullptr);
        CUDA_ASSERT(
            cudaMemcpy(dIn[k], in[k].data(), bytesOf<M>(kCount + 1), cudaMemcpyHostToDevice));
      }
      char* dOut = deviceAlloc(bytesOf<M>(kCount + 1));
      ASSERT_NE(dOut, nullptr);
      std::vector<T> got(kCount + 1);
      for (RedOp op : {RedOp::Max, RedOp::Min}) {
        const Expected<M> expected = computeExpected<M>(in, kN, op, 1, kCount + 1);
        for (size_t off : {size_t{0}, size_t{1}}) {
          SCOPED_TRACE(::testing::Message()
                       << dataTypeName(M::kType) << " " << redOpName(op) << ", offset " << off);
          const void* ins[kN];
          for (int k = 0; k < kN; ++k) ins[k] = dIn[k] + bytesOf<M>(off);
          const size_t count = kCount + 1 - off;
          ASSERT_EQ(reduce(dOut + bytesOf<M>(off), ins, kN, count, M::kType, op, 1, stream_),
                    cudaSuccess);
          CUDA_ASSERT(cudaStreamSynchronize(stream_));
          CUDA_ASSERT(cudaMemcpy(got.data(), dOut + bytesOf<M>(off), bytesOf<M>(count),
                                 cudaMemcpyDeviceToHost));
          size_t nans = 0;
          for (size_t j = 0; j < count; ++j) {
            const size_t i = off + j;
            const bool wantNan = i % 5 != 4;
            const bool isNan = std::isnan(static_cast<double>(M::load(got[j])));
            nans += isNan;
            if (wantNan != isNan) {
              ADD_FAILURE() << "element " << i << ": NaN expected " << wantNan << ", got "
                            << show<M>(got[j]);
              break;
            }
          }
          EXPECT_GT(nans, count / 2);
          EXPECT_EQ(checkResults<M>(got.data(), expected, off, count), 0u);
        }
      }
    } else {
      GTEST_SKIP() << "integer types have no NaN";
    }
  }
};

TEST_P(NanPropagation, MaxMin) {
  withModel(GetParam(), [&](auto model) { run<decltype(model)>(); });
}

INSTANTIATE_TEST_SUITE_P(Kernels, NanPropagation,
                         ::testing::Values(DataType::Float16, DataType::Float32, DataType::Float64,
                                           DataType::BFloat16),
                         typeParamName);

// ---- two inputs: bit for bit what the host reduction (core::reduce) gives ------------------
//
// With two inputs there is one operation and one rounding on either side, so results must be
// identical for any bit patterns (NaN payloads aside), and any mix of pointer alignments.

class MatchesHost : public DeviceTest<::testing::TestWithParam<DataType>> {};

TEST_P(MatchesHost, TwoInputsAnyBits) {
  const DataType type = GetParam();
  const size_t size = dataTypeSize(type);
  constexpr size_t kCount = 4099;
  const size_t bytes = (kCount + 1) * size;
  Rng rng{0x4057ull + static_cast<uint64_t>(type)};
  std::vector<unsigned char> a(bytes), b(bytes);
  rng.fill(a);
  rng.fill(b);
  char* dA = deviceAlloc(bytes);
  char* dB = deviceAlloc(bytes);
  char* dOut = deviceAlloc(bytes);
  ASSERT_NE(dA, nullptr);
  ASSERT_NE(dB, nullptr);
  ASSERT_NE(dOut, nullptr);
  CUDA_ASSERT(cudaMemcpy(dA, a.data(), bytes, cudaMemcpyHostToDevice));
  CUDA_ASSERT(cudaMemcpy(dB, b.data(), bytes, cudaMemcpyHostToDevice));
  std::vector<unsigned char> want(kCount * size), got(kCount * size);
  const bool floating = type == DataType::Float16 || type == DataType::BFloat16 ||
                        type == DataType::Float32 || type == DataType::Float64;
  auto isNan = [&](const unsigned char* p) {
    switch (type) {
      case DataType::Float16: {
        uint16_t v;
        std::memcpy(&v, p, 2);
        return std::isnan(core::halfToFloat(v));
      }
      case DataType::BFloat16: {
        uint16_t v;
        std::memcpy(&v, p, 2);
        return std::isnan(core::bfloat16ToFloat(v));
      }
      case DataType::Float32: {
        float v;
        std::memcpy(&v, p, 4);
        return std::isnan(v);
      }
      case DataType::Float64: {
        double v;
        std::memcpy(&v, p, 8);
        return std::isnan(v);
      }
      default: return false;
    }
  };
  for (RedOp op : {RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min}) {
    for (int offsets = 0; offsets < 8; ++offsets) {
      const size_t offA = (offsets & 1) * size;
      const size_t offB = ((offsets >> 1) & 1) * size;
      const size_t offOut = ((offsets >> 2) & 1) * size;
      SCOPED_TRACE(::testing::Message()
                   << dataTypeName(type) << " " << redOpName(op) << ", byte offsets a " << offA
                   << " b " << offB << " out " << offOut);
      core::reduce(want.data(), a.data() + offA, b.data() + offB, kCount, type, op);
      const void* ins[2] = {dA + offA, dB + offB};
      ASSERT_EQ(reduce(dOut + offOut, ins, 2, kCount, type, op, 1, stream_), cudaSuccess);
      CUDA_ASSERT(cudaStreamSynchronize(stream_));
      CUDA_ASSERT(cudaMemcpy(got.data(), dOut + offOut, kCount * size, cudaMemcpyDeviceToHost));
      size_t wrong = 0;
      for (size_t i = 0; i < kCount; ++i) {
        const unsigned char* w = want.data() + i * size;
        const unsigned char* g = got.data() + i * size;
        const bool same = (floating && isNan(w)) ? isNan(g) : std::memcmp(w, g, size) == 0;
        if (!same && ++wrong <= 4) ADD_FAILURE() << "element " << i << " differs";
      }
      ASSERT_EQ(wrong, 0u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, MatchesHost, everyType(), typeParamName);

}  // namespace
}  // namespace sharc::kernels

// Tests for the CUDA kernels of kernels/ (kernels::reduce, copyBatch, copy) on device 0.
//
// Every test skips (GTEST_SKIP, "no CUDA device: ...") where cudaGetDeviceCount fails or finds
// no device; nothing touches CUDA before a test's SetUp, so listing the tests works anywhere.
//
// Reductions are checked two ways against host references computed from the same inputs:
//  - exactly, against a host model of the documented arithmetic (integers in their own
//    wrapped arithmetic with truncating division; floating types accumulated over the inputs
//    in order in float32 (float16, bfloat16, float32) or float64, divided there for Avg and
//    rounded once): every bit of every element, NaN results only as NaN;
//  - within a tolerance, for floating types, against a float64 reference (sum, product,
//    NaN-propagating max/min of the exact input values): rel * n * (sum of |inputs|, or |product|)
//    with rel 1e-3 (float16), 8e-3 (bfloat16), 1e-6 (float32), 1e-12 (float64); max/min exact.
// Outside the reduced range the output buffer must be unchanged (sentinel / original input).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <ostream>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "core/reduce.hpp"
#include "kernels/kernels.hpp"

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

#define CUDA_ASSERT(call) ASSERT_EQ((call), cudaSuccess) << #call

// ---- device availability and the fixture ---------------------------------------------------

std::string findDeviceProblem() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky error for the next test
    return std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
  }
  if (count <= 0) return "cudaGetDeviceCount found 0 devices";
  return {};
}

// Empty when a device is usable; else why not. Asked once, at the first test's SetUp.
const std::string& deviceProblem() {
  static const std::string problem = findDeviceProblem();
  return problem;
}

template <typename Base>
class DeviceTest : public Base {
 protected:
  void SetUp() override {
    if (!deviceProblem().empty()) GTEST_SKIP() << "no CUDA device: " << deviceProblem();
    CUDA_ASSERT(cudaSetDevice(0));
    CUDA_ASSERT(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }

  void TearDown() override {
    for (void* p : allocations_) (void)cudaFree(p);
    allocations_.clear();
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }

  // Device memory freed at TearDown; nullptr (with a test failure) if cudaMalloc fails.
  char* deviceAlloc(size_t bytes) {
    void* p = nullptr;
    const cudaError_t status = cudaMalloc(&p, bytes);
    EXPECT_EQ(status, cudaSuccess) << "cudaMalloc(" << bytes << " bytes)";
    if (status != cudaSuccess) return nullptr;
    allocations_.push_back(p);
    return static_cast<char*>(p);
  }

  cudaStream_t stream_ = nullptr;

 private:
  std::vector<void*> allocations_;
};

// ---- random numbers (splitmix64: fast and reproducible) -----------------------------------

struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform(double lo, double hi) {  // [lo, hi)
    return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1p-53;
  }
  void fill(std::vector<unsigned char>& bytes) {
    for (size_t i = 0; i < bytes.size(); i += 8) {
      const uint64_t r = next();
      std::memcpy(bytes.data() + i, &r, std::min<size_t>(8, bytes.size() - i));
    }
  }
};

// ---- host models of the element types ------------------------------------------------------
//
// T: the stored element; Acc: what the kernels reduce in (see kernels.hpp). load/store convert
// between them exactly as documented (float16/bfloat16 through sharc's host conversions,
// round to nearest-even).

template <typename T>
using WrapType =
    std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

template <typename S, DataType D>
struct IntModel {
  using T = S;
  using Acc = S;
  static constexpr DataType kType = D;
  static constexpr bool kFloating = false;
  static Acc load(T v) { return v; }
  static T store(Acc a) { return a; }
  static uint64_t bits(T v) {
    return static_cast<uint64_t>(static_cast<std::make_unsigned_t<T>>(v));
  }
  static T random(Rng& rng, RedOp) { return static_cast<T>(rng.next()); }
  // Truncating division by any divisor, computed exactly in wider arithmetic.
  static Acc divide(Acc x, uint64_t d) {
    if constexpr (std::is_unsigned_v<T>) {
      return static_cast<T>(static_cast<uint64_t>(x) / d);
    } else {
      return static_cast<T>(static_cast<__int128>(x) / static_cast<__int128>(d));
    }
  }
};

// float16 and bfloat16: 16-bit storage, float32 arithmetic.
template <DataType D>
struct Small16Model {
  using T = uint16_t;
  using Acc = float;
  static constexpr DataType kType = D;
  static constexpr bool kFloating = true;
  static constexpr bool kHalf = D == DataType::Float16;
  static constexpr double kRel = kHalf ? 1e-3 : 8e-3;
  static double denormMin() { return kHalf ? 0x1p-24 : 0x1p-133; }
  static float load(T v) { return kHalf ? core::halfToFloat(v) : core::bfloat16ToFloat(v); }
  static T store(float a) { return kHalf ? core::floatToHalf(a) : core::floatToBfloat16(a); }
  static uint64_t bits(T v) { return v; }
  static T nan() { return kHalf ? 0x7E00 : 0x7FC0; }
  static T inf(bool negative) {
    const T positive = kHalf ? 0x7C00 : 0x7F80;
    return negative ? static_cast<T>(positive | 0x8000) : positive;
  }
  static T fromDouble(double x) { return store(static_cast<float>(x)); }
  static Acc divide(Acc x, uint64_t d) { return x / static_cast<float>(d); }
};

template <typename F, DataType D>
struct FloatModel {
  using T = F;
  using Acc = F;
  static constexpr DataType kType = D;
  static constexpr bool kFloating = true;
  static constexpr double kRel = sizeof(F) == 4 ? 1e-6 : 1e-12;
  static double denormMin() { return std::numeric_limits<F>::denorm_min(); }
  static F load(T v) { return v; }
  static T store(F a) { return a; }
  static uint64_t bits(T v) {
    if constexpr (sizeof(F) == 4) {
      uint32_t b;
      std::memcpy(&b, &v, sizeof b);
      return b;
    } else {
      uint64_t b;
      std::memcpy(&b, &v, sizeof b);
      return b;
    }
  }
  static T nan() { return std::numeric_limits<F>::quiet_NaN(); }
  static T inf(bool negative) {
    return negative ? -std::numeric_limits<F>::infinity() : std::numeric_limits<F>::infinity();
  }
  static T fromDouble(double x) { return static_cast<F>(x); }
  static Acc divide(Acc x, uint64_t d) { return x / static_cast<F>(d); }
};

using Int8Model = IntModel<int8_t, DataType::Int8>;
using Uint8Model = IntModel<uint8_t, DataType::Uint8>;
using Int32Model = IntModel<int32_t, DataType::Int32>;
using Uint32Model = IntModel<uint32_t, DataType::Uint32>;
using Int64Model = IntModel<int64_t, DataType::Int64>;
using Uint64Model = IntModel<uint64_t, DataType::Uint64>;
using HalfModel = Small16Model<DataType::Float16>;
using Bf16Model = Small16Model<DataType::BFloat16>;
using Float32Model = FloatModel<float, DataType::Float32>;
using Float64Model = FloatModel<double, DataType::Float64>;

template <typename F>
void withModel(DataType type, F&& f) {
  switch (type) {
    case DataType::Int8: f(Int8Model{}); return;
    case DataType::Uint8: f(Uint8Model{}); return;
    case DataType::Int32: f(Int32Model{}); return;
    case DataType::Uint32: f(Uint32Model{}); return;
    case DataType::Int64: f(Int64Model{}); return;
    case DataType::Uint64: f(Uint64Model{}); return;
    case DataType::Float16: f(HalfModel{}); return;
    case DataType::Float32: f(Float32Model{}); return;
    case DataType::Float64: f(Float64Model{}); return;
    case DataType::BFloat16: f(Bf16Model{}); return;
  }
  FAIL() << "invalid type";
}

template <typename A>
A applyOp(RedOp op, A a, A b) {
  switch (op) {
    case RedOp::Sum:
    case RedOp::Avg:
      if constexpr (std::is_integral_v<A>) {
        return static_cast<A>(static_cast<WrapType<A>>(a) + static_cast<WrapType<A>>(b));
      } else {
        return a + b;
      }
    case RedOp::Prod:
      if constexpr (std::is_integral_v<A>) {
        return static_cast<A>(static_cast<WrapType<A>>(a) * static_cast<WrapType<A>>(b));
      } else {
        return a * b;
      }
    case RedOp::Max:
      if constexpr (std::is_integral_v<A>) {
        return a > b ? a : b;
      } else {
        return (a > b || a != a) ? a : b;
      }
    case RedOp::Min:
      if constexpr (std::is_integral_v<A>) {
        return a < b ? a : b;
      } else {
        return (a < b || a != a) ? a : b;
      }
  }
  return a;
}

// A random input: integers any bit pattern; floating types a value in [-4, 4) (products: a
// magnitude in [0.5, 2) so that eight of them stay in range), with rare NaNs and infinities.
template <typename M>
typename M::T randomInput(Rng& rng, RedOp op) {
  if constexpr (!M::kFloating) {
    return M::random(rng, op);
  } else {
    const uint64_t r = rng.next();
    const uint64_t special = r % 1000;
    if (special < 2) return M::nan();
    if (special < 4) return M::inf((r >> 32) & 1);
    if (op == RedOp::Prod) {
      const double magnitude = rng.uniform(0.5, 2.0);
      return M::fromDouble(((r >> 33) & 1) ? -magnitude : magnitude);
    }
    return M::fromDouble(rng.uniform(-4.0, 4.0));
  }
}

// Expected results for elements [0, length) of inputs[0..n).
template <typename M>
struct Expected {
  std::vector<typename M::T> exact;  // the host model of the kernel's arithmetic
  std::vector<double> value;         // float64 reference (floating types)
  std::vector<double> bound;         // its allowed absolute error
};

template <typename M>
Expected<M> computeExpected(const std::vector<std::vector<typename M::T>>& in, int n, RedOp op,
                            uint64_t divisor, size_t length) {
  Expected<M> e;
  e.exact.resize(length);
  const bool average = op == RedOp::Avg && divisor > 1;
  for (size_t i = 0; i < length; ++i) {
    typename M::Acc acc = M::load(in[0][i]);
    for (int k = 1; k < n; ++k) acc = applyOp(op, acc, M::load(in[k][i]));
    if (average) acc = M::divide(acc, divisor);
    e.exact[i] = M::store(acc);
  }
  if constexpr (M::kFloating) {
    e.value.resize(length);
    e.bound.resize(length);
    for (size_t i = 0; i < length; ++i) {
      double v = static_cast<double>(M::load(in[0][i]));
      double absSum = std::fabs(v);
      for (int k = 1; k < n; ++k) {
        const double x = static_cast<double>(M::load(in[k][i]));
        absSum += std::fabs(x);
        switch (op) {
          case RedOp::Sum:
          case RedOp::Avg: v += x; break;
          case RedOp::Prod: v *= x; break;
          case RedOp::Max: v = (v > x || std::isnan(v)) ? v : x; break;
          case RedOp::Min: v = (v < x || std::isnan(v)) ? v : x; break;
        }
      }
      double scale = op == RedOp::Prod ? std::fabs(v) : absSum;
      if (average) {
        v /= static_cast<double>(divisor);
        scale /= static_cast<double>(divisor);
      }
      e.value[i] = v;
      e.bound[i] =
          (op == RedOp::Max || op == RedOp::Min) ? 0.0 : M::kRel * n * scale + M::denormMin();
    }
  }
  return e;
}

template <typename M>
std::string show(typename M::T v) {
  std::ostringstream s;
  if constexpr (M::kFloating) {
    s.precision(17);
    s << static_cast<double>(M::load(v));
  } else {
    s << +v;
  }
  s << " (bits 0x" << std::hex << M::bits(v) << ")";
  return s.str();
}

// Compares got[j] with expected element first + j for j in [0, count); reports the first few
// mismatches. Returns the number of wrong elements.
template <typename M>
size_t checkResults(const typename M::T* got, const Expected<M>& e, size_t first, size_t count) {
  size_t wrong = 0;
  for (size_t j = 0; j < count; ++j) {
    const size_t i = first + j;
    const typename M::T g = got[j];
    const typename M::T x = e.exact[i];
    bool ok;
    const char* why;  // no allocation per element: details only for a mismatch
    if constexpr (M::kFloating) {
      const double gv = static_cast<double>(M::load(g));
      const double xv = static_cast<double>(M::load(x));
      const double rv = e.value[i];
      if (std::isnan(xv) || std::isnan(rv)) {
        ok = std::isnan(gv) && std::isnan(xv) && std::isnan(rv);
        why = "NaN expected";
      } else if (M::bits(g) != M::bits(x)) {
        ok = false;
        why = "bits differ from the host model";
      } else {
        ok = std::isinf(rv) ? gv == rv : std::fabs(gv - rv) <= e.bound[i];
        why = "outside the float64 reference's bound";
      }
    } else {
      ok = g == x;
      why = "integer result differs";
    }
    if (!ok && ++wrong <= 4) {
      std::ostringstream detail;
      if constexpr (M::kFloating) {
        detail.precision(17);
        detail << " (float64 reference " << e.value[i] << " +- " << e.bound[i] << ")";
      }
      ADD_FAILURE() << "element " << j << ": got " << show<M>(g) << ", expected " << show<M>(x)
                    << ": " << why << detail.str();
    }
  }
  if (wrong > 4) ADD_FAILURE() << wrong << " wrong elements in all";
  return wrong;
}

// Bytes of `count` elements of T.
template <typename M>
constexpr size_t bytesOf(size_t count) {
  return count * sizeof(typename M::T);
}

std::string paramName(DataType type) {
  return dataTypeName(type);
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

TEST_F(KernelArgs, CopyRejectsBadArguments) {
  char* a = deviceAlloc(1024);
  char* b = deviceAlloc(1024);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  std::vector<CopyPiece> pieces(kMaxCopyPieces + 1, CopyPiece{b, a, 8});
  EXPECT_EQ(copyBatch(pieces.data(), -1, stream_), cudaErrorInvalidValue);
  EXPECT_EQ(copyBatch(pieces.data(), kMaxCopyPieces + 1, stream_), cudaErrorInvalidValue);
  EXPECT_EQ(copyBatch(nullptr, 1, stream_), cudaErrorInvalidValue);
  EXPECT_EQ(copyBatch(nullptr, 0, stream_), cudaSuccess);
  const CopyPiece nullDst{nullptr, a, 8};
  EXPECT_EQ(copyBatch(&nullDst, 1, stream_), cudaErrorInvalidValue);
  const CopyPiece nullSrc{b, nullptr, 8};
  EXPECT_EQ(copyBatch(&nullSrc, 1, stream_), cudaErrorInvalidValue);
  // Empty pieces need no pointers.
  const CopyPiece empty{nullptr, nullptr, 0};
  EXPECT_EQ(copyBatch(&empty, 1, stream_), cudaSuccess);
  EXPECT_EQ(copy(nullptr, nullptr, 0, stream_), cudaSuccess);
  EXPECT_EQ(copy(b, nullptr, 1, stream_), cudaErrorInvalidValue);
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

INSTANTIATE_TEST_SUITE_P(
    Kernels, ReduceSweep,
    ::testing::Combine(
        ::testing::Values(DataType::Int8, DataType::Uint8, DataType::Int32, DataType::Uint32,
                          DataType::Int64, DataType::Uint64, DataType::Float16, DataType::Float32,
                          DataType::Float64, DataType::BFloat16),
        ::testing::Values(RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min, RedOp::Avg)),
    [](const ::testing::TestParamInfo<std::tuple<DataType, RedOp>>& info) {
      return paramName(std::get<0>(info.param)) + "_" + redOpName(std::get<1>(info.param));
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

INSTANTIATE_TEST_SUITE_P(Kernels, AvgDivisors,
                         ::testing::Values(DataType::Int8, DataType::Uint8, DataType::Int32,
                                           DataType::Uint32, DataType::Int64, DataType::Uint64,
                                           DataType::Float16, DataType::Float32, DataType::Float64,
                                           DataType::BFloat16),
                         [](const ::testing::TestParamInfo<DataType>& info) {
                           return paramName(info.param);
                         });

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
                         [](const ::testing::TestParamInfo<DataType>& info) {
                           return paramName(info.param);
                         });

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

INSTANTIATE_TEST_SUITE_P(Kernels, MatchesHost,
                         ::testing::Values(DataType::Int8, DataType::Uint8, DataType::Int32,
                                           DataType::Uint32, DataType::Int64, DataType::Uint64,
                                           DataType::Float16, DataType::Float32, DataType::Float64,
                                           DataType::BFloat16),
                         [](const ::testing::TestParamInfo<DataType>& info) {
                           return paramName(info.param);
                         });

// ---- batched copies ------------------------------------------------------------------------

class CopyKernels : public DeviceTest<::testing::Test> {
 protected:
  // Copies `pieces` (offsets into a source and a destination buffer) with copyBatch, or
  // copy() when `single`, and checks the whole destination byte by byte: pieces copied,
  // everything else unchanged.
  struct Piece {
    size_t dstOffset;
    size_t srcOffset;
    size_t bytes;
  };

  void runPieces(const std::vector<Piece>& pieces, bool single = false) {
    size_t srcSize = 1, dstSize = 1;
    for (const Piece& p : pieces) {
      srcSize = std::max(srcSize, p.srcOffset + p.bytes);
      dstSize = std::max(dstSize, p.dstOffset + p.bytes);
    }
    Rng rng{0xC0B1ull + pieces.size()};
    std::vector<unsigned char> src(srcSize), dst(dstSize);
    rng.fill(src);
    rng.fill(dst);
    char* dSrc = deviceAlloc(srcSize);
    char* dDst = deviceAlloc(dstSize);
    ASSERT_NE(dSrc, nullptr);
    ASSERT_NE(dDst, nullptr);
    CUDA_ASSERT(cudaMemcpy(dSrc, src.data(), srcSize, cudaMemcpyHostToDevice));
    CUDA_ASSERT(cudaMemcpy(dDst, dst.data(), dstSize, cudaMemcpyHostToDevice));
    std::vector<CopyPiece> batch;
    for (const Piece& p : pieces) {
      batch.push_back(CopyPiece{dDst + p.dstOffset, dSrc + p.srcOffset, p.bytes});
      std::memcpy(dst.data() + p.dstOffset, src.data() + p.srcOffset, p.bytes);
    }
    if (single) {
      ASSERT_EQ(pieces.size(), 1u);
      ASSERT_EQ(copy(batch[0].dst, batch[0].src, batch[0].bytes, stream_), cudaSuccess);
    } else {
      ASSERT_EQ(copyBatch(batch.data(), static_cast<int>(batch.size()), stream_), cudaSuccess);
    }
    CUDA_ASSERT(cudaStreamSynchronize(stream_));
    std::vector<unsigned char> got(dstSize);
    CUDA_ASSERT(cudaMemcpy(got.data(), dDst, dstSize, cudaMemcpyDeviceToHost));
    size_t wrong = 0;
    for (size_t i = 0; i < dstSize; ++i) {
      if (got[i] != dst[i] && ++wrong <= 4) {
        ADD_FAILURE() << "destination byte " << i << ": got " << +got[i] << ", expected "
                      << +dst[i];
      }
    }
    ASSERT_EQ(wrong, 0u) << "wrong bytes";
  }

  // n pieces of the given sizes, sources at random offsets in a shared buffer, destinations
  // one after another with random gaps and alignments.
  std::vector<Piece> layout(const std::vector<size_t>& sizes, uint64_t seed) {
    Rng rng{seed};
    size_t maxBytes = 0;
    for (size_t s : sizes) maxBytes = std::max(maxBytes, s);
    const size_t srcSpan = maxBytes + 4096;
    std::vector<Piece> pieces;
    size_t next = rng.next() % 32;
    for (size_t s : sizes) {
      const size_t srcOffset = rng.next() % (srcSpan - s + 1);
      pieces.push_back(Piece{next, srcOffset, s});
      next += s + rng.next() % 40;
    }
    return pieces;
  }
};

TEST_F(CopyKernels, ManyPiecesOfOddSizesAndAlignments) {
  const size_t kSizes[] = {
      1,  2,   3,   5,    15,   16,   17,    31,    33,     63,     64,
      65, 255, 257, 1000, 4095, 4097, 65535, 65537, 100003, 262147, (size_t{1} << 20) + 7};
  for (int n : {1, 2, 17, 63, kMaxCopyPieces}) {
    SCOPED_TRACE(::testing::Message() << n << " pieces");
    Rng rng{static_cast<uint64_t>(n) * 1000003};
    std::vector<size_t> sizes;
    for (int i = 0; i < n; ++i) sizes.push_back(kSizes[rng.next() % std::size(kSizes)]);
    if (n > 2) sizes[1] = 0;  // an empty piece among the others
    runPieces(layout(sizes, 0xBA7Cull + n));
  }
}

TEST_F(CopyKernels, EveryRelativeAlignment) {
  // dst - src modulo 16 takes every value (16-, 8-, 4-, 2- and 1-byte paths), with the
  // destination itself at every offset modulo 16.
  std::vector<Piece> pieces;
  size_t next = 0;
  for (size_t rel = 0; rel < 16; ++rel) {
    for (size_t d = 0; d < 4; ++d) {
      const size_t dstOffset = next + (d * 5 + rel) % 16;
      const size_t bytes = 20000 + rel * 37 + d;
      pieces.push_back(Piece{dstOffset, (dstOffset + 16 - rel) % 16 + d * 32, bytes});
      next = (dstOffset + bytes + 64) & ~size_t{15};
    }
  }
  ASSERT_EQ(pieces.size(), static_cast<size_t>(kMaxCopyPieces));
  runPieces(pieces);
}

TEST_F(CopyKernels, ZeroPieces) {
  runPieces({});
}

TEST_F(CopyKernels, SixtyFourPiecesOneLarge) {
  // One piece dominates: the blocks must still cover every small one.
  std::vector<size_t> sizes(kMaxCopyPieces, 3);
  sizes[37] = (size_t{64} << 20) + 9;
  sizes[5] = 0;
  runPieces(layout(sizes, 0x1A26Eull));
}

TEST_F(CopyKernels, SingleCopySizesAndOffsets) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{4099},
                       (size_t{8} << 20) + 5}) {
    for (size_t dstOffset : {size_t{0}, size_t{1}, size_t{8}}) {
      for (size_t srcOffset : {size_t{0}, size_t{3}, size_t{8}}) {
        SCOPED_TRACE(::testing::Message() << bytes << " bytes, dst offset " << dstOffset
                                          << ", src offset " << srcOffset);
        runPieces({Piece{dstOffset, srcOffset, bytes}}, /*single=*/true);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

}  // namespace
}  // namespace sharc::kernels

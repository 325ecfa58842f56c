// Host models of the element types, for the CUDA reduction tests: the expected result of a
// reduction, computed from the same inputs two ways:
//  - exactly, a host model of the documented arithmetic (integers in their own wrapped
//    arithmetic with truncating division; floating types accumulated over the inputs in order
//    in float32 (float16, bfloat16, float32) or float64, divided there for Avg and rounded
//    once): every bit of every element, NaN results only as NaN;
//  - within a tolerance, for floating types, a float64 reference (sum, product, NaN-propagating
//    max/min of the exact input values): rel * n * (sum of |inputs|, or |product|) with rel
//    1e-3 (float16), 8e-3 (bfloat16), 1e-6 (float32), 1e-12 (float64); max/min exact.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sharc/types.hpp>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "core/reduce.hpp"
#include "kernel_test_support.hpp"

namespace sharc::kernels::testing {

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

}  // namespace sharc::kernels::testing

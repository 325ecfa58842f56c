#include "reference.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>

namespace sharc::testing {
namespace {

bool isFloat(DataType t) {
  return t == DataType::Float16 || t == DataType::BFloat16 || t == DataType::Float32 ||
         t == DataType::Float64;
}
bool isUnsigned(DataType t) {
  return t == DataType::Uint8 || t == DataType::Uint32 || t == DataType::Uint64;
}

// Exact encoders for values that are exactly representable (which inputValue guarantees).
uint16_t exactHalf(double v) {
  if (v == 0) return 0;
  const uint16_t sign = v < 0 ? 0x8000 : 0;
  int exp = 0;
  const double m = std::frexp(std::fabs(v), &exp);  // v = m * 2^exp, m in [0.5, 1)
  const int e = exp - 1 + 15;
  const auto mant = static_cast<uint16_t>(std::ldexp(m * 2 - 1, 10));
  return static_cast<uint16_t>(sign | e << 10 | mant);
}
uint16_t exactBf16(double v) {
  const float f = static_cast<float>(v);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);
}
double decodeHalf(uint16_t h) {
  const int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 0)
    v = std::ldexp(m, -24);
  else if (e == 31)
    v = m ? NAN : INFINITY;
  else
    v = std::ldexp(1024 + m, e - 25);
  return sign ? -v : v;
}
double decodeBf16(uint16_t b) {
  const uint32_t bits = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
double ulp(DataType t, double x) {
  const int bits = t == DataType::Float16    ? 10
                   : t == DataType::BFloat16 ? 7
                   : t == DataType::Float32  ? 23
                                             : 52;
  int exp = 0;
  std::frexp(x == 0 ? 1.0 : std::fabs(x), &exp);
  return std::ldexp(1.0, exp - 1 - bits);
}

}  // namespace

double inputValue(DataType type, RedOp op, int rank, size_t i) {
  const size_t h = static_cast<size_t>(rank) * 7 + i * 13 + (i >> 7);
  if (op == RedOp::Prod) {
    if (isUnsigned(type)) return 1 + static_cast<double>(h % 2);  // 1, 2
    static const double kProd[4] = {1, -1, 2, -2};
    return kProd[h % 4];
  }
  if (isUnsigned(type)) return static_cast<double>(h % 9);  // 0..8
  return static_cast<double>(h % 9) - 4;                    // -4..4
}

void fillInput(void* buf, DataType type, RedOp op, int rank, size_t first, size_t count) {
  for (size_t k = 0; k < count; ++k) {
    const double v = inputValue(type, op, rank, first + k);
    switch (type) {
      case DataType::Int8: static_cast<int8_t*>(buf)[k] = static_cast<int8_t>(v); break;
      case DataType::Uint8: static_cast<uint8_t*>(buf)[k] = static_cast<uint8_t>(v); break;
      case DataType::Int32: static_cast<int32_t*>(buf)[k] = static_cast<int32_t>(v); break;
      case DataType::Uint32: static_cast<uint32_t*>(buf)[k] = static_cast<uint32_t>(v); break;
      case DataType::Int64: static_cast<int64_t*>(buf)[k] = static_cast<int64_t>(v); break;
      case DataType::Uint64: static_cast<uint64_t*>(buf)[k] = static_cast<uint64_t>(v); break;
      case DataType::Float16: static_cast<uint16_t*>(buf)[k] = exactHalf(v); break;
      case DataType::BFloat16: static_cast<uint16_t*>(buf)[k] = exactBf16(v); break;
      case DataType::Float32: static_cast<float*>(buf)[k] = static_cast<float>(v); break;
      case DataType::Float64: static_cast<double*>(buf)[k] = v; break;
    }
  }
}

double expectedReduce(DataType type, RedOp op, int n, size_t i) {
  if (isFloat(type)) {
    double acc = inputValue(type, op, 0, i);
    for (int r = 1; r < n; ++r) {
      const double v = inputValue(type, op, r, i);
      switch (op) {
        case RedOp::Sum:
        case RedOp::Avg: acc += v; break;
        case RedOp::Prod: acc *= v; break;
        case RedOp::Max: acc = std::max(acc, v); break;
        case RedOp::Min: acc = std::min(acc, v); break;
      }
    }
    return op == RedOp::Avg ? acc / n : acc;
  }
  // Integers: exact in int64 (inputs are tiny), then wrapped to the type's width.
  int64_t acc = static_cast<int64_t>(inputValue(type, op, 0, i));
  for (int r = 1; r < n; ++r) {
    const auto v = static_cast<int64_t>(inputValue(type, op, r, i));
    switch (op) {
      case RedOp::Sum:
      case RedOp::Avg: acc += v; break;
      case RedOp::Prod: acc *= v; break;
      case RedOp::Max: acc = std::max(acc, v); break;
      case RedOp::Min: acc = std::min(acc, v); break;
    }
  }
  switch (type) {
    case DataType::Int8: acc = static_cast<int8_t>(acc); break;
    case DataType::Uint8: acc = static_cast<uint8_t>(acc); break;
    case DataType::Int32: acc = static_cast<int32_t>(acc); break;
    case DataType::Uint32: acc = static_cast<uint32_t>(acc); break;
    default: break;
  }
  if (op == RedOp::Avg) acc /= n;  // truncating, like C++ integer division
  return static_cast<double>(acc);
}

double loadElement(const void* buf, DataType type, size_t k) {
  switch (type) {
    case DataType::Int8: return static_cast<const int8_t*>(buf)[k];
    case DataType::Uint8: return static_cast<const uint8_t*>(buf)[k];
    case DataType::Int32: return static_cast<const int32_t*>(buf)[k];
    case DataType::Uint32: return static_cast<const uint32_t*>(buf)[k];
    case DataType::Int64: return static_cast<double>(static_cast<const int64_t*>(buf)[k]);
    case DataType::Uint64: return static_cast<double>(static_cast<const uint64_t*>(buf)[k]);
    case DataType::Float16: return decodeHalf(static_cast<const uint16_t*>(buf)[k]);
    case DataType::BFloat16: return decodeBf16(static_cast<const uint16_t*>(buf)[k]);
    case DataType::Float32: return static_cast<const float*>(buf)[k];
    case DataType::Float64: return static_cast<const double*>(buf)[k];
  }
  return NAN;
}

bool matches(double got, double expected, DataType type, RedOp op) {
  if (got == expected) return true;
  if (op != RedOp::Avg || !isFloat(type)) return false;
  return std::fabs(got - expected) <= ulp(type, expected);
}

std::string describeMismatch(size_t index, double got, double expected) {
  std::ostringstream os;
  os << "element " << index << ": got " << got << ", expected " << expected;
  return os.str();
}

}  // namespace sharc::testing

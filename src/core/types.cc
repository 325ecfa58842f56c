#include <algorithm>
#include <cctype>
#include <sharc/types.hpp>
#include <string>

namespace sharc {

bool isValid(DataType type) noexcept {
  return static_cast<int>(type) < kNumDataTypes;
}
bool isValid(RedOp op) noexcept {
  return static_cast<int>(op) < kNumRedOps;
}

size_t dataTypeSize(DataType type) noexcept {
  switch (type) {
    case DataType::Int8:
    case DataType::Uint8: return 1;
    case DataType::Float16:
    case DataType::BFloat16: return 2;
    case DataType::Int32:
    case DataType::Uint32:
    case DataType::Float32: return 4;
    case DataType::Int64:
    case DataType::Uint64:
    case DataType::Float64: return 8;
  }
  return 0;
}

const char* dataTypeName(DataType type) noexcept {
  switch (type) {
    case DataType::Int8: return "int8";
    case DataType::Uint8: return "uint8";
    case DataType::Int32: return "int32";
    case DataType::Uint32: return "uint32";
    case DataType::Int64: return "int64";
    case DataType::Uint64: return "uint64";
    case DataType::Float16: return "float16";
    case DataType::Float32: return "float32";
    case DataType::Float64: return "float64";
    case DataType::BFloat16: return "bfloat16";
  }
  return "invalid";
}

const char* redOpName(RedOp op) noexcept {
  switch (op) {
    case RedOp::Sum: return "sum";
    case RedOp::Prod: return "prod";
    case RedOp::Max: return "max";
    case RedOp::Min: return "min";
    case RedOp::Avg: return "avg";
  }
  return "invalid";
}

namespace {
std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}
}  // namespace

std::optional<DataType> parseDataType(std::string_view name) noexcept {
  struct Alias {
    const char* name;
    DataType type;
  };
  static constexpr Alias kAliases[] = {
      {"int8", DataType::Int8},      {"char", DataType::Int8},     {"uint8", DataType::Uint8},
      {"int32", DataType::Int32},    {"int", DataType::Int32},     {"uint32", DataType::Uint32},
      {"int64", DataType::Int64},    {"uint64", DataType::Uint64}, {"float16", DataType::Float16},
      {"half", DataType::Float16},   {"fp16", DataType::Float16},  {"float32", DataType::Float32},
      {"float", DataType::Float32},  {"fp32", DataType::Float32},  {"float64", DataType::Float64},
      {"double", DataType::Float64}, {"fp64", DataType::Float64},  {"bfloat16", DataType::BFloat16},
      {"bf16", DataType::BFloat16},
  };
  try {
    const std::string key = lower(name);
    for (const auto& a : kAliases)
      if (key == a.name) return a.type;
  } catch (...) {
  }
  return std::nullopt;
}

std::optional<RedOp> parseRedOp(std::string_view name) noexcept {
  try {
    const std::string key = lower(name);
    for (int i = 0; i < kNumRedOps; ++i)
      if (key == redOpName(static_cast<RedOp>(i))) return static_cast<RedOp>(i);
  } catch (...) {
  }
  return std::nullopt;
}

}  // namespace sharc

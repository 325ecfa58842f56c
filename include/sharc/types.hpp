/// \file
/// Element types and reduction operators shared by the C++ API, the C API and the engine.
/// Numeric values match NCCL's ncclDataType_t / ncclRedOp_t so casts between them are free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace sharc {

/// Element type of a collective's buffers.
enum class DataType : uint8_t {
  Int8 = 0,
  Uint8 = 1,
  Int32 = 2,
  Uint32 = 3,
  Int64 = 4,
  Uint64 = 5,
  Float16 = 6,
  Float32 = 7,
  Float64 = 8,
  BFloat16 = 9,
};
/// Number of DataType values; valid values are [0, kNumDataTypes).
inline constexpr int kNumDataTypes = 10;

/// Reduction operator. Avg is Sum followed by a division by the number of ranks.
enum class RedOp : uint8_t {
  Sum = 0,
  Prod = 1,
  Max = 2,
  Min = 3,
  Avg = 4,
};
/// Number of RedOp values; valid values are [0, kNumRedOps).
inline constexpr int kNumRedOps = 5;

/// Which collective (or other engine operation) a call is. Communicator::plan describes the
/// first three; every value fits the three bits a message tag keeps for it.
enum class CollectiveKind : uint8_t {
  AllGather = 0,
  ReduceScatter = 1,
  AllReduce = 2,
  Broadcast = 3,
  Barrier = 4,
  Split = 5,         ///< Communicator::split's exchange
  PointToPoint = 6,  ///< send / receive
};

/// Size in bytes of one element; 0 for an invalid type.
size_t dataTypeSize(DataType type) noexcept;
/// "float32", "bfloat16", ... ; "invalid" for an out-of-range value.
const char* dataTypeName(DataType type) noexcept;
/// "sum", "prod", "max", "min", "avg"; "invalid" for an out-of-range value.
const char* redOpName(RedOp op) noexcept;
/// Parses the names above plus nccl-tests' short forms (float, half, bf16, int, ...).
std::optional<DataType> parseDataType(std::string_view name) noexcept;
/// Parses "sum", "prod", "max", "min", "avg" (case-insensitive).
std::optional<RedOp> parseRedOp(std::string_view name) noexcept;
/// True for a value inside the enumeration's range.
bool isValid(DataType type) noexcept;
/// True for a value inside the enumeration's range.
bool isValid(RedOp op) noexcept;

}  // namespace sharc

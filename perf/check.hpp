// Deterministic input patterns and an independent float64 reference for result checking.
//
// Every input value is a small integer chosen so that any partial reduction over the ranks
// stays exactly representable in the element type (int8 and bfloat16 included): sums use
// values in [-a, a] with a*nranks within the type's exact range, products use factors of
// magnitude 1 or 2 with at most six 2s per element, and avg inputs sum to a multiple of
// nranks. So every correct implementation produces exactly the reference value, whatever
// its reduction order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <sharc/types.hpp>

namespace sharc::perf {

struct Pattern {
  DataType type = DataType::Float32;
  std::optional<RedOp> op;  ///< nullopt: plain data movement (all_gather)
  int nranks = 1;
  uint64_t seed = 0;
};

/// The input value of `rank` at element `index` (an exactly representable small integer).
double patternValue(const Pattern& p, int rank, size_t index) noexcept;
/// op over all ranks of patternValue(p, r, index), computed in float64 (p.op must be set).
double expectedValue(const Pattern& p, size_t index) noexcept;

/// buf[k] = patternValue(p, rank, first + k) for k in [0, count).
void fillPattern(void* buf, const Pattern& p, int rank, size_t first, size_t count);
/// Fills with a value no check expects (NaN for floating types, the extreme for integers).
void fillSentinel(void* buf, DataType type, size_t count);
/// Number of k in [0, count) with buf[k] != patternValue(p, srcRank, first + k).
size_t countWrongCopy(const void* buf, const Pattern& p, int srcRank, size_t first, size_t count);
/// Number of k in [0, count) with buf[k] != expectedValue(p, first + k).
size_t countWrongReduced(const void* buf, const Pattern& p, size_t first, size_t count);

/// Host conversions used by the checker (independent of sharc's own): IEEE binary16 and
/// bfloat16, round to nearest even.
uint16_t floatToHalf(float f) noexcept;
float halfToFloat(uint16_t h) noexcept;
uint16_t floatToBf16(float f) noexcept;
float bf16ToFloat(uint16_t b) noexcept;

}  // namespace sharc::perf

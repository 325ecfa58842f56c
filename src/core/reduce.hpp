// Element-wise reduction kernels for host memory. Internal to sharc (not installed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <sharc/types.hpp>

namespace sharc::core {

/// dst[i] = a[i] op b[i] for i in [0, count). dst may alias a or b exactly (same pointer);
/// partial overlap is not allowed. Avg reduces as Sum (divide with finishAverage afterwards).
/// float16/bfloat16 are widened to float32 per element and rounded to nearest-even.
/// Integer Sum/Prod wrap modulo 2^bits (computed in the unsigned type, no UB).
/// Floating Max/Min propagate NaN (the result is NaN if either input is); -0.0 and +0.0 are
/// not ordered (either may be returned). Invalid type/op values do nothing (callers validate).
void reduce(void* dst, const void* a, const void* b, size_t count, DataType type, RedOp op);

/// data[i] = data[i] / divisor, the last step of Avg: true division for floating types
/// (float16/bfloat16 through float32, rounded to nearest-even), truncating division for
/// integers (as C++ '/'). A divisor of 0 or 1 leaves the data unchanged.
void finishAverage(void* data, size_t count, DataType type, uint64_t divisor);

/// IEEE binary16 <-> float32 and bfloat16 <-> float32 conversions (round to nearest-even,
/// NaN preserved as a quiet NaN, ±inf and subnormals exact). floatToHalf assumes the default
/// floating-point rounding mode; none depends on flush-to-zero/denormals-are-zero settings.
float halfToFloat(uint16_t h) noexcept;
uint16_t floatToHalf(float f) noexcept;
float bfloat16ToFloat(uint16_t b) noexcept;
uint16_t floatToBfloat16(float f) noexcept;

}  // namespace sharc::core

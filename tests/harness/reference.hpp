// Test data and float64 references, written independently of sharc's own kernels.
#pragma once

#include <cstddef>
#include <sharc/types.hpp>
#include <string>

namespace sharc::testing {

/// Input value of `rank` at global element index `i`: small integers (or powers of two for
/// Prod) so every reduction over up to 8 ranks is exact in every type, integers wrapping.
double inputValue(DataType type, RedOp op, int rank, size_t i);
/// Writes inputValue(type, op, rank, first + k) for k < count into buf (exact encodings).
void fillInput(void* buf, DataType type, RedOp op, int rank, size_t first, size_t count);
/// The reduction of inputValue over ranks 0..n-1 at index i, computed in float64 (int64 for
/// integer types, wrapped to the type's width); Avg divides at the end.
double expectedReduce(DataType type, RedOp op, int n, size_t i);
/// Element k of a typed buffer as double (exact decoding, written here for the tests).
double loadElement(const void* buf, DataType type, size_t k);
/// Equality with the reference: exact, except Avg on floating types (within one unit in the
/// last place of the type).
bool matches(double got, double expected, DataType type, RedOp op);
/// "index 5: got 3 expected 4" style description for failures.
std::string describeMismatch(size_t index, double got, double expected);

}  // namespace sharc::testing

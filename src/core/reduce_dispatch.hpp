// Instruction-set dispatch of the host reduction kernels. Internal to sharc (not installed).
//
// core::reduce() and core::finishAverage() pick the fastest implementation the CPU supports,
// once per process. The entry points here force one implementation, so that tests (and
// benchmarks) can run every path on the same machine and compare them bit for bit: every
// implementation must produce identical bits for identical inputs, NaN payloads included.
#pragma once

#include <cstddef>
#include <cstdint>
#include <sharc/types.hpp>

namespace sharc::core {

enum class ReduceIsa {
  Baseline,  // portable code: SSE2 on x86-64, NEON on aarch64
  Avx2,      // x86-64 AVX2 + F16C: float16 and bfloat16 only, other types use Baseline
};

/// Whether `isa` was compiled in and the CPU (and OS) can run it. Baseline always is.
bool isaAvailable(ReduceIsa isa) noexcept;

/// The implementation reduce() and finishAverage() use.
ReduceIsa selectedIsa() noexcept;

/// reduce() / finishAverage() through the given implementation. An unavailable `isa` falls
/// back to Baseline (never an illegal instruction).
void reduceWith(ReduceIsa isa, void* dst, const void* a, const void* b, size_t count, DataType type,
                RedOp op);
void finishAverageWith(ReduceIsa isa, void* data, size_t count, DataType type, uint64_t divisor);

namespace avx2 {
// Implemented in reduce_avx2.cc, which is compiled with -mavx2 -mf16c on x86-64 and empty
// elsewhere. compiled() says whether the kernels exist; they must only be called when it
// returns true and the CPU supports AVX2 and F16C. `type` is Float16 or BFloat16, count > 0.
bool compiled() noexcept;
void reduce16(void* dst, const void* a, const void* b, size_t count, DataType type, RedOp op);
void divide16(void* data, size_t count, DataType type, uint64_t divisor);
}  // namespace avx2

}  // namespace sharc::core

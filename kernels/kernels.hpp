// sharc's CUDA kernels, callable from host C++ code: element-wise reductions of up to eight
// inputs and batched copies, each launched on a caller's stream. They return the launch's
// status (no exceptions on this hot path); callers check it (gpu/cuda_check.hpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <sharc/types.hpp>

namespace sharc::kernels {

/// Most inputs one reduce() call takes.
inline constexpr int kMaxReduceInputs = 8;

/// out[i] = op(inputs[0][i], ..., inputs[n-1][i]) for i in [0, count), n in [1, 8].
/// Avg sums and then divides by `avgDivisor` (truncating for integers, as C++ '/'; true
/// division for floating types); other ops ignore it. float16 and bfloat16 are accumulated
/// in float32 over all inputs and rounded once (to nearest-even). Integer Sum/Prod wrap.
/// Floating Max/Min propagate NaN. `out` may be one of the inputs exactly (in place);
/// partial overlap is not allowed. Loads and stores are 16 bytes wide where every pointer is
/// 16-byte aligned. Any pointer the device can read (device, mapped IPC or pinned host).
/// count 0 launches nothing. Returns cudaErrorInvalidValue for n out of range or an
/// invalid type/op (checked even when count is 0), or, when count > 0, a null `out`, `inputs`
/// or inputs[k]; otherwise the launch's status (cudaGetLastError()).
/// An avgDivisor of 0 or 1 leaves the sum undivided (as core::finishAverage); integer Avg with
/// a divisor the type cannot hold follows core::finishAverage too (0, or -1 for the minimum).
cudaError_t reduce(void* out, const void* const* inputs, int n, size_t count, DataType type,
                   RedOp op, uint64_t avgDivisor, cudaStream_t stream) noexcept;

/// One piece of a batched copy.
struct CopyPiece {
  void* dst;
  const void* src;
  size_t bytes;
};

/// Most pieces one copyBatch() call takes.
inline constexpr int kMaxCopyPieces = 64;

/// Copies every piece in one launch (16-byte loads and stores where aligned); pieces must
/// not overlap each other's destinations. n in [0, 64]. Pieces of 0 bytes are skipped (their
/// pointers may be null); nothing is launched when all are empty. Returns
/// cudaErrorInvalidValue for n out of range, null `pieces` with n > 0, or a null dst/src in a
/// non-empty piece; otherwise the launch's status.
cudaError_t copyBatch(const CopyPiece* pieces, int n, cudaStream_t stream) noexcept;

/// copyBatch of a single piece.
cudaError_t copy(void* dst, const void* src, size_t bytes, cudaStream_t stream) noexcept;

}  // namespace sharc::kernels

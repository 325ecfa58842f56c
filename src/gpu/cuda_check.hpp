// Checked CUDA runtime calls: every failure becomes a sharc::Error naming the call, the file
// and CUDA's own message. Internal to sharc; only compiled with CUDA (SHARC_HAVE_CUDA).
#pragma once

#include <cuda_runtime_api.h>

#include <sharc/error.hpp>
#include <string>

namespace sharc::gpu {

/// Throws sharc::Error(UnhandledSystemError) for anything but cudaSuccess. `what` names the
/// call ("cudaMalloc(4096 bytes)"); CUDA's error name and text are appended.
[[noreturn]] void throwCudaError(cudaError_t status, const char* what, const char* file, int line);

/// "cudaErrorInvalidValue: invalid argument".
std::string cudaErrorText(cudaError_t status);

}  // namespace sharc::gpu

/// Evaluates a CUDA runtime call and throws sharc::Error if it did not succeed.
#define SHARC_CUDA_CHECK(call)                                                     \
  do {                                                                             \
    const cudaError_t sharc_cuda_status_ = (call);                                 \
    if (sharc_cuda_status_ != cudaSuccess)                                         \
      ::sharc::gpu::throwCudaError(sharc_cuda_status_, #call, __FILE__, __LINE__); \
  } while (0)

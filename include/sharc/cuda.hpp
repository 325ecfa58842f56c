/// \file
/// What sharc knows about CUDA memory and streams, without including CUDA's headers.
///
/// Collectives take CUDA device pointers and a `cudaStream_t` (see the stream-ordered forms
/// of sharc::Communicator). A build without CUDA (SHARC_WITH_CUDA=OFF) keeps these
/// declarations: every pointer is host memory there, and stream-ordered calls throw.
#pragma once

#include <string>

/// CUDA's own stream type (`cudaStream_t` is `CUstream_st*`): declared here so that callers
/// need not include cuda_runtime.h to name it, and pass their cudaStream_t unchanged.
struct CUstream_st;

namespace sharc {

/// A CUDA stream (`cudaStream_t`); nullptr is the legacy default stream.
using CudaStream = CUstream_st*;

/// Where a buffer lives, as the CUDA driver reports it.
enum class MemoryKind : int {
  Host = 0,        ///< pageable host memory (or any memory CUDA does not know)
  PinnedHost = 1,  ///< page-locked host memory (cudaHostAlloc / cudaHostRegister)
  Device = 2,      ///< CUDA device memory (cudaMalloc, the frameworks' caching allocators)
  Managed = 3,     ///< CUDA managed memory (cudaMallocManaged)
};

/// "host", "pinned_host", "device", "managed".
const char* memoryKindName(MemoryKind kind) noexcept;

/// Kind of the memory `p` points into. Host when CUDA is not built in, when no driver or
/// device is present, or for memory CUDA does not know.
MemoryKind memoryKind(const void* p) noexcept;

/// The CUDA device `p` lives on (-1 for host memory).
int memoryDevice(const void* p) noexcept;

/// True when CUDA is built in and at least one device is usable. Otherwise false, and
/// `why` (when given) says what is missing: "built without CUDA", "no CUDA driver", ...
bool cudaAvailable(std::string* why = nullptr);

}  // namespace sharc

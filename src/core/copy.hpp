// Copies of large buffers that will not be read again soon (collective outputs): streaming
// (non-temporal) stores write the destination without first reading it into the cache, so
// each byte crosses memory once per side instead of three times. Measured on this project's
// machines (2 cores, AMD EPYC), 64 KiB pieces of a 32 MiB copy: see BM_CopyPieces in
// perf/bench_reduce.cc (sharc_bench_reduce --benchmark_filter=CopyPieces).
#pragma once

#include <cstddef>

namespace sharc::core {

/// Below this many bytes the destination is likely to be used again while still cached:
/// callers copy with memcpy instead.
inline constexpr size_t kStreamingCopyMin = 256 * 1024;

/// memcpy with streaming stores (x86-64; plain memcpy elsewhere). The regions must not
/// overlap. Ends with a store fence, so a later flag store orders after the data.
void copyStreaming(void* dst, const void* src, size_t bytes) noexcept;

/// copyStreaming for large copies, memcpy for small ones.
inline void copyLarge(void* dst, const void* src, size_t bytes, size_t messageBytes) noexcept;

}  // namespace sharc::core

#include <cstring>

namespace sharc::core {
inline void copyLarge(void* dst, const void* src, size_t bytes, size_t messageBytes) noexcept {
  if (messageBytes >= kStreamingCopyMin)
    copyStreaming(dst, src, bytes);
  else
    std::memcpy(dst, src, bytes);
}
}  // namespace sharc::core

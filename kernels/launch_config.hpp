// Launch sizing shared by the kernels of kernels/ (host code, internal): how many blocks of a
// kernel the current device runs at once. Grid-stride kernels launch at most that many, so
// every block is resident from the start (one wave, no tail of late blocks).
#pragma once

#include <cuda_runtime.h>

#include <atomic>

namespace sharc::kernels::detail {

/// Devices whose numbers are cached; others are asked on every launch.
inline constexpr int kCachedDevices = 64;

/// Per-kernel cache of the blocks one SM runs at once, per device (0: not known yet).
struct OccupancyCache {
  std::atomic<int> blocksPerSm[kCachedDevices]{};
};

/// The current device's SM count (cached per device).
inline cudaError_t smCount(int device, int* sms) noexcept {
  static std::atomic<int> cache[kCachedDevices]{};
  const bool cached = device >= 0 && device < kCachedDevices;
  if (cached) {
    const int v = cache[device].load(std::memory_order_relaxed);
    if (v > 0) {
      *sms = v;
      return cudaSuccess;
    }
  }
  int v = 0;
  const cudaError_t status = cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, device);
  if (status != cudaSuccess) return status;
  if (v < 1) v = 1;
  if (cached) cache[device].store(v, std::memory_order_relaxed);
  *sms = v;
  return cudaSuccess;
}

/// Most blocks of `kernel` (launched with `threads` threads and no dynamic shared memory) that
/// the current device holds at once: SMs x blocks per SM, at least 1.
template <typename Kernel>
cudaError_t residentBlocks(Kernel kernel, int threads, OccupancyCache& cache,
                           int* blocks) noexcept {
  int device = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status != cudaSuccess) return status;
  int sms = 0;
  status = smCount(device, &sms);
  if (status != cudaSuccess) return status;
  const bool cached = device >= 0 && device < kCachedDevices;
  int perSm = cached ? cache.blocksPerSm[device].load(std::memory_order_relaxed) : 0;
  if (perSm <= 0) {
    status = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, kernel, threads, 0);
    if (status != cudaSuccess) return status;
    if (perSm < 1) perSm = 1;
    if (cached) cache.blocksPerSm[device].store(perSm, std::memory_order_relaxed);
  }
  *blocks = sms * perSm;
  return cudaSuccess;
}

}  // namespace sharc::kernels::detail

// sharc-gpu-perf's CUDA resources: RAII owners of device memory, a stream and an event, and
// the error check that turns a CUDA failure into an exception.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace sharc::perf {

inline void cudaCheck(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e) + " (" +
                             cudaGetErrorString(e) + ")");
}
#define SHARC_GPU_PERF_CUDA(call) ::sharc::perf::cudaCheck((call), #call)

/// cudaMalloc'ed memory, zeroed (complete when the constructor returns).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) {
    SHARC_GPU_PERF_CUDA(cudaMalloc(&p_, std::max<size_t>(bytes, 1)));
    SHARC_GPU_PERF_CUDA(cudaMemset(p_, 0, bytes));
    // cudaMemset runs on the legacy stream, which a non-blocking stream does not wait for.
    SHARC_GPU_PERF_CUDA(cudaDeviceSynchronize());
  }
  ~DeviceBuffer() {
    if (p_) cudaFree(p_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  std::byte* get() const noexcept { return static_cast<std::byte*>(p_); }

 private:
  void* p_ = nullptr;
};

/// A non-blocking stream (no implicit synchronisation with the legacy default stream).
class Stream {
 public:
  Stream() { SHARC_GPU_PERF_CUDA(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~Stream() {
    if (s_) cudaStreamDestroy(s_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const noexcept { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

class Event {
 public:
  Event() { SHARC_GPU_PERF_CUDA(cudaEventCreate(&e_)); }
  ~Event() {
    if (e_) cudaEventDestroy(e_);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const noexcept { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

/// Microseconds between two recorded events (after `stop` has completed).
inline double elapsedUs(const Event& start, const Event& stop) {
  float ms = 0;
  SHARC_GPU_PERF_CUDA(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return static_cast<double>(ms) * 1000.0;
}

}  // namespace sharc::perf

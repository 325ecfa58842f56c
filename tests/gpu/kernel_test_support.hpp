// Shared by the CUDA kernel tests (test_reduce_kernels.cc, test_copy_kernels.cc): whether a
// device is usable, the fixture that skips without one, and a reproducible random generator.
//
// Every test skips (GTEST_SKIP, "no CUDA device: ...") where cudaGetDeviceCount fails or finds
// no device; nothing touches CUDA before a test's SetUp, so listing the tests works anywhere.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#define CUDA_ASSERT(call) ASSERT_EQ((call), cudaSuccess) << #call

namespace sharc::kernels::testing {

// ---- device availability and the fixture ---------------------------------------------------

// Empty when a device is usable; else why not. Asked once, at the first test's SetUp.
const std::string& deviceProblem();

template <typename Base>
class DeviceTest : public Base {
 protected:
  void SetUp() override {
    if (!deviceProblem().empty()) GTEST_SKIP() << "no CUDA device: " << deviceProblem();
    CUDA_ASSERT(cudaSetDevice(0));
    CUDA_ASSERT(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }

  void TearDown() override {
    for (void* p : allocations_) (void)cudaFree(p);
    allocations_.clear();
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }

  // Device memory freed at TearDown; nullptr (with a test failure) if cudaMalloc fails.
  char* deviceAlloc(size_t bytes) {
    void* p = nullptr;
    const cudaError_t status = cudaMalloc(&p, bytes);
    EXPECT_EQ(status, cudaSuccess) << "cudaMalloc(" << bytes << " bytes)";
    if (status != cudaSuccess) return nullptr;
    allocations_.push_back(p);
    return static_cast<char*>(p);
  }

  cudaStream_t stream_ = nullptr;

 private:
  std::vector<void*> allocations_;
};

// ---- random numbers (splitmix64: fast and reproducible) -----------------------------------

struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform(double lo, double hi) {  // [lo, hi)
    return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1p-53;
  }
  void fill(std::vector<unsigned char>& bytes) {
    for (size_t i = 0; i < bytes.size(); i += 8) {
      const uint64_t r = next();
      std::memcpy(bytes.data() + i, &r, std::min<size_t>(8, bytes.size() - i));
    }
  }
};

}  // namespace sharc::kernels::testing

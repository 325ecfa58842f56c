#include "kernel_test_support.hpp"

namespace sharc::kernels::testing {
namespace {

std::string findDeviceProblem() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky error for the next test
    return std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
  }
  if (count <= 0) return "cudaGetDeviceCount found 0 devices";
  return {};
}

}  // namespace

const std::string& deviceProblem() {
  static const std::string problem = findDeviceProblem();
  return problem;
}

}  // namespace sharc::kernels::testing

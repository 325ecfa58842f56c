// Memory-kind detection (include/sharc/cuda.hpp). Without CUDA built in, or without a driver
// or device at run time, every pointer is host memory.
#include <sharc/cuda.hpp>

#if SHARC_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <mutex>
#endif

namespace sharc {

const char* memoryKindName(MemoryKind kind) noexcept {
  switch (kind) {
    case MemoryKind::Host: return "host";
    case MemoryKind::PinnedHost: return "pinned_host";
    case MemoryKind::Device: return "device";
    case MemoryKind::Managed: return "managed";
  }
  return "invalid";
}

#if SHARC_HAVE_CUDA
namespace {
struct Availability {
  bool ok = false;
  std::string why;
};
// Asked once per process: a machine without a driver answers the same every time, and the
// question costs a driver initialisation.
const Availability& availability() {
  static const Availability a = [] {
    Availability r;
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status == cudaErrorInsufficientDriver || status == cudaErrorNoDevice ||
        status == cudaErrorNotSupported) {
      r.why = status == cudaErrorNoDevice ? "no CUDA device" : "no CUDA driver";
      r.why += std::string(" (") + cudaGetErrorName(status) + ")";
    } else if (status != cudaSuccess) {
      r.why = std::string("CUDA unusable: ") + cudaGetErrorName(status) + ": " +
              cudaGetErrorString(status);
    } else if (count == 0) {
      r.why = "no CUDA device";
    } else {
      r.ok = true;
    }
    (void)cudaGetLastError();  // clear the sticky-free error state of a failed probe
    return r;
  }();
  return a;
}

bool queryAttributes(const void* p, cudaPointerAttributes& attr) {
  if (p == nullptr || !availability().ok) return false;
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return true;
}
}  // namespace

bool cudaAvailable(std::string* why) {
  const Availability& a = availability();
  if (why) *why = a.why;
  return a.ok;
}

MemoryKind memoryKind(const void* p) noexcept {
  cudaPointerAttributes attr{};
  if (!queryAttributes(p, attr)) return MemoryKind::Host;
  switch (attr.type) {
    case cudaMemoryTypeDevice: return MemoryKind::Device;
    case cudaMemoryTypeHost: return MemoryKind::PinnedHost;
    case cudaMemoryTypeManaged: return MemoryKind::Managed;
    default: return MemoryKind::Host;
  }
}

int memoryDevice(const void* p) noexcept {
  cudaPointerAttributes attr{};
  if (!queryAttributes(p, attr)) return -1;
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged ? attr.device : -1;
}

#else  // built without CUDA

bool cudaAvailable(std::string* why) {
  if (why) *why = "built without CUDA (SHARC_WITH_CUDA=OFF)";
  return false;
}
MemoryKind memoryKind(const void*) noexcept {
  return MemoryKind::Host;
}
int memoryDevice(const void*) noexcept {
  return -1;
}

#endif

}  // namespace sharc

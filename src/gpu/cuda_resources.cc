// RAII owners of CUDA resources (cuda_resources.hpp) and the checked-call helper.
#include "gpu/cuda_resources.hpp"

#include <cuda.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "core/log.hpp"
#include "gpu/cuda_check.hpp"

namespace sharc::gpu {

std::string cudaErrorText(cudaError_t status) {
  return std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
}

[[noreturn]] void throwCudaError(cudaError_t status, const char* what, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  throw Error(Result::UnhandledSystemError,
              std::string(what) + " failed (" + (base ? base + 1 : file) + ":" +
                  std::to_string(line) + "): " + cudaErrorText(status));
}

namespace {
// Destructors must not throw: a failed release is worth a warning, nothing more.
void warnOnFailure(cudaError_t status, const char* what) {
  if (status != cudaSuccess) SHARC_WARN(what << " failed: " << cudaErrorText(status));
}
}  // namespace

DeviceGuard::DeviceGuard(int device) {
  SHARC_CUDA_CHECK(cudaGetDevice(&previous_));
  if (device != previous_) SHARC_CUDA_CHECK(cudaSetDevice(device));
}
DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_)
    warnOnFailure(cudaSetDevice(previous_), "cudaSetDevice (restore)");
}

Stream::Stream() {
  SHARC_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
}
Stream::~Stream() {
  if (s_) warnOnFailure(cudaStreamDestroy(s_), "cudaStreamDestroy");
}
Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    if (s_) warnOnFailure(cudaStreamDestroy(s_), "cudaStreamDestroy");
    s_ = std::exchange(o.s_, nullptr);
  }
  return *this;
}

Event::Event(bool timing) {
  SHARC_CUDA_CHECK(
      cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault : cudaEventDisableTiming));
}
Event::~Event() {
  if (e_) warnOnFailure(cudaEventDestroy(e_), "cudaEventDestroy");
}
Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (e_) warnOnFailure(cudaEventDestroy(e_), "cudaEventDestroy");
    e_ = std::exchange(o.e_, nullptr);
  }
  return *this;
}
void Event::record(cudaStream_t stream) {
  SHARC_CUDA_CHECK(cudaEventRecord(e_, stream));
}
bool Event::query() const {
  const cudaError_t status = cudaEventQuery(e_);
  if (status == cudaSuccess) return true;
  if (status == cudaErrorNotReady) return false;
  throwCudaError(status, "cudaEventQuery", __FILE__, __LINE__);
}
void Event::waitFor(long timeoutMs, const char* what) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  // Spin briefly (collectives are short), then yield the core to the other ranks.
  for (int spins = 0; !query(); ++spins) {
    if (std::chrono::steady_clock::now() > deadline)
      throw Error(Result::Timeout, std::string(what) + ": GPU work did not finish within " +
                                       std::to_string(timeoutMs) + " ms");
    if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  const cudaError_t status = cudaMalloc(&p_, bytes);
  if (status != cudaSuccess)
    throwCudaError(status, ("cudaMalloc(" + std::to_string(bytes) + " bytes)").c_str(), __FILE__,
                   __LINE__);
}
DeviceBuffer::~DeviceBuffer() {
  if (p_) warnOnFailure(cudaFree(p_), "cudaFree");
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (p_) warnOnFailure(cudaFree(p_), "cudaFree");
    p_ = std::exchange(o.p_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  const cudaError_t status = cudaHostAlloc(&p_, bytes, cudaHostAllocPortable | cudaHostAllocMapped);
  if (status != cudaSuccess)
    throwCudaError(status, ("cudaHostAlloc(" + std::to_string(bytes) + " bytes)").c_str(), __FILE__,
                   __LINE__);
  std::memset(p_, 0, bytes);
}
PinnedBuffer::~PinnedBuffer() {
  if (p_) warnOnFailure(cudaFreeHost(p_), "cudaFreeHost");
}
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    if (p_) warnOnFailure(cudaFreeHost(p_), "cudaFreeHost");
    p_ = std::exchange(o.p_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}
void* PinnedBuffer::devicePointer() const {
  void* d = nullptr;
  SHARC_CUDA_CHECK(cudaHostGetDevicePointer(&d, p_, 0));
  return d;
}

namespace {
// cuMemGetAddressRange through the runtime's driver entry point: sharc links no libcuda.
using AddressRangeFn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
AddressRangeFn addressRangeFn() {
  static AddressRangeFn fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    SHARC_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &p, 12000,
                                                      cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || p == nullptr)
      throw Error(Result::UnhandledSystemError,
                  "the CUDA driver has no cuMemGetAddressRange entry point");
    return reinterpret_cast<AddressRangeFn>(p);
  }();
  return fn;
}
}  // namespace

std::pair<void*, size_t> allocationRange(const void* p) {
  CUdeviceptr base = 0;
  size_t size = 0;
  const CUresult r = addressRangeFn()(&base, &size, reinterpret_cast<CUdeviceptr>(p));
  if (r != CUDA_SUCCESS)
    throw Error(Result::InvalidArgument, "cuMemGetAddressRange: pointer " +
                                             std::to_string(reinterpret_cast<uintptr_t>(p)) +
                                             " is not in device memory (CUresult " +
                                             std::to_string(static_cast<int>(r)) + ")");
  return {reinterpret_cast<void*>(base), size};
}

namespace {
using PointerAttributeFn = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);
PointerAttributeFn pointerAttributeFn() {
  static PointerAttributeFn fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuPointerGetAttribute", &p, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      p = nullptr;
    return reinterpret_cast<PointerAttributeFn>(p);
  }();
  return fn;
}
}  // namespace

uint64_t bufferIdOf(const void* p) noexcept {
  const PointerAttributeFn fn = pointerAttributeFn();
  if (fn == nullptr) return 0;
  unsigned long long id = 0;
  if (fn(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS)
    return 0;
  return id;
}

IpcBufferHandle exportIpcBuffer(const void* p) {
  const auto [base, size] = allocationRange(p);
  (void)size;
  cudaIpcMemHandle_t h;
  SHARC_CUDA_CHECK(cudaIpcGetMemHandle(&h, base));
  IpcBufferHandle out;
  static_assert(sizeof(h) == sizeof(out.handle));
  std::memcpy(out.handle.data(), &h, sizeof(h));
  out.offset = static_cast<uint64_t>(static_cast<const char*>(p) - static_cast<const char*>(base));
  cudaPointerAttributes attr{};
  SHARC_CUDA_CHECK(cudaPointerGetAttributes(&attr, p));
  out.device = attr.device;
  out.pid = static_cast<int32_t>(getpid());
  return out;
}

IpcMapping::IpcMapping(const IpcBufferHandle& h) {
  cudaIpcMemHandle_t handle;
  std::memcpy(&handle, h.handle.data(), sizeof(handle));
  SHARC_CUDA_CHECK(cudaIpcOpenMemHandle(&base_, handle, cudaIpcMemLazyEnablePeerAccess));
}
IpcMapping::~IpcMapping() {
  if (base_) warnOnFailure(cudaIpcCloseMemHandle(base_), "cudaIpcCloseMemHandle");
}
IpcMapping& IpcMapping::operator=(IpcMapping&& o) noexcept {
  if (this != &o) {
    if (base_) warnOnFailure(cudaIpcCloseMemHandle(base_), "cudaIpcCloseMemHandle");
    base_ = std::exchange(o.base_, nullptr);
  }
  return *this;
}

}  // namespace sharc::gpu

// RAII owners of CUDA resources: streams, events, device and pinned host memory, and the
// mappings of other processes' memory opened through CUDA IPC handles. Each constructor
// throws sharc::Error on failure; each destructor releases without throwing (a failure there
// is logged). Internal to sharc; only compiled with CUDA (SHARC_HAVE_CUDA).
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace sharc::gpu {

/// Makes `device` current for the scope and restores the previous device after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

/// A non-blocking stream (does not synchronise with the legacy default stream).
class Stream {
 public:
  /// A stream on the current device.
  Stream();
  ~Stream();
  Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept;
  cudaStream_t get() const noexcept { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

/// An event; without timing by default (cheaper to record and query).
class Event {
 public:
  explicit Event(bool timing = false);
  ~Event();
  Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  Event& operator=(Event&& o) noexcept;
  cudaEvent_t get() const noexcept { return e_; }
  void record(cudaStream_t stream);
  /// True when the work recorded before it has finished; throws on a CUDA error.
  bool query() const;
  /// Polls query() until the event completes; throws sharc::Error(Timeout) naming `what`
  /// after `timeoutMs`.
  void waitFor(long timeoutMs, const char* what) const;

 private:
  cudaEvent_t e_ = nullptr;
};

/// Device memory from cudaMalloc on the current device.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  void* get() const noexcept { return p_; }
  size_t bytes() const noexcept { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

/// Page-locked host memory (cudaHostAlloc, portable and mapped into the device's address
/// space), zero-filled.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  void* get() const noexcept { return p_; }
  size_t bytes() const noexcept { return bytes_; }
  /// The device address of the same memory (for stream memory operations and kernels).
  void* devicePointer() const;

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

/// What one process sends another so that it can map a device buffer: the CUDA IPC handle of
/// the allocation that holds the buffer and the buffer's offset inside it. Plain bytes.
struct IpcBufferHandle {
  std::array<char, 64> handle{};  ///< cudaIpcMemHandle_t of the allocation
  uint64_t offset = 0;            ///< the buffer's offset from the allocation's base
  int32_t device = -1;            ///< the exporter's device ordinal
  int32_t pid = 0;                ///< the exporter's process id
};

/// The handle of the device buffer at `p` (inside any cudaMalloc allocation).
IpcBufferHandle exportIpcBuffer(const void* p);

/// The base of the allocation holding device pointer `p`, and its size.
std::pair<void*, size_t> allocationRange(const void* p);
/// CUDA's id of the allocation holding `p` (CU_POINTER_ATTRIBUTE_BUFFER_ID: unique for the
/// process's lifetime, so a freed and reused address gets a new one); 0 when `p` is not
/// device memory or the driver cannot say.
uint64_t bufferIdOf(const void* p) noexcept;

/// Another process's allocation, mapped into this one through its IPC handle
/// (cudaIpcOpenMemHandle); unmapped on destruction.
class IpcMapping {
 public:
  IpcMapping() = default;
  /// Maps the allocation named by `h` on the current device.
  explicit IpcMapping(const IpcBufferHandle& h);
  ~IpcMapping();
  IpcMapping(IpcMapping&& o) noexcept : base_(std::exchange(o.base_, nullptr)) {}
  IpcMapping& operator=(IpcMapping&& o) noexcept;
  /// The allocation's base in this process.
  void* base() const noexcept { return base_; }

 private:
  void* base_ = nullptr;
};

}  // namespace sharc::gpu

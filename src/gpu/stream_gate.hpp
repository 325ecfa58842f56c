// A gate that holds back a CUDA stream until the host opens it: work queued on the stream
// after hold(value) starts only once release(value') with value' >= value has been called.
// The counter lives in mapped pinned host memory; the stream waits on it with the driver's
// stream memory operation (cuStreamWaitValue32), so no GPU thread spins and the caller's
// thread never blocks. Where the driver lacks stream memory operations, a host function on
// the stream waits instead (it blocks that stream's callback thread, not the caller).
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdint>

#include "gpu/cuda_resources.hpp"

namespace sharc::gpu {

class StreamGate {
 public:
  /// `timeout` bounds the host-function fallback's wait (the stream is let go after it).
  explicit StreamGate(std::chrono::milliseconds timeout);
  /// Opens the gate fully and leaves its counter allocated: a stream may still have a wait
  /// on it queued behind other work, and must not read freed memory when it gets there.
  ~StreamGate();
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;

  /// Queues on `stream` a wait until the gate reaches `value` (values increase by one per
  /// hold, wrapping modulo 2^32).
  void hold(cudaStream_t stream, uint32_t value);
  /// Opens the gate up to `value`: every stream held at or below it may go on.
  void release(uint32_t value);
  /// The value last released.
  uint32_t released() const;
  /// True when the driver's stream memory operations are in use (false: host functions).
  bool usesStreamMemOps() const { return waitValue_ != nullptr; }

 private:
  struct HostWait;  // what the fallback's host function needs (never the gate itself)
  PinnedBuffer flag_;
  void* deviceFlag_ = nullptr;
  void* waitValue_ = nullptr;  // cuStreamWaitValue32, or nullptr: host-function fallback
  std::chrono::milliseconds timeout_;
};

}  // namespace sharc::gpu

// StreamGate (stream_gate.hpp): cuStreamWaitValue32 on a mapped pinned counter.
#include "gpu/stream_gate.hpp"

#include <cuda.h>

#include <memory>
#include <thread>

#include "core/log.hpp"
#include "gpu/cuda_check.hpp"

namespace sharc::gpu {

namespace {
using WaitValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

std::atomic<uint32_t>& counterAt(void* p) {
  return *static_cast<std::atomic<uint32_t>*>(p);
}

// The driver's stream-memory-operation entry point, or nullptr when this device or driver
// does not offer them.
void* findWaitValue() {
  int device = 0;
  SHARC_CUDA_CHECK(cudaGetDevice(&device));
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000, cudaEnableDefault,
                                       &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    fn = nullptr;
  }
  SHARC_INFO("stream gate: " << (fn ? "cuStreamWaitValue32"
                                    : "host functions (no stream memory "
                                      "operations in the driver)")
                             << " on device " << device);
  return fn;
}
}  // namespace

struct StreamGate::HostWait {
  std::atomic<uint32_t>* counter;
  uint32_t value;
  std::chrono::milliseconds timeout;
};

StreamGate::StreamGate(std::chrono::milliseconds timeout)
    : flag_(sizeof(uint32_t)), timeout_(timeout) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  new (flag_.get()) std::atomic<uint32_t>(0);
  deviceFlag_ = flag_.devicePointer();
  waitValue_ = findWaitValue();
}

StreamGate::~StreamGate() {
  // Every call was released before the executor let go of its gate; the counter stays
  // (one pinned page per communicator that made stream-ordered calls).
  new PinnedBuffer(std::move(flag_));
}

void StreamGate::hold(cudaStream_t stream, uint32_t value) {
  if (waitValue_) {
    // GEQ compares as (int32_t)(*flag - value) >= 0: safe across wrap-around.
    const CUresult r = reinterpret_cast<WaitValueFn>(waitValue_)(
        reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(deviceFlag_), value,
        CU_STREAM_WAIT_VALUE_GEQ);
    if (r == CUDA_SUCCESS) return;
    SHARC_WARN("stream gate: cuStreamWaitValue32 failed (CUresult " << static_cast<int>(r)
                                                                    << "); using host functions");
    waitValue_ = nullptr;
  }
  auto* wait = new HostWait{&counterAt(flag_.get()), value, timeout_};
  const cudaError_t status = cudaLaunchHostFunc(
      stream,
      [](void* arg) {
        std::unique_ptr<HostWait> w(static_cast<HostWait*>(arg));
        const auto deadline = std::chrono::steady_clock::now() + w->timeout;
        while (static_cast<int32_t>(w->counter->load(std::memory_order_acquire) - w->value) < 0) {
          if (std::chrono::steady_clock::now() > deadline) {
            SHARC_WARN("stream gate: gave up waiting for stream-ordered call " << w->value
                                                                               << " (timeout)");
            return;
          }
          std::this_thread::sleep_for(std::chrono::microseconds(20));
        }
      },
      wait);
  if (status != cudaSuccess) {
    delete wait;
    throwCudaError(status, "cudaLaunchHostFunc (stream gate)", __FILE__, __LINE__);
  }
}

void StreamGate::release(uint32_t value) {
  counterAt(flag_.get()).store(value, std::memory_order_release);
}

uint32_t StreamGate::released() const {
  return counterAt(flag_.get()).load(std::memory_order_acquire);
}

}  // namespace sharc::gpu

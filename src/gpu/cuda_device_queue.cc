// The CUDA device queue (cuda_device_queue.hpp).
#include "gpu/cuda_device_queue.hpp"

#include <algorithm>
#include <sharc/cuda.hpp>
#include <string>

#include "core/log.hpp"
#include "gpu/cuda_check.hpp"
#include "kernels/kernels.hpp"

namespace sharc::gpu {
namespace {

Stream streamOn(int device) {
  DeviceGuard guard(device);
  return Stream();
}

struct PinnedOwner final : QueueMemory::Owner {
  explicit PinnedOwner(PinnedBuffer b) : buffer(std::move(b)) {}
  PinnedBuffer buffer;
};

struct DeviceOwner final : QueueMemory::Owner {
  explicit DeviceOwner(DeviceBuffer b) : buffer(std::move(b)) {}
  DeviceBuffer buffer;
};

}  // namespace

CudaDeviceQueue::CudaDeviceQueue(int device) : device_(device), stream_(streamOn(device)) {}

CudaDeviceQueue::~CudaDeviceQueue() {
  const cudaError_t status = cudaStreamSynchronize(stream_.get());
  if (status != cudaSuccess)
    SHARC_WARN("CUDA device queue: cudaStreamSynchronize failed: " << cudaErrorText(status));
}

QueueMemory CudaDeviceQueue::allocateStaging(size_t bytes) {
  const size_t rounded = core::queueAllocationSize(bytes, 4096, "pinned staging");
  DeviceGuard guard(device_);
  auto owner = std::make_unique<PinnedOwner>(PinnedBuffer(rounded));
  void* p = owner->buffer.get();
  return QueueMemory(p, rounded, std::move(owner));
}

QueueMemory CudaDeviceQueue::allocateDevice(size_t bytes) {
  const size_t rounded = core::queueAllocationSize(bytes, 256, "device scratch");
  DeviceGuard guard(device_);
  auto owner = std::make_unique<DeviceOwner>(DeviceBuffer(rounded));
  void* p = owner->buffer.get();
  return QueueMemory(p, rounded, std::move(owner));
}

void CudaDeviceQueue::reduce(void* dst, const void* a, const void* b, size_t count, DataType type,
                             RedOp op) {
  DeviceGuard guard(device_);
  const void* inputs[2] = {a, b};
  // Avg sums here; divide() finishes it, as on the host path.
  SHARC_CUDA_CHECK(kernels::reduce(dst, inputs, 2, count, type, op == RedOp::Avg ? RedOp::Sum : op,
                                   0, stream_.get()));
}

void CudaDeviceQueue::divide(void* data, size_t count, DataType type, uint64_t divisor) {
  if (count == 0 || divisor <= 1) return;
  DeviceGuard guard(device_);
  const void* inputs[1] = {data};
  SHARC_CUDA_CHECK(
      kernels::reduce(data, inputs, 1, count, type, RedOp::Avg, divisor, stream_.get()));
}

DeviceQueue::Allocation CudaDeviceQueue::allocationOf(const void* p) {
  if (memoryKind(p) != MemoryKind::Device) return {};
  try {
    const auto [base, bytes] = allocationRange(p);
    return {base, bytes, bufferIdOf(p)};
  } catch (const Error&) {
    return {};
  }
}

void CudaDeviceQueue::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  DeviceGuard guard(device_);
  SHARC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_.get()));
}

void CudaDeviceQueue::copy2d(void* dst, size_t dstPitch, const void* src, size_t srcPitch,
                             size_t width, size_t rows) {
  if (width == 0 || rows == 0) return;
  DeviceGuard guard(device_);
  SHARC_CUDA_CHECK(cudaMemcpy2DAsync(dst, dstPitch, src, srcPitch, width, rows, cudaMemcpyDefault,
                                     stream_.get()));
}

DeviceQueue::Ticket CudaDeviceQueue::fence() {
  DeviceGuard guard(device_);
  if (spare_.empty()) spare_.emplace_back();
  spare_.back().record(stream_.get());
  pending_.emplace_back(issued_ + 1, std::move(spare_.back()));
  spare_.pop_back();
  return ++issued_;
}

bool CudaDeviceQueue::retire(Ticket ticket) {
  while (completed_ < ticket && !pending_.empty() && pending_.front().second.query()) {
    completed_ = pending_.front().first;
    spare_.push_back(std::move(pending_.front().second));
    pending_.pop_front();
  }
  return completed_ >= ticket;
}

bool CudaDeviceQueue::done(Ticket ticket) {
  return retire(ticket);
}

void CudaDeviceQueue::wait(Ticket ticket, std::chrono::milliseconds timeout) {
  if (retire(ticket)) return;
  // The first fence at or after `ticket`: once it has finished, so has `ticket`.
  const auto it = std::find_if(pending_.begin(), pending_.end(),
                               [&](const auto& p) { return p.first >= ticket; });
  if (it == pending_.end())
    throw Error(Result::InvalidUsage, "CUDA device queue: wait for fence " +
                                          std::to_string(ticket) + " that was never issued (last " +
                                          std::to_string(issued_) + ")");
  constexpr long kLongest = 1L << 40;  // ~35 years: keeps the deadline arithmetic in range
  const long ms =
      std::min<long>(static_cast<long>(std::max<int64_t>(timeout.count(), 0)), kLongest);
  const std::string what = "CUDA device queue: fence " + std::to_string(ticket);
  it->second.waitFor(ms, what.c_str());
  retire(ticket);
}

}  // namespace sharc::gpu

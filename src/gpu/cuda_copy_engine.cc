// The CUDA copy engine (cuda_copy_engine.hpp).
#include "gpu/cuda_copy_engine.hpp"

#include <algorithm>
#include <string>

#include "core/log.hpp"
#include "gpu/cuda_check.hpp"

namespace sharc::gpu {
namespace {

Stream streamOn(int device) {
  DeviceGuard guard(device);
  return Stream();
}

struct PinnedOwner final : HostStaging::Owner {
  explicit PinnedOwner(PinnedBuffer b) : buffer(std::move(b)) {}
  PinnedBuffer buffer;
};

}  // namespace

CudaCopyEngine::CudaCopyEngine(int device) : device_(device), stream_(streamOn(device)) {}

CudaCopyEngine::~CudaCopyEngine() {
  const cudaError_t status = cudaStreamSynchronize(stream_.get());
  if (status != cudaSuccess)
    SHARC_WARN("CUDA copy engine: cudaStreamSynchronize failed: " << cudaErrorText(status));
}

HostStaging CudaCopyEngine::allocateStaging(size_t bytes) {
  constexpr size_t kPage = 4096;
  const size_t rounded = (std::max<size_t>(bytes, 1) + kPage - 1) / kPage * kPage;
  if (rounded < bytes)
    throw Error(Result::InvalidArgument,
                "pinned staging of " + std::to_string(bytes) + " bytes overflows");
  DeviceGuard guard(device_);
  auto owner = std::make_unique<PinnedOwner>(PinnedBuffer(rounded));
  void* p = owner->buffer.get();
  return HostStaging(p, rounded, std::move(owner));
}

void CudaCopyEngine::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  DeviceGuard guard(device_);
  SHARC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_.get()));
}

CopyEngine::Ticket CudaCopyEngine::fence() {
  DeviceGuard guard(device_);
  if (spare_.empty()) spare_.emplace_back();
  spare_.back().record(stream_.get());
  pending_.emplace_back(issued_ + 1, std::move(spare_.back()));
  spare_.pop_back();
  return ++issued_;
}

bool CudaCopyEngine::retire(Ticket ticket) {
  while (completed_ < ticket && !pending_.empty() && pending_.front().second.query()) {
    completed_ = pending_.front().first;
    spare_.push_back(std::move(pending_.front().second));
    pending_.pop_front();
  }
  return completed_ >= ticket;
}

bool CudaCopyEngine::done(Ticket ticket) {
  return retire(ticket);
}

void CudaCopyEngine::wait(Ticket ticket, std::chrono::milliseconds timeout) {
  if (retire(ticket)) return;
  // The first fence at or after `ticket`: once it has finished, so has `ticket`.
  const auto it = std::find_if(pending_.begin(), pending_.end(),
                               [&](const auto& p) { return p.first >= ticket; });
  if (it == pending_.end())
    throw Error(Result::InvalidUsage, "CUDA copy engine: wait for fence " + std::to_string(ticket) +
                                          " that was never issued (last " +
                                          std::to_string(issued_) + ")");
  constexpr long kLongest = 1L << 40;  // ~35 years: keeps the deadline arithmetic in range
  const long ms =
      std::min<long>(static_cast<long>(std::max<int64_t>(timeout.count(), 0)), kLongest);
  const std::string what = "CUDA copy engine: fence " + std::to_string(ticket);
  it->second.waitFor(ms, what.c_str());
  retire(ticket);
}

}  // namespace sharc::gpu

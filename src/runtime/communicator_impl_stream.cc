// CommunicatorImpl's stream-ordered calls: validation here, the work in gpu::StreamExecutor
// (one per communicator, made by the first call). Without CUDA built in they throw
// InvalidUsage.
#include <sharc/communicator.hpp>
#include <sharc/cuda.hpp>

#include "core/collective.hpp"
#include "core/log.hpp"
#include "runtime/communicator_impl.hpp"

#if SHARC_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "gpu/cuda_check.hpp"
#include "gpu/stream_executor.hpp"
#else
namespace sharc::gpu {
class StreamExecutor {};  // nothing to run without CUDA
}  // namespace sharc::gpu
#endif

namespace sharc::detail {

// Here, where gpu::StreamExecutor is a complete type: the members own one.
CommunicatorImpl::CommunicatorImpl(std::shared_ptr<CommState> state) : state_(std::move(state)) {}
CommunicatorImpl::~CommunicatorImpl() = default;

void CommunicatorImpl::startStream(CollectiveKind kind, const void* send, void* recv, size_t count,
                                   DataType type, RedOp op, int root, CudaStream stream) {
  validate(kind, send, recv, count, type, op, root);
  const std::string call =
      "rank " + std::to_string(state_->rank) + ": " + core::collectiveName(kind) + "(stream)";
  std::string why;
  if (!cudaAvailable(&why))
    throw Error(Result::InvalidUsage,
                call + ": stream-ordered collectives need CUDA, which is not usable here: " + why);
#if SHARC_HAVE_CUDA
  gpu::StreamCall c;
  switch (kind) {
    case CollectiveKind::AllGather: c.kind = CollectiveKind::AllGather; break;
    case CollectiveKind::ReduceScatter: c.kind = CollectiveKind::ReduceScatter; break;
    case CollectiveKind::AllReduce: c.kind = CollectiveKind::AllReduce; break;
    case CollectiveKind::Broadcast: c.kind = CollectiveKind::Broadcast; break;
    default: throw Error(Result::InternalError, call + ": no stream-ordered form");
  }
  c.send = send;
  c.recv = recv;
  c.count = count;
  c.type = type;
  c.op = op;
  c.root = root;
  c.stream = stream;
  // The device of the buffers, else the caller's current one (host buffers).
  c.device = memoryDevice(recv);
  if (c.device < 0) SHARC_CUDA_CHECK(cudaGetDevice(&c.device));
  std::lock_guard<std::mutex> lock(streamMu_);
  if (!streamExecutor_) {
    // Collective: every rank makes its first stream-ordered call at the same point. The
    // worker gets a communicator of its own, so its calls never interleave with the caller's.
    std::shared_ptr<Communicator> own = split(0, state_->rank);
    own->impl().state().path = "stream";  // its flight records say they are stream calls
    CommunicatorImpl* worker = &own->impl();
    auto devicePath = [worker](const gpu::StreamCall& s) {
      Request r =
          worker->startOnDevice(s.kind, s.send, s.recv, s.count, s.type, s.op, s.root, s.device);
      waitRequest(*r.state_, worker->state().timeout.load());
    };
    streamExecutor_ = std::make_unique<gpu::StreamExecutor>(std::move(own), state_->timeout.load(),
                                                            std::move(devicePath));
    SHARC_INFO(call << ": stream-ordered calls start (device " << c.device << ")");
  }
  streamExecutor_->enqueue(c);
#else
  (void)stream;
#endif
}

Result CommunicatorImpl::streamAsyncError(std::string* message) const {
#if SHARC_HAVE_CUDA
  std::lock_guard<std::mutex> lock(streamMu_);
  if (streamExecutor_) return streamExecutor_->asyncError(message);
#endif
  if (message) message->clear();
  return Result::Success;
}

void CommunicatorImpl::synchronizeStreamCalls(std::chrono::milliseconds timeout) {
#if SHARC_HAVE_CUDA
  std::lock_guard<std::mutex> lock(streamMu_);
  if (streamExecutor_) streamExecutor_->synchronize(timeout);
#else
  (void)timeout;
#endif
}

void CommunicatorImpl::stopStreamCalls() noexcept {
  std::unique_ptr<gpu::StreamExecutor> executor;
  {
    std::lock_guard<std::mutex> lock(streamMu_);
    executor = std::move(streamExecutor_);
  }
  executor.reset();  // finishes the queued calls, then destroys the worker's communicator
}

}  // namespace sharc::detail

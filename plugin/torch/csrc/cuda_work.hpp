// CUDA tensors without CUDA headers: the extension builds against any torch (CPU-only
// included) through c10's device-generic stream, event and guard APIs, and finds the one
// CUDA-specific piece it needs (a stream's cudaStream_t) in torch's libc10_cuda at run time.
//
// The stream rules are ProcessGroupNCCL's: a collective on CUDA tensors runs on the group's
// internal stream after the work queued on the caller's current stream; Work.wait() makes
// the current stream wait for it (the host does not block); the tensors stay alive, and
// the caching allocator keeps their memory, until the internal stream is past the work.
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <memory>
#include <mutex>
#include <sharc/communicator.hpp>
#include <string>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

namespace sharc::torch_backend {

/// The cudaStream_t of a CUDA stream (throws when torch has no CUDA).
sharc::CudaStream nativeCudaStream(const c10::Stream& stream);

/// This thread's current stream on `device`.
c10::Stream currentStream(c10::Device device);

/// A stream of `device` from torch's pool, for the group's own use.
c10::Stream poolStream(c10::Device device);

/// Tells the caching allocator that `stream` uses `t`'s memory: freeing `t` then does not
/// hand the memory out again before the stream is past its current work.
void recordOnStream(const at::Tensor& t, const c10::Stream& stream);

/// The work of collectives queued on a group's internal stream.
class CudaWork final : public c10d::Work {
 public:
  /// Records the end event on `stream` (after the collectives) and completes the future, a
  /// CUDA-aware one: waiting on it makes the current stream wait for `stream`, as NCCL's.
  /// `keepAlive` (and `outputs`) are held until the work is seen complete or destroyed.
  CudaWork(int rank, c10d::OpType type, std::string call, std::shared_ptr<sharc::Communicator> comm,
           c10::Stream stream, std::vector<at::Tensor> outputs,
           std::vector<at::Tensor> keepAlive = {});
  ~CudaWork() override;

  /// True once the internal stream is past the work; throws nothing (exception() has the
  /// failure, if the engine reported one).
  bool isCompleted() override;
  /// Makes the current stream wait for the work (no host wait), then throws the engine's
  /// failure if one is known. A positive `timeout` also blocks the host until the work has
  /// run, failing after `timeout`.
  bool wait(std::chrono::milliseconds timeout) override;
  /// The current stream waits for the work.
  void synchronize() override;
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  /// Blocks the calling thread until the work has run (a coalesced work that mixes host and
  /// CUDA operations); throws the engine's failure.
  void hostSynchronize();
  const c10::Stream& stream() const { return stream_; }

 private:
  // The engine's stream-call failure as a torch error, or nullptr.
  std::exception_ptr asyncError() const;

  std::string call_;
  std::shared_ptr<sharc::Communicator> comm_;
  c10::Stream stream_;
  c10::Event end_;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keepAlive_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::mutex mu_;  // guards keepAlive_ and the finish
  bool concluded_ = false;
};

}  // namespace sharc::torch_backend

// The engine operations of one torch call, on the host or stream-ordered, and the staging of
// CUDA tensors through host memory for the operations that have no stream-ordered form.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Event.h>

#include <functional>
#include <memory>
#include <optional>
#include <sharc/communicator.hpp>
#include <string>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <utility>
#include <vector>

namespace sharc::torch_backend {

class ProcessGroupSharc;

/// Issues the collectives of one torch call on `device`:
///  * CPU: non-blocking engine requests; the work completes when they do.
///  * CUDA: the engine's stream-ordered forms on the group's internal stream of the device,
///    each after an event recorded on the caller's current stream (so after everything the
///    caller queued before, including the argument preparation of this call); the work's end
///    event follows them on the internal stream (see cuda_work.hpp).
class Launch {
 public:
  Launch(ProcessGroupSharc& pg, std::string call, c10::Device device);
  /// A call that failed after issuing some of its operations (a later tensor was refused)
  /// never reaches finish(): the issued operations still run, here and on the peers, so
  /// their tensors are kept until they end (CPU: by a work sharc's progress thread drives to
  /// its end; CUDA: recorded on the internal stream) instead of being freed under them.
  ~Launch();
  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;

  bool onCuda() const { return device_.is_cuda(); }

  void allGather(const at::Tensor& in, at::Tensor& out);
  void reduceScatter(const at::Tensor& in, at::Tensor& out, sharc::RedOp op);
  void allReduce(const at::Tensor& in, at::Tensor& out, sharc::RedOp op);
  void broadcast(at::Tensor& t, int root);

  /// Keeps `t` alive (and its memory out of the caching allocator's hands) until the work is
  /// done.
  void keep(const at::Tensor& t) { keep_.push_back(t); }
  /// Runs `step` after the collectives: when they have completed (CPU), or queued on the
  /// internal stream now (CUDA; `step`'s torch ops run with that stream current).
  void then(std::function<void()> step);
  /// The work of the call; `outputs` are its result().
  c10::intrusive_ptr<c10d::Work> finish(c10d::OpType type, std::vector<at::Tensor> outputs);

 private:
  // Checks the tensors' device; CUDA: the internal stream waits for the current stream.
  void prepare(std::initializer_list<const at::Tensor*> tensors);
  template <typename F>
  void streamCall(F&& f);

  ProcessGroupSharc& pg_;
  std::string call_;
  c10::Device device_;
  std::optional<c10::Stream> stream_;  // CUDA: the group's internal stream
  sharc::CudaStream handle_ = nullptr;
  std::optional<c10::Event> ready_;  // CUDA: marks the current stream's work before a call
  std::vector<sharc::Request> requests_;
  std::vector<at::Tensor> keep_;
  std::vector<std::function<void()>> steps_;
  std::vector<at::Tensor> issued_;  // the tensors of the operations issued so far
  bool finished_ = false;
};

/// CUDA tensors of the operations with no stream-ordered form (gather, scatter, all-to-all,
/// send, recv): each input is copied to the host when the call is made (after the work
/// queued on the current stream; the calling thread waits for that copy), each output is
/// received in host memory and copied to the device when the operation has succeeded, before
/// the work completes (so before wait() returns). CPU tensors pass through unchanged.
class HostStaging {
 public:
  explicit HostStaging(ProcessGroupSharc& pg) : pg_(pg) {}
  /// `t` on the host (contiguous).
  at::Tensor input(const at::Tensor& t);
  /// Where the operation writes output `t`: `t` itself on the CPU, else a host tensor copied
  /// into `t` by done().
  at::Tensor output(const at::Tensor& t);
  /// A host tensor for `t` (`t` if it is a contiguous CPU tensor); the caller copies it into
  /// `t` in its completion step, which done() runs with the staging stream current.
  at::Tensor target(const at::Tensor& t);
  /// `onSuccess`, then the copies to the devices; completes on the host (the copies are
  /// synchronous).
  std::function<void()> done(std::function<void()> onSuccess = {});

 private:
  ProcessGroupSharc& pg_;
  std::optional<c10::Device> device_;   // the CUDA device of the outputs, if any
  std::shared_ptr<c10::Event> issued_;  // recorded on the current stream at the call
  std::vector<std::pair<at::Tensor, at::Tensor>> back_;  // (device output, host tensor)
};

}  // namespace sharc::torch_backend

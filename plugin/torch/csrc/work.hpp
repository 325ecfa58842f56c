// The c10d::Work of every sharc operation: one or more engine requests, the tensors the
// caller gets back, and what to do once they all succeed (copy out, rescale).
#pragma once

#include <ATen/core/ivalue.h>

#include <functional>
#include <mutex>
#include <sharc/communicator.hpp>
#include <string>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

namespace sharc::torch_backend {

class SharcWork final : public c10d::Work {
 public:
  /// `call` names the torch collective in errors ("all_gather_into_tensor");
  /// `keepAlive` holds the tensors (inputs, temporaries) the requests read or write;
  /// `onSuccess` runs once, after every request has completed.
  SharcWork(int rank, c10d::OpType type, std::string call, std::vector<sharc::Request> requests,
            std::vector<at::Tensor> outputs, std::vector<at::Tensor> keepAlive = {},
            std::function<void()> onSuccess = {});
  ~SharcWork() override;

  /// Drives the engine once; true once finished (successfully or not).
  bool isCompleted() override;
  /// Blocks until done (timeout 0: the operation's own deadline); throws its error.
  bool wait(std::chrono::milliseconds timeout) override;
  std::vector<at::Tensor> result() override { return outputs_; }
  void synchronize() override {}
  /// Completed by sharc's progress thread even if nobody waits (DDP's hooks rely on it).
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  /// Source rank of a receive: the one it named, or the one a receive from any source took.
  int sourceRank() const override { return anySource_ ? anySource_.source() : sourceRank_; }
  void setSourceRank(int rank) { sourceRank_ = rank; }
  /// A receive from any source: its source is `request`'s once it has completed.
  void setSourceFrom(sharc::Request request) { anySource_ = std::move(request); }

  /// One poll of every pending request; finishes the work when they are all done or one
  /// failed. `block`: wait instead of testing. Returns true once finished.
  bool advance(bool block, std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

 private:
  std::string call_;
  std::vector<sharc::Request> requests_;
  std::vector<bool> done_;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keepAlive_;
  std::function<void()> onSuccess_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::mutex advanceMu_;  // one thread advances a work at a time
  bool concluded_ = false;
  std::exception_ptr error_;
  int sourceRank_ = -1;
  sharc::Request anySource_;
};

/// A work that is already finished (operations with nothing to do).
c10::intrusive_ptr<SharcWork> finishedWork(int rank, c10d::OpType type, std::string call,
                                           std::vector<at::Tensor> outputs);

}  // namespace sharc::torch_backend

#include "launch.hpp"

#include <c10/core/DeviceGuard.h>
#include <c10/core/StreamGuard.h>

#include <memory>
#include <sharc/cuda.hpp>

#include "backend.hpp"
#include "cuda_work.hpp"
#include "tensor_args.hpp"

namespace sharc::torch_backend {

Launch::Launch(ProcessGroupSharc& pg, std::string call, c10::Device device)
    : pg_(pg), call_(std::move(call)), device_(device) {
  if (!device_.is_cuda()) return;
  std::string why;
  if (!sharc::cudaAvailable(&why))
    reject(call_, pg_.rank_,
           "CUDA tensors, but sharc cannot use CUDA here: " + why +
               " (reinstall sharc where nvcc is found, or set SHARC_WITH_CUDA=ON; or map cuda "
               "to another backend: \"cpu:sharc,cuda:nccl\")");
  const auto& streams = pg_.deviceStreams(device_);
  stream_ = streams.internal;
  handle_ = streams.handle;
}

Launch::~Launch() {
  if (finished_ || issued_.empty()) return;
  try {
    if (onCuda()) {
      for (const at::Tensor& t : issued_) recordOnStream(t, *stream_);
      return;
    }
    auto work = c10::make_intrusive<SharcWork>(
        pg_.rank_, c10d::OpType::UNKNOWN, call_ + " (the part issued before it failed)",
        std::move(requests_), std::vector<at::Tensor>{}, std::move(issued_));
    work->getFuture();  // the progress thread drives it to its end; nobody reads the result
  } catch (const std::exception& e) {
    TORCH_WARN("sharc ", call_, ": could not keep the tensors of a failed call: ", e.what());
  }
}

void Launch::prepare(std::initializer_list<const at::Tensor*> tensors) {
  for (const at::Tensor* t : tensors)
    if (t->device() != device_)
      reject(call_, pg_.rank_,
             "tensors on " + device_.str() + " and " + t->device().str() +
                 ": one call's tensors must be on one device");
  for (const at::Tensor* t : tensors) issued_.push_back(*t);
  if (!onCuda()) return;
  if (!ready_) ready_.emplace(c10::DeviceType::CUDA);
  ready_->record(currentStream(device_));
  ready_->block(*stream_);
}

template <typename F>
void Launch::streamCall(F&& f) {
  c10::DeviceGuard guard(device_);  // the engine takes the current device as the stream's
  engineCall(call_, pg_.rank_, std::forward<F>(f));
  pg_.streamCalls_ = true;
}

void Launch::allGather(const at::Tensor& in, at::Tensor& out) {
  prepare({&in, &out});
  const Layout l = transportLayout(in);
  if (onCuda())
    streamCall(
        [&] { pg_.comm_->allGather(in.data_ptr(), out.data_ptr(), l.count, l.type, handle_); });
  else
    requests_.push_back(engineCall(call_, pg_.rank_, [&] {
      return pg_.comm_->iallGather(in.data_ptr(), out.data_ptr(), l.count, l.type);
    }));
}

void Launch::reduceScatter(const at::Tensor& in, at::Tensor& out, sharc::RedOp op) {
  prepare({&in, &out});
  const size_t count = static_cast<size_t>(out.numel());
  const sharc::DataType type = *nativeType(in.scalar_type());
  if (onCuda())
    streamCall(
        [&] { pg_.comm_->reduceScatter(in.data_ptr(), out.data_ptr(), count, type, op, handle_); });
  else
    requests_.push_back(engineCall(call_, pg_.rank_, [&] {
      return pg_.comm_->ireduceScatter(in.data_ptr(), out.data_ptr(), count, type, op);
    }));
}

void Launch::allReduce(const at::Tensor& in, at::Tensor& out, sharc::RedOp op) {
  prepare({&in, &out});
  const size_t count = static_cast<size_t>(in.numel());
  const sharc::DataType type = *nativeType(in.scalar_type());
  if (onCuda())
    streamCall(
        [&] { pg_.comm_->allReduce(in.data_ptr(), out.data_ptr(), count, type, op, handle_); });
  else
    requests_.push_back(engineCall(call_, pg_.rank_, [&] {
      return pg_.comm_->iallReduce(in.data_ptr(), out.data_ptr(), count, type, op);
    }));
}

void Launch::broadcast(at::Tensor& t, int root) {
  prepare({&t});
  const Layout l = transportLayout(t);
  if (onCuda())
    streamCall(
        [&] { pg_.comm_->broadcast(t.data_ptr(), t.data_ptr(), l.count, l.type, root, handle_); });
  else
    requests_.push_back(engineCall(call_, pg_.rank_, [&] {
      return pg_.comm_->ibroadcast(t.data_ptr(), t.data_ptr(), l.count, l.type, root);
    }));
}

void Launch::then(std::function<void()> step) {
  if (!onCuda()) {
    steps_.push_back(std::move(step));
    return;
  }
  c10::StreamGuard guard(*stream_);
  step();
}

c10::intrusive_ptr<c10d::Work> Launch::finish(c10d::OpType type, std::vector<at::Tensor> outputs) {
  finished_ = true;
  if (onCuda()) {
    for (const at::Tensor& t : keep_) recordOnStream(t, *stream_);
    for (const at::Tensor& t : outputs) recordOnStream(t, *stream_);
    return pg_.trackCuda(c10::make_intrusive<CudaWork>(pg_.rank_, type, call_, pg_.comm_, *stream_,
                                                       std::move(outputs), std::move(keep_)));
  }
  std::function<void()> onSuccess;
  if (!steps_.empty())
    onSuccess = [steps = std::move(steps_)] {
      for (const auto& step : steps) step();
    };
  return pg_.makeWork(type, call_, std::move(requests_), std::move(outputs), std::move(keep_),
                      std::move(onSuccess));
}

at::Tensor HostStaging::input(const at::Tensor& t) {
  const at::Tensor c = t.is_contiguous() ? t : t.contiguous();
  return c.is_cpu() ? c : c.to(at::kCPU);  // waits for the current stream
}

at::Tensor HostStaging::output(const at::Tensor& t) {
  if (t.is_cpu()) return t;
  at::Tensor host = target(t);
  back_.emplace_back(t, host);
  return host;
}

at::Tensor HostStaging::target(const at::Tensor& t) {
  if (t.is_cpu() && t.is_contiguous()) return t;
  if (t.is_cuda() && !issued_) {
    // The copy to the device comes after what the caller queued before this call.
    device_ = t.device();
    issued_ = std::make_shared<c10::Event>(c10::DeviceType::CUDA);
    issued_->record(currentStream(t.device()));
  }
  return at::empty(t.sizes(), t.options().device(at::kCPU));
}

std::function<void()> HostStaging::done(std::function<void()> onSuccess) {
  if (!device_) {
    if (back_.empty()) return onSuccess;
    return [onSuccess = std::move(onSuccess), back = std::move(back_)] {
      if (onSuccess) onSuccess();
      for (const auto& [out, host] : back) out.copy_(host);
    };
  }
  const c10::Stream stream = pg_.deviceStreams(*device_).staging;
  return [onSuccess = std::move(onSuccess), back = std::move(back_), stream, issued = issued_] {
    issued->block(stream);
    c10::StreamGuard guard(stream);
    if (onSuccess) onSuccess();
    // Host-to-device copies from pageable memory: done when copy_ returns.
    for (const auto& [out, host] : back) out.copy_(host);
  };
}

}  // namespace sharc::torch_backend

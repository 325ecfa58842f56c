#include "cuda_work.hpp"

#include <ATen/core/jit_type.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>
#include <dlfcn.h>

#include <thread>

#if SHARC_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include "torch_compat.hpp"

namespace sharc::torch_backend {
namespace {

#if !SHARC_TORCH_CUDA
// Built without CUDA headers (a CPU-only torch, or no toolkit when the extension was built):
// c10::cuda::CUDAStream::stream() const, defined out of line in libc10_cuda (every torch
// version), looked up at run time. A CUDAStream holds exactly one c10::Stream, so a
// c10::Stream stands for it as `this`.
using StreamFn = CUstream_st* (*)(const c10::Stream*);
constexpr const char* kStreamSymbol = "_ZNK3c104cuda10CUDAStream6streamEv";
static_assert(sizeof(c10::Stream) == 16, "c10::Stream is expected to be a Device and an id");

StreamFn resolveStreamFn(std::string* why) {
  // Already loaded with libtorch when torch has CUDA; RTLD_NOLOAD never loads it.
  void* lib = dlopen("libc10_cuda.so", RTLD_NOW | RTLD_NOLOAD);
  void* sym = lib ? dlsym(lib, kStreamSymbol) : nullptr;
  if (!sym) sym = dlsym(RTLD_DEFAULT, kStreamSymbol);
  if (!sym)
    *why = lib ? "libc10_cuda.so lacks " + std::string(kStreamSymbol)
               : "libc10_cuda.so is not loaded (torch without CUDA)";
  return reinterpret_cast<StreamFn>(sym);
}
#endif

c10::impl::VirtualGuardImpl& cudaImpl() {
  static c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  return impl;
}

}  // namespace

sharc::CudaStream nativeCudaStream(const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::CUDA, "sharc: ", stream,
              " is not a CUDA stream");
#if SHARC_TORCH_CUDA
  // torch's own CUDA API (the extension was built against a CUDA torch with CUDA headers).
  return c10::cuda::CUDAStream(c10::cuda::CUDAStream::UNCHECKED, stream).stream();
#else
  static std::string why;
  static const StreamFn fn = resolveStreamFn(&why);
  TORCH_CHECK(fn != nullptr, "sharc: cannot get the cudaStream_t of ", stream, ": ", why);
  return fn(&stream);
#endif
}

c10::Stream currentStream(c10::Device device) {
  return cudaImpl().getStream(device);
}

c10::Stream poolStream(c10::Device device) {
  return cudaImpl().getStreamFromGlobalPool(device, /*isHighPriority=*/false);
}

void recordOnStream(const at::Tensor& t, const c10::Stream& stream) {
  if (t.defined() && t.is_cuda() && t.has_storage())
    cudaImpl().recordDataPtrOnStream(t.storage().data_ptr(), stream);
}

CudaWork::CudaWork(int rank, c10d::OpType type, std::string call,
                   std::shared_ptr<sharc::Communicator> comm, c10::Stream stream,
                   std::vector<at::Tensor> outputs, std::vector<at::Tensor> keepAlive)
    : c10d::Work(rank, type),
      call_(std::move(call)),
      comm_(std::move(comm)),
      stream_(stream),
      end_(c10::DeviceType::CUDA),
      outputs_(std::move(outputs)),
      keepAlive_(std::move(keepAlive)),
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                   std::vector<c10::Device>{stream.device()})) {
  // Recorded with the internal stream current: the future's events mark the same point.
  c10::StreamGuard guard(stream_);
  end_.record(stream_);
  future_->markCompleted(c10::IValue(outputs_));
}

CudaWork::~CudaWork() = default;

std::exception_ptr CudaWork::asyncError() const {
  std::string message;
  if (comm_->asyncError(&message) == sharc::Result::Success) return nullptr;
  return std::make_exception_ptr(c10::DistBackendError(
      {__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
      "sharc " + call_ + " (rank " + std::to_string(rank_) +
          "): " + (message.empty() ? "a stream-ordered call failed" : message)));
}

bool CudaWork::isCompleted() {
  std::lock_guard<std::mutex> lock(mu_);
  if (concluded_) return true;
  if (!end_.query()) return false;
  concluded_ = true;
  keepAlive_.clear();  // the internal stream is past the work
  finish(asyncError());
  return true;
}

void CudaWork::synchronize() {
  end_.block(currentStream(stream_.device()));
}

bool CudaWork::wait(std::chrono::milliseconds timeout) {
  synchronize();
  if (timeout.count() > 0) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!isCompleted()) {
      if (std::chrono::steady_clock::now() >= deadline)
        throw c10::DistBackendError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                                    "sharc " + call_ + ": wait timed out after " +
                                        std::to_string(timeout.count()) +
                                        " ms (the operation is still pending on its stream)");
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  if (auto error = asyncError()) std::rethrow_exception(error);
  return true;
}

void CudaWork::hostSynchronize() {
  end_.synchronize();
  isCompleted();
  if (auto error = asyncError()) std::rethrow_exception(error);
}

}  // namespace sharc::torch_backend

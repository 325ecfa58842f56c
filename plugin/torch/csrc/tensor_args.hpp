// Checking torch's arguments and mapping them onto sharc's types and reduction ops.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <sharc/error.hpp>
#include <sharc/types.hpp>
#include <string>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <vector>

namespace sharc::torch_backend {

/// Throws a torch error "sharc <call> (rank R): <what>".
[[noreturn]] void reject(const std::string& call, int rank, const std::string& what);

/// Runs an engine call; its sharc::Error becomes a torch error naming `call` and `rank`.
template <typename F>
auto engineCall(const std::string& call, int rank, F&& f) {
  try {
    return f();
  } catch (const sharc::Error& e) {
    reject(call, rank, e.what());
  }
}

/// sharc's type for a torch dtype, if it has one (bool travels as uint8).
std::optional<sharc::DataType> nativeType(at::ScalarType type);

/// How a tensor crosses the wire when nothing is reduced: in its own type, or as bytes.
struct Layout {
  sharc::DataType type = sharc::DataType::Uint8;
  size_t count = 0;  ///< elements of `type`
};
Layout transportLayout(const at::Tensor& t);

/// A torch reduction as sharc runs it: the op, and a factor to multiply the input by first
/// (PREMUL_SUM).
struct Reduction {
  sharc::RedOp op = sharc::RedOp::Sum;
  std::optional<at::Tensor> premul;  ///< scalar factor (PREMUL_SUM): a 0-dim host tensor
};
/// Maps `op` for `type`; rejects what sharc cannot do (bitwise ops, AVG of integers).
Reduction mapReduction(const std::string& call, int rank, const c10d::ReduceOp& op,
                       at::ScalarType type);

/// A tensor sharc may read: on the CPU or a CUDA device (contiguous copies are made of
/// strided inputs, on the current stream).
at::Tensor readable(const std::string& call, int rank, const at::Tensor& t);
/// A tensor sharc writes into: on the CPU or a CUDA device and contiguous, else rejected.
void checkWritable(const std::string& call, int rank, const at::Tensor& t, const char* role);
/// `output` has the dtype of `input`.
void checkSameType(const std::string& call, int rank, const at::Tensor& output,
                   const at::Tensor& input);
/// Exactly one tensor per process (torch passes lists for multi-device calls).
const at::Tensor& single(const std::string& call, int rank, const std::vector<at::Tensor>& ts);
/// All tensors of `ts` have `type` and `numel` elements.
void checkUniform(const std::string& call, int rank, const std::vector<at::Tensor>& ts,
                  at::ScalarType type, int64_t numel, const char* role);

}  // namespace sharc::torch_backend

#include "tensor_args.hpp"

#include <c10/util/Exception.h>

namespace sharc::torch_backend {

void reject(const std::string& call, int rank, const std::string& what) {
  TORCH_CHECK(false, "sharc ", call, " (rank ", rank, "): ", what);
}

std::optional<sharc::DataType> nativeType(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return sharc::DataType::Float32;
    case at::kDouble: return sharc::DataType::Float64;
    case at::kHalf: return sharc::DataType::Float16;
    case at::kBFloat16: return sharc::DataType::BFloat16;
    case at::kChar: return sharc::DataType::Int8;
    case at::kByte: return sharc::DataType::Uint8;
    case at::kBool: return sharc::DataType::Uint8;
    case at::kInt: return sharc::DataType::Int32;
    case at::kLong: return sharc::DataType::Int64;
    default: return std::nullopt;
  }
}

Layout transportLayout(const at::Tensor& t) {
  if (const auto type = nativeType(t.scalar_type())) return {*type, static_cast<size_t>(t.numel())};
  return {sharc::DataType::Uint8, static_cast<size_t>(t.numel()) * t.element_size()};
}

Reduction mapReduction(const std::string& call, int rank, const c10d::ReduceOp& op,
                       at::ScalarType type) {
  if (!nativeType(type))
    reject(call, rank,
           std::string("cannot reduce ") + c10::toString(type) +
               " tensors (expected float32, float64, float16, bfloat16, int8, uint8, int32, "
               "int64 or bool)");
  const bool isBool = type == at::kBool;
  const bool isFloat = at::isFloatingType(type);
  Reduction r;
  switch (op.op_) {
    case c10d::ReduceOp::SUM: r.op = isBool ? sharc::RedOp::Max : sharc::RedOp::Sum; break;
    case c10d::ReduceOp::PRODUCT: r.op = isBool ? sharc::RedOp::Min : sharc::RedOp::Prod; break;
    case c10d::ReduceOp::MIN: r.op = sharc::RedOp::Min; break;
    case c10d::ReduceOp::MAX: r.op = sharc::RedOp::Max; break;
    case c10d::ReduceOp::AVG:
      if (!isFloat)
        reject(call, rank,
               std::string("ReduceOp.AVG needs a floating-point tensor (got ") +
                   c10::toString(type) + "); use SUM and divide");
      r.op = sharc::RedOp::Avg;
      break;
    case c10d::ReduceOp::PREMUL_SUM: {
      if (!isFloat)
        reject(call, rank,
               std::string("PREMUL_SUM needs a floating-point tensor (got ") + c10::toString(type) +
                   ")");
      const auto* factor = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
      if (factor == nullptr) reject(call, rank, "PREMUL_SUM without its factor");
      r.op = sharc::RedOp::Sum;
      // A 0-dim host tensor: it scales CPU and CUDA tensors alike (as a scalar argument).
      if (factor->tensor_factor.defined() && factor->tensor_factor.numel() != 1)
        reject(call, rank,
               "PREMUL_SUM's factor tensor has " + std::to_string(factor->tensor_factor.numel()) +
                   " elements (expected one)");
      r.premul = factor->tensor_factor.defined()
                     ? factor->tensor_factor.to(at::kCPU, type).reshape({})
                     : at::scalar_tensor(factor->double_factor, at::TensorOptions().dtype(type));
      break;
    }
    default:
      reject(call, rank,
             "unsupported reduce op " + std::to_string(static_cast<int>(op.op_)) +
                 " (sharc supports SUM, AVG, PRODUCT, MIN, MAX and PREMUL_SUM)");
  }
  return r;
}

namespace {
void checkDevice(const std::string& call, int rank, const at::Tensor& t) {
  if (!t.defined()) reject(call, rank, "undefined tensor");
  if (!t.device().is_cpu() && !t.device().is_cuda())
    reject(call, rank,
           "tensor on " + t.device().str() +
               ": sharc's torch backend handles CPU and CUDA tensors (map other devices to "
               "another backend, e.g. \"cpu:sharc,cuda:sharc,xpu:xccl\")");
  if (t.is_sparse()) reject(call, rank, "sparse tensors are not supported");
}
}  // namespace

at::Tensor readable(const std::string& call, int rank, const at::Tensor& t) {
  checkDevice(call, rank, t);
  return t.is_contiguous() ? t : t.contiguous();
}

void checkWritable(const std::string& call, int rank, const at::Tensor& t, const char* role) {
  checkDevice(call, rank, t);
  if (!t.is_contiguous())
    reject(call, rank,
           std::string(role) + " tensor is not contiguous (sizes " + c10::str(t.sizes()) +
               ", strides " + c10::str(t.strides()) + "); pass a contiguous tensor");
}

void checkSameType(const std::string& call, int rank, const at::Tensor& output,
                   const at::Tensor& input) {
  if (output.scalar_type() != input.scalar_type())
    reject(call, rank,
           std::string("output dtype ") + c10::toString(output.scalar_type()) +
               " differs from input dtype " + c10::toString(input.scalar_type()));
}

const at::Tensor& single(const std::string& call, int rank, const std::vector<at::Tensor>& ts) {
  if (ts.size() != 1)
    reject(call, rank, "expected one tensor per process, got " + std::to_string(ts.size()));
  return ts[0];
}

void checkUniform(const std::string& call, int rank, const std::vector<at::Tensor>& ts,
                  at::ScalarType type, int64_t numel, const char* role) {
  for (size_t i = 0; i < ts.size(); ++i) {
    if (ts[i].scalar_type() != type)
      reject(call, rank,
             std::string(role) + " tensor " + std::to_string(i) + " has dtype " +
                 c10::toString(ts[i].scalar_type()) + " (expected " + c10::toString(type) + ")");
    if (ts[i].numel() != numel)
      reject(call, rank,
             std::string(role) + " tensor " + std::to_string(i) + " has " +
                 std::to_string(ts[i].numel()) + " elements (expected " + std::to_string(numel) +
                 ")");
  }
}

}  // namespace sharc::torch_backend

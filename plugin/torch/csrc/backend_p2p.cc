// ProcessGroupSharc: send/recv and the collectives built from point-to-point groups
// (gather, scatter, all-to-all). The engine has no stream-ordered form of these: CUDA tensors
// are staged through host memory (HostStaging in launch.hpp).
#include <cstring>

#include "backend.hpp"
#include "tensor_args.hpp"

namespace sharc::torch_backend {
namespace {

// User tags map below the tags reserved here for the collectives built from messages, so a
// user's send never matches a gather's.
constexpr uint32_t kGatherTag = sharc::PointToPoint::kMaxTags - 1;
constexpr uint32_t kScatterTag = kGatherTag - 1;
constexpr uint32_t kAllToAllTag = kScatterTag - 1;
constexpr uint32_t kUserTags = kAllToAllTag;

// Tags outside sharc's tag space are refused rather than folded onto another tag.
uint32_t userTag(const std::string& call, int rank, int tag) {
  if (tag < 0 || static_cast<uint32_t>(tag) >= kUserTags)
    reject(call, rank,
           "tag " + std::to_string(tag) + " is outside sharc's tag range 0.." +
               std::to_string(kUserTags - 1));
  return static_cast<uint32_t>(tag);
}

using Kind = sharc::PointToPoint::Kind;

sharc::PointToPoint message(Kind kind, int peer, const at::Tensor& t, uint32_t tag,
                            size_t offset = 0, size_t bytes = SIZE_MAX) {
  auto* base = static_cast<std::byte*>(t.data_ptr());
  return {kind, peer, base + offset, bytes == SIZE_MAX ? t.nbytes() : bytes, tag};
}

void checkRoot(const std::string& call, int rank, int size, int64_t root) {
  if (root < 0 || root >= size)
    reject(call, rank,
           "root " + std::to_string(root) + " out of range (expected 0.." +
               std::to_string(size - 1) + ")");
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupSharc::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  const std::string call = "gather";
  checkRoot(call, rank_, size_, opts.rootRank);
  HostStaging staging(*this);
  const at::Tensor in = staging.input(readable(call, rank_, single(call, rank_, inputs)));
  const int root = static_cast<int>(opts.rootRank);
  std::vector<sharc::PointToPoint> ops;
  std::vector<at::Tensor> outs, keep{in}, targets;
  if (rank_ == root) {
    if (outputs.size() != 1 || outputs[0].size() != static_cast<size_t>(size_))
      reject(call, rank_,
             "the root expects one list of " + std::to_string(size_) + " output tensors");
    outs = outputs[0];
    checkUniform(call, rank_, outs, in.scalar_type(), in.numel(), "output");
    for (int r = 0; r < size_; ++r) {
      at::Tensor target = staging.target(outs[static_cast<size_t>(r)]);
      targets.push_back(target);
      if (r == rank_)
        target.copy_(in.view(target.sizes()));
      else
        ops.push_back(message(Kind::Recv, r, target, kGatherTag));
    }
    keep.insert(keep.end(), targets.begin(), targets.end());
  } else {
    if (!outputs.empty() && !outputs[0].empty())
      reject(call, rank_, "only the root (rank " + std::to_string(root) + ") passes outputs");
    ops.push_back(message(Kind::Send, root, in, kGatherTag));
  }
  auto req = engineCall(call, rank_, [&] { return comm_->igroup(ops); });
  return makeWork(c10d::OpType::GATHER, call, {req}, outs, std::move(keep),
                  staging.done([outs, targets] {
                    for (size_t r = 0; r < outs.size(); ++r)
                      if (!targets[r].is_same(outs[r])) outs[r].copy_(targets[r]);
                  }));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSharc::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  const std::string call = "scatter";
  checkRoot(call, rank_, size_, opts.rootRank);
  at::Tensor& userOut = const_cast<at::Tensor&>(single(call, rank_, outputs));
  checkWritable(call, rank_, userOut, "output");
  HostStaging staging(*this);
  at::Tensor out = staging.output(userOut);
  const int root = static_cast<int>(opts.rootRank);
  std::vector<sharc::PointToPoint> ops;
  std::vector<at::Tensor> keep{out};
  if (rank_ == root) {
    if (inputs.size() != 1 || inputs[0].size() != static_cast<size_t>(size_))
      reject(call, rank_,
             "the root expects one list of " + std::to_string(size_) + " input tensors");
    checkUniform(call, rank_, inputs[0], out.scalar_type(), out.numel(), "input");
    for (int r = 0; r < size_; ++r) {
      const at::Tensor in = staging.input(readable(call, rank_, inputs[0][static_cast<size_t>(r)]));
      keep.push_back(in);
      if (r == rank_)
        out.copy_(in.view(out.sizes()));
      else
        ops.push_back(message(Kind::Send, r, in, kScatterTag));
    }
  } else {
    if (!inputs.empty() && !inputs[0].empty())
      reject(call, rank_, "only the root (rank " + std::to_string(root) + ") passes inputs");
    ops.push_back(message(Kind::Recv, root, out, kScatterTag));
  }
  auto req = engineCall(call, rank_, [&] { return comm_->igroup(ops); });
  return makeWork(c10d::OpType::SCATTER, call, {req}, {userOut}, std::move(keep), staging.done());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSharc::alltoall_base(at::Tensor& userOutput,
                                                                at::Tensor& input,
                                                                std::vector<int64_t>& outputSplits,
                                                                std::vector<int64_t>& inputSplits,
                                                                const c10d::AllToAllOptions&) {
  const std::string call = "all_to_all_single";
  checkWritable(call, rank_, userOutput, "output");
  HostStaging staging(*this);
  const at::Tensor in = staging.input(readable(call, rank_, input));
  at::Tensor output = staging.output(userOutput);
  if (in.scalar_type() != output.scalar_type())
    reject(call, rank_, "input and output dtypes differ");
  if (in.dim() == 0 || output.dim() == 0) reject(call, rank_, "tensors need at least one dim");
  const size_t inRow = in.size(0) ? in.nbytes() / static_cast<size_t>(in.size(0)) : 0;
  const size_t outRow = output.size(0) ? output.nbytes() / static_cast<size_t>(output.size(0)) : 0;
  // Rows per rank: the splits given, or equal parts of dim 0.
  auto rows = [&](const std::vector<int64_t>& splits, const at::Tensor& t, const char* what) {
    std::vector<int64_t> out(static_cast<size_t>(size_));
    if (splits.empty()) {
      if (t.size(0) % size_ != 0)
        reject(call, rank_,
               std::string(what) + " dim 0 (" + std::to_string(t.size(0)) +
                   ") is not divisible by the world size " + std::to_string(size_) +
                   "; pass split sizes");
      std::fill(out.begin(), out.end(), t.size(0) / size_);
      return out;
    }
    int64_t sum = 0;
    for (int64_t s : splits) sum += s;
    if (splits.size() != static_cast<size_t>(size_) || sum != t.size(0))
      reject(call, rank_,
             std::string(what) + " splits must be " + std::to_string(size_) +
                 " sizes adding up to dim 0 (" + std::to_string(t.size(0)) + ")");
    return splits;
  };
  const std::vector<int64_t> inRows = rows(inputSplits, in, "input");
  const std::vector<int64_t> outRows = rows(outputSplits, output, "output");
  std::vector<sharc::PointToPoint> ops;
  size_t inOff = 0, outOff = 0;
  for (int r = 0; r < size_; ++r) {
    const size_t sendBytes = static_cast<size_t>(inRows[static_cast<size_t>(r)]) * inRow;
    const size_t recvBytes = static_cast<size_t>(outRows[static_cast<size_t>(r)]) * outRow;
    if (r == rank_) {
      if (sendBytes != recvBytes)
        reject(call, rank_,
               "this rank sends itself " + std::to_string(sendBytes) + " bytes but expects " +
                   std::to_string(recvBytes));
      std::memcpy(static_cast<std::byte*>(output.data_ptr()) + outOff,
                  static_cast<const std::byte*>(in.data_ptr()) + inOff, sendBytes);
    } else {
      ops.push_back(message(Kind::Send, r, in, kAllToAllTag, inOff, sendBytes));
      ops.push_back(message(Kind::Recv, r, output, kAllToAllTag, outOff, recvBytes));
    }
    inOff += sendBytes;
    outOff += recvBytes;
  }
  auto req = engineCall(call, rank_, [&] { return comm_->igroup(ops); });
  return makeWork(c10d::OpType::ALLTOALL_BASE, call, {req}, {userOutput}, {in, output},
                  staging.done());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSharc::alltoall(std::vector<at::Tensor>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllToAllOptions&) {
  const std::string call = "all_to_all";
  if (outputs.size() != static_cast<size_t>(size_) || inputs.size() != outputs.size())
    reject(call, rank_,
           "expected " + std::to_string(size_) + " input and output tensors, got " +
               std::to_string(inputs.size()) + " and " + std::to_string(outputs.size()));
  std::vector<sharc::PointToPoint> ops;
  std::vector<at::Tensor> keep;
  HostStaging staging(*this);
  for (int r = 0; r < size_; ++r) {
    checkWritable(call, rank_, outputs[static_cast<size_t>(r)], "output");
    const at::Tensor in = staging.input(readable(call, rank_, inputs[static_cast<size_t>(r)]));
    const at::Tensor out = staging.output(outputs[static_cast<size_t>(r)]);
    keep.push_back(in);
    keep.push_back(out);
    if (r == rank_) {
      if (in.nbytes() != out.nbytes())
        reject(call, rank_, "this rank's own input and output sizes differ");
      out.copy_(in.view_as(out));
    } else {
      ops.push_back(message(Kind::Send, r, in, kAllToAllTag));
      ops.push_back(message(Kind::Recv, r, out, kAllToAllTag));
    }
  }
  auto req = engineCall(call, rank_, [&] { return comm_->igroup(ops); });
  return makeWork(c10d::OpType::ALLTOALL, call, {req}, outputs, std::move(keep), staging.done());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSharc::send(std::vector<at::Tensor>& tensors,
                                                       int dstRank, int tag) {
  const std::string call = "send";
  HostStaging staging(*this);
  const at::Tensor t = staging.input(readable(call, rank_, single(call, rank_, tensors)));
  auto req = engineCall(call, rank_, [&] {
    return comm_->isend(t.data_ptr(), t.nbytes(), dstRank, userTag(call, rank_, tag));
  });
  return makeWork(c10d::OpType::SEND, call, {req}, {}, {t});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSharc::recv(std::vector<at::Tensor>& tensors,
                                                       int srcRank, int tag) {
  return receive(tensors, srcRank, tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSharc::recvAnysource(std::vector<at::Tensor>& tensors,
                                                                int tag) {
  return receive(tensors, std::nullopt, tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSharc::receive(std::vector<at::Tensor>& tensors,
                                                          std::optional<int> srcRank, int tag) {
  const std::string call = "recv";
  const bool anySource = !srcRank;
  at::Tensor& userT = const_cast<at::Tensor&>(single(call, rank_, tensors));
  checkWritable(call, rank_, userT, "recv");
  HostStaging staging(*this);
  const at::Tensor t = staging.output(userT);
  auto req = engineCall(call, rank_, [&] {
    const uint32_t engineTag = userTag(call, rank_, tag);
    return anySource ? comm_->irecvAny(t.data_ptr(), t.nbytes(), engineTag)
                     : comm_->irecv(t.data_ptr(), t.nbytes(), *srcRank, engineTag);
  });
  auto work = c10::make_intrusive<SharcWork>(
      rank_, anySource ? c10d::OpType::RECVANYSOURCE : c10d::OpType::RECV, call,
      std::vector<sharc::Request>{req}, std::vector<at::Tensor>{userT}, std::vector<at::Tensor>{t},
      staging.done());
  if (anySource)
    work->setSourceFrom(req);
  else
    work->setSourceRank(*srcRank);
  ++seq_;
  return track(work, {req});
}

}  // namespace sharc::torch_backend

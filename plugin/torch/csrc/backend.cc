// ProcessGroupSharc: creation, the collectives sharc's engine runs natively, coalescing.
#include "backend.hpp"

#include <algorithm>
#include <mutex>

#include "tensor_args.hpp"

namespace sharc::torch_backend {
namespace {

// The group's rendezvous through torch's store: round k, rank r writes "sharc/k/r".
sharc::ExchangeFn storeExchange(c10::intrusive_ptr<c10d::Store> store, int rank, int size) {
  auto round = std::make_shared<int>(0);
  return [store = std::move(store), rank, size, round](const std::string& blob) {
    const std::string base = "sharc/" + std::to_string((*round)++) + "/";
    store->set(base + std::to_string(rank), std::vector<uint8_t>(blob.begin(), blob.end()));
    std::vector<std::string> all(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) {
      const std::vector<uint8_t> v = store->get(base + std::to_string(r));
      all[static_cast<size_t>(r)].assign(v.begin(), v.end());
    }
    return all;
  };
}

// The communicator of the default group: sub-groups are carved from its endpoint.
std::mutex worldMu;
std::weak_ptr<sharc::Communicator> world;

}  // namespace

ProcessGroupSharc::ProcessGroupSharc(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                     int size, std::chrono::milliseconds timeout,
                                     const std::vector<int64_t>& globalRanks)
    : c10d::Backend(rank, size), globalRanks_(globalRanks), timeout_(timeout) {
  sharc::CommOptions options;
  options.timeout = timeout;
  const sharc::ExchangeFn exchange = storeExchange(store, rank, size);
  std::shared_ptr<sharc::Communicator> parent;
  if (!globalRanks.empty()) {
    std::lock_guard<std::mutex> lock(worldMu);
    parent = world.lock();
  }
  // A sub-group of the default group shares its endpoint: only the members agree on an id.
  bool carved = false;
  if (parent) {
    std::vector<int> members;
    for (int64_t g : globalRanks)
      if (g >= 0 && g < parent->size()) members.push_back(static_cast<int>(g));
    if (members.size() == globalRanks.size() &&
        members[static_cast<size_t>(rank)] == parent->rank()) {
      comm_ = engineCall("new_group", rank,
                         [&] { return parent->subgroup(members, exchange, timeout); });
      carved = true;
    }
  }
  if (!carved)
    comm_ = engineCall("init_process_group", rank, [&] {
      return sharc::Communicator::createFromExchange(rank, size, exchange, options);
    });
  if (globalRanks.empty()) {
    std::lock_guard<std::mutex> lock(worldMu);
    world = comm_;
  }
}

ProcessGroupSharc::ProcessGroupSharc(std::shared_ptr<sharc::Communicator> comm,
                                     std::chrono::milliseconds timeout,
                                     std::vector<int64_t> globalRanks)
    : c10d::Backend(comm->rank(), comm->size()),
      comm_(std::move(comm)),
      globalRanks_(std::move(globalRanks)),
      timeout_(timeout) {}

#if SHARC_TORCH_HAS_SPLIT
c10::intrusive_ptr<c10d::Backend> ProcessGroupSharc::split(
    const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
    const c10::intrusive_ptr<Options>& opts) {
  const auto me = std::find(ranks.begin(), ranks.end(), rank_);
  if (me == ranks.end()) return nullptr;
  const int newRank = static_cast<int>(me - ranks.begin());
  const int newSize = static_cast<int>(ranks.size());
  const std::chrono::milliseconds timeout =
      opts ? std::chrono::duration_cast<std::chrono::milliseconds>(opts->timeout) : timeout_.load();
  std::vector<int64_t> global;
  for (int r : ranks) {
    TORCH_CHECK(r >= 0 && r < size_, "rank ", rank_, ": split: rank ", r,
                " is not in this group (expected 0..", size_ - 1, ")");
    global.push_back(globalRanks_.empty() ? r : globalRanks_[static_cast<size_t>(r)]);
  }
  // The store may share the parent's connection, and the exchange blocks on it.
  const sharc::ExchangeFn exchange = storeExchange(store->clone(), newRank, newSize);
  auto child = engineCall("split_group", rank_, [&] {
    return comm_->subgroup(std::vector<int>(ranks.begin(), ranks.end()), exchange, timeout);
  });
  return c10::make_intrusive<ProcessGroupSharc>(std::move(child), timeout, std::move(global));
}
#endif

#if SHARC_TORCH_HAS_SHRINK
c10::intrusive_ptr<c10d::Backend> ProcessGroupSharc::shrink(
    const std::vector<int64_t>& ranksToExclude, int shrinkFlags,
    const c10::intrusive_ptr<Options>& opts) {
  const std::chrono::milliseconds timeout =
      opts ? std::chrono::duration_cast<std::chrono::milliseconds>(opts->timeout) : timeout_.load();
  const std::vector<int> excluded(ranksToExclude.begin(), ranksToExclude.end());
  std::vector<int64_t> global;
  for (int r = 0; r < size_; ++r)
    if (std::find(excluded.begin(), excluded.end(), r) == excluded.end())
      global.push_back(globalRanks_.empty() ? r : globalRanks_[static_cast<size_t>(r)]);
  constexpr int kShrinkAbort = 0x01;  // torch's SHRINK_ABORT
  auto child = engineCall("shrink_group", rank_, [&] {
    return comm_->shrink(excluded, timeout, (shrinkFlags & kShrinkAbort) != 0);
  });
  return c10::make_intrusive<ProcessGroupSharc>(std::move(child), timeout, std::move(global));
}
#endif

ProcessGroupSharc::~ProcessGroupSharc() {
  if (comm_) shutdownGroup();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSharc::track(
    c10::intrusive_ptr<SharcWork> work, const std::vector<sharc::Request>& requests) {
  if (coalescing_) {
    coalesced_.insert(coalesced_.end(), requests.begin(), requests.end());
    coalescedWorks_.push_back(work);
  }
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSharc::makeWork(c10d::OpType type,
                                                           const std::string& call,
                                                           std::vector<sharc::Request> requests,
                                                           std::vector<at::Tensor> outputs,
                                                           std::vector<at::Tensor> keepAlive,
                                                           std::function<void()> onSuccess) {
  ++seq_;
  const std::vector<sharc::Request> copy = coalescing_ ? requests : std::vector<sharc::Request>{};
  auto work =
      c10::make_intrusive<SharcWork>(rank_, type, call, std::move(requests), std::move(outputs),
                                     std::move(keepAlive), std::move(onSuccess));
  return track(std::move(work), copy);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSharc::trackCuda(c10::intrusive_ptr<CudaWork> work) {
  ++seq_;
  if (coalescing_) coalescedCuda_.push_back(work);
  return work;
}

const ProcessGroupSharc::DeviceStreams& ProcessGroupSharc::deviceStreams(c10::Device device) {
  std::lock_guard<std::mutex> lock(streamsMu_);
  auto it = streams_.find(device.index());
  if (it == streams_.end()) {
    const c10::Stream internal = poolStream(device);
    it = streams_
             .emplace(device.index(),
                      DeviceStreams{internal, nativeCudaStream(internal), poolStream(device)})
             .first;
  }
  return it->second;
}

void ProcessGroupSharc::startCoalescing() {
  coalescing_ = true;
  coalesced_.clear();
  coalescedWorks_.clear();
  coalescedCuda_.clear();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSharc::endCoalescing() {
  coalescing_ = false;
  const std::string call = "coalesced operations";
  std::vector<at::Tensor> outputs;
  for (auto& w : coalescedWorks_)
    for (auto& t : w->result()) outputs.push_back(t);
  for (auto& w : coalescedCuda_)
    for (auto& t : w->result()) outputs.push_back(t);
  auto works = std::move(coalescedWorks_);
  auto cuda = std::move(coalescedCuda_);
  // CUDA only: the member works ran in order on one internal stream; one end event after
  // them stands for all.
  if (!cuda.empty() && works.empty())
    return c10::make_intrusive<CudaWork>(rank_, c10d::OpType::COALESCED, call, comm_,
                                         cuda.back()->stream(), std::move(outputs));
  // The member works finish (copy out) when this one does; CUDA ones are waited for on the
  // host.
  return c10::make_intrusive<SharcWork>(rank_, c10d::OpType::COALESCED, call, std::move(coalesced_),
                                        std::move(outputs), std::vector<at::Tensor>{},
                                        [works, cuda] {
                                          for (auto& w : works)
                                            w->wait(std::chrono::milliseconds(0));
                                          for (auto& w : cuda) w->hostSynchronize();
                                        });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSharc::broadcast(std::vector<at::Tensor>& tensors,
                                                            const c10d::BroadcastOptions& opts) {
  const std::string call = "broadcast";
  at::Tensor& t = const_cast<at::Tensor&>(single(call, rank_, tensors));
  checkWritable(call, rank_, t, "broadcast");
  if (opts.rootTensor != 0) reject(call, rank_, "rootTensor must be 0 (one tensor per process)");
  Launch launch(*this, call, t.device());
  launch.broadcast(t, static_cast<int>(opts.rootRank));
  return launch.finish(c10d::OpType::BROADCAST, {t});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSharc::allreduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::AllreduceOptions& opts) {
  const std::string call = "all_reduce";
  at::Tensor& t = const_cast<at::Tensor&>(single(call, rank_, tensors));
  checkWritable(call, rank_, t, "all_reduce");
  const Reduction red = mapReduction(call, rank_, opts.reduceOp, t.scalar_type());
  Launch launch(*this, call, t.device());
  if (red.premul) t.mul_(*red.premul);
  launch.allReduce(t, t, red.op);
  return launch.finish(c10d::OpType::ALLREDUCE, {t});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSharc::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  const std::string call = "all_reduce_coalesced";
  // Every tensor is checked before any is touched or issued (a PREMUL_SUM scales in place).
  std::vector<Reduction> reductions;
  for (at::Tensor& t : tensors) {
    checkWritable(call, rank_, t, "all_reduce_coalesced");
    reductions.push_back(mapReduction(call, rank_, opts.reduceOp, t.scalar_type()));
  }
  Launch launch(*this, call, tensors.empty() ? c10::Device(c10::kCPU) : tensors[0].device());
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (reductions[i].premul) tensors[i].mul_(*reductions[i].premul);
    launch.allReduce(tensors[i], tensors[i], reductions[i].op);
  }
  return launch.finish(c10d::OpType::ALLREDUCE_COALESCED, tensors);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSharc::reduce(std::vector<at::Tensor>& tensors,
                                                         const c10d::ReduceOptions& opts) {
  const std::string call = "reduce";
  at::Tensor& t = const_cast<at::Tensor&>(single(call, rank_, tensors));
  checkWritable(call, rank_, t, "reduce");
  if (opts.rootRank < 0 || opts.rootRank >= size_)
    reject(call, rank_, "root " + std::to_string(opts.rootRank) + " out of range");
  const Reduction red = mapReduction(call, rank_, opts.reduceOp, t.scalar_type());
  Launch launch(*this, call, t.device());
  // Every rank reduces; only the root keeps the result (the others' tensors are unchanged).
  const bool root = opts.rootRank == rank_;
  at::Tensor src = red.premul ? (root ? t.mul_(*red.premul) : t.mul(*red.premul)) : t;
  at::Tensor dst = root ? t : at::empty_like(t);
  launch.keep(src);
  launch.keep(dst);
  launch.allReduce(src, dst, red.op);
  return launch.finish(c10d::OpType::REDUCE, {t});
}

void ProcessGroupSharc::allGatherOne(Launch& launch, const std::string& call, at::Tensor& output,
                                     const at::Tensor& input) {
  at::Tensor in = readable(call, rank_, input);
  checkWritable(call, rank_, output, "output");
  checkSameType(call, rank_, output, in);
  if (output.numel() != in.numel() * size_)
    reject(call, rank_,
           "output has " + std::to_string(output.numel()) + " elements (expected world size " +
               std::to_string(size_) + " x input's " + std::to_string(in.numel()) + ")");
  launch.keep(in);
  launch.allGather(in, output);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSharc::_allgather_base(at::Tensor& output,
                                                                  at::Tensor& input,
                                                                  const c10d::AllgatherOptions&) {
  const std::string call = "all_gather_into_tensor";
  Launch launch(*this, call, input.device());
  allGatherOne(launch, call, output, input);
  return launch.finish(c10d::OpType::_ALLGATHER_BASE, {output});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSharc::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  const std::string call = "all_gather_into_tensor_coalesced";
  if (outputs.size() != inputs.size())
    reject(call, rank_,
           std::to_string(outputs.size()) + " outputs for " + std::to_string(inputs.size()) +
               " inputs");
  Launch launch(*this, call, inputs.empty() ? c10::Device(c10::kCPU) : inputs[0].device());
  for (size_t i = 0; i < inputs.size(); ++i) allGatherOne(launch, call, outputs[i], inputs[i]);
  return launch.finish(c10d::OpType::COALESCED, outputs);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSharc::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  const std::string call = "all_gather";
  const at::Tensor in = readable(call, rank_, single(call, rank_, inputs));
  if (outputs.size() != 1 || outputs[0].size() != static_cast<size_t>(size_))
    reject(call, rank_,
           "expected one list of " + std::to_string(size_) + " output tensors per process");
  std::vector<at::Tensor> outs = outputs[0];
  checkUniform(call, rank_, outs, in.scalar_type(), in.numel(), "output");
  Launch launch(*this, call, in.device());
  at::Tensor flat = at::empty({in.numel() * size_}, in.options());
  launch.keep(flat);
  allGatherOne(launch, call, flat, in);
  const int64_t n = in.numel();
  launch.then([outs, flat, n] {
    for (size_t r = 0; r < outs.size(); ++r)
      outs[r].copy_(flat.narrow(0, static_cast<int64_t>(r) * n, n).view(outs[r].sizes()));
  });
  return launch.finish(c10d::OpType::ALLGATHER, outs);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSharc::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  // outputLists[r][i] receives rank r's inputs[i].
  const std::string call = "all_gather_coalesced";
  if (outputLists.size() != static_cast<size_t>(size_))
    reject(call, rank_,
           "expected one output list per rank (" + std::to_string(size_) + "), got " +
               std::to_string(outputLists.size()));
  for (size_t r = 0; r < outputLists.size(); ++r)
    if (outputLists[r].size() != inputs.size())
      reject(call, rank_,
             "output list " + std::to_string(r) + " has " + std::to_string(outputLists[r].size()) +
                 " tensors (expected one per input: " + std::to_string(inputs.size()) + ")");
  // Each input is gathered on its own (shapes may differ), then copied into the lists.
  Launch launch(*this, call, inputs.empty() ? c10::Device(c10::kCPU) : inputs[0].device());
  std::vector<at::Tensor> outs, flats;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor in = readable(call, rank_, inputs[i]);
    std::vector<at::Tensor> column;
    for (auto& list : outputLists) column.push_back(list[i]);
    checkUniform(call, rank_, column, in.scalar_type(), in.numel(), "output");
    at::Tensor flat = at::empty({in.numel() * size_}, in.options());
    flats.push_back(flat);
    launch.keep(flat);
    allGatherOne(launch, call, flat, in);
  }
  for (auto& list : outputLists) outs.insert(outs.end(), list.begin(), list.end());
  launch.then([lists = outputLists, flats] {
    for (size_t i = 0; i < flats.size(); ++i) {
      const int64_t n = flats[i].numel() / static_cast<int64_t>(lists.size());
      for (size_t r = 0; r < lists.size(); ++r)
        lists[r][i].copy_(
            flats[i].narrow(0, static_cast<int64_t>(r) * n, n).view(lists[r][i].sizes()));
    }
  });
  return launch.finish(c10d::OpType::ALLGATHER_COALESCED, outs);
}

void ProcessGroupSharc::reduceScatterOne(Launch& launch, const std::string& call,
                                         at::Tensor& output, const at::Tensor& input,
                                         const c10d::ReduceOp& op) {
  at::Tensor in = readable(call, rank_, input);
  checkWritable(call, rank_, output, "output");
  checkSameType(call, rank_, output, in);
  if (in.numel() != output.numel() * size_)
    reject(call, rank_,
           "input has " + std::to_string(in.numel()) + " elements (expected world size " +
               std::to_string(size_) + " x output's " + std::to_string(output.numel()) + ")");
  const Reduction red = mapReduction(call, rank_, op, in.scalar_type());
  if (red.premul) in = in.mul(*red.premul);
  launch.keep(in);
  launch.reduceScatter(in, output, red.op);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSharc::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  const std::string call = "reduce_scatter_tensor";
  Launch launch(*this, call, input.device());
  reduceScatterOne(launch, call, output, input, opts.reduceOp);
  return launch.finish(c10d::OpType::_REDUCE_SCATTER_BASE, {output});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSharc::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const std::string call = "reduce_scatter_tensor_coalesced";
  if (outputs.size() != inputs.size())
    reject(call, rank_,
           std::to_string(outputs.size()) + " outputs for " + std::to_string(inputs.size()) +
               " inputs");
  Launch launch(*this, call, inputs.empty() ? c10::Device(c10::kCPU) : inputs[0].device());
  for (size_t i = 0; i < inputs.size(); ++i)
    reduceScatterOne(launch, call, outputs[i], inputs[i], opts.reduceOp);
  return launch.finish(c10d::OpType::COALESCED, outputs);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSharc::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const std::string call = "reduce_scatter";
  at::Tensor& out = const_cast<at::Tensor&>(single(call, rank_, outputs));
  if (inputs.size() != 1 || inputs[0].size() != static_cast<size_t>(size_))
    reject(call, rank_,
           "expected one list of " + std::to_string(size_) + " input tensors per process");
  checkUniform(call, rank_, inputs[0], out.scalar_type(), out.numel(), "input");
  std::vector<at::Tensor> flat;
  for (const at::Tensor& t : inputs[0]) flat.push_back(readable(call, rank_, t).reshape({-1}));
  const at::Tensor joined = at::cat(flat);
  Launch launch(*this, call, joined.device());
  launch.keep(joined);
  reduceScatterOne(launch, call, out, joined, opts.reduceOp);
  return launch.finish(c10d::OpType::REDUCE_SCATTER, {out});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSharc::barrier(const c10d::BarrierOptions&) {
  // A host barrier. After CUDA collectives it first waits until the engine has run them, so
  // that, as with NCCL, the collectives issued before the barrier are complete after it.
  if (streamCalls_.exchange(false))
    engineCall("barrier", rank_, [&] { comm_->synchronizeStreamCalls(); });
  auto req = engineCall("barrier", rank_, [&] { return comm_->ibarrier(); });
  return makeWork(c10d::OpType::BARRIER, "barrier", {req}, {});
}

c10::intrusive_ptr<c10d::Backend> createBackend(const c10::intrusive_ptr<c10d::Store>& store,
                                                int rank, int size, double timeoutSeconds,
                                                const std::vector<int64_t>& globalRanks) {
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeoutSeconds * 1000.0));
  return c10::make_intrusive<ProcessGroupSharc>(store, rank, size, timeout, globalRanks);
}

}  // namespace sharc::torch_backend

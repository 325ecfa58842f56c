// ProcessGroupSharc: torch.distributed's c10d::Backend over a sharc communicator.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sharc/communicator.hpp>
#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "cuda_work.hpp"
#include "launch.hpp"
#include "torch_compat.hpp"
#include "work.hpp"

namespace sharc::torch_backend {

/// One backend serves both CPU and CUDA tensors (torch registers it for both devices):
/// CPU tensors go through the engine's host collectives, CUDA tensors through its
/// stream-ordered ones on an internal stream per device (see launch.hpp, cuda_work.hpp).
class ProcessGroupSharc final : public c10d::Backend {
 public:
  /// Joins the group (collective over its ranks). `globalRanks` (empty for the default group)
  /// lets a sub-group reuse the world communicator's endpoint; the store carries the
  /// rendezvous either way.
  ProcessGroupSharc(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                    std::chrono::milliseconds timeout, const std::vector<int64_t>& globalRanks);
  /// A group over an existing communicator (a split of this one's).
  ProcessGroupSharc(std::shared_ptr<sharc::Communicator> comm, std::chrono::milliseconds timeout,
                    std::vector<int64_t> globalRanks);
  ~ProcessGroupSharc() override;

  const std::string getBackendName() const override { return "sharc"; }
  /// The sharc communicator (for tools and benchmarks).
  sharc::Communicator& communicator() { return *comm_; }

  // Life cycle (backend_lifecycle.cc). abort() and shutdown() fail every pending work at
  // once (the peers' works through the engine's abort notice) and end the group; they are
  // idempotent and never wait for peers longer than a bounded closing barrier.
  /// Fails every pending and later operation of the group, here and on its peers.
  void abortGroup(const std::string& reason);
  /// Ends the group: pending works fail, then the communicator is destroyed.
  void shutdownGroup();
  /// Bounds the group's operations started from now on (and its options' timeout).
  void changeTimeout(std::chrono::milliseconds timeout);
#if SHARC_TORCH_HAS_ABORT
  void abort() override {
    abortGroup("aborted through torch (ProcessGroup.abort)");
  }
  void shutdown() override {
    shutdownGroup();
  }
  c10d::ErrorType getError() override;
#endif
#if SHARC_TORCH_HAS_BACKEND_OPTIONS
  /// The group's options: backend "sharc", its timeout, its global ranks.
  c10::intrusive_ptr<Options> getBackendOptions() override;
#endif
#if SHARC_TORCH_HAS_SET_TIMEOUT
  void setTimeout(std::chrono::milliseconds timeout) override {
    changeTimeout(timeout);
  }
#endif
#if SHARC_TORCH_HAS_SPLIT
  /// torch's split_group: the members of `ranks` (this group's ranks, in the new group's
  /// order) form a group over this one's endpoint, agreeing through `store`; a rank outside
  /// takes no part and gets nullptr.
  bool supportsSplitting() const override {
    return true;
  }
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;
#endif

#if SHARC_TORCH_HAS_SHRINK
  /// torch's shrink_group: the ranks not in `ranksToExclude` form a group over this one's
  /// endpoint (Communicator::shrink); SHRINK_ABORT in `shrinkFlags` aborts this group first.
  bool supportsShrinking() const override {
    return true;
  }
  c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t>& ranksToExclude,
                                           int shrinkFlags,
                                           const c10::intrusive_ptr<Options>& opts) override;
#endif

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // backend_p2p.cc: what is built from point-to-point messages.
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplits,
                                               std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

  // Sequence numbers (torch's debug wrapper checks that ranks agree on them).
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override {
    return seq_;
  }

  // torch's coalescing manager: the operations in between complete as one work.
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
#if SHARC_TORCH_HAS_SUPPORTS_COALESCING
  /// Operations between startCoalescing and endCoalescing (sends and receives included: torch's
  /// batch_isend_irecv then takes the coalescing path) finish as one work.
  bool supportsCoalescing() const override {
    return true;
  }
#endif

 private:
  // recv and recvAnysource (no srcRank): one receive into tensors[0].
  c10::intrusive_ptr<c10d::Work> receive(std::vector<at::Tensor>& tensors,
                                         std::optional<int> srcRank, int tag);
  friend class Launch;
  friend class HostStaging;

  // Wraps the requests of one call in a work (and records them while coalescing).
  c10::intrusive_ptr<c10d::Work> track(c10::intrusive_ptr<SharcWork> work,
                                       const std::vector<sharc::Request>& requests);
  c10::intrusive_ptr<c10d::Work> makeWork(c10d::OpType type, const std::string& call,
                                          std::vector<sharc::Request> requests,
                                          std::vector<at::Tensor> outputs,
                                          std::vector<at::Tensor> keepAlive = {},
                                          std::function<void()> onSuccess = {});
  // Counts a CUDA work (and records it while coalescing).
  c10::intrusive_ptr<c10d::Work> trackCuda(c10::intrusive_ptr<CudaWork> work);
  // Issues one reduce-scatter of input into output (PREMUL_SUM scales a copy first).
  void reduceScatterOne(Launch& launch, const std::string& call, at::Tensor& output,
                        const at::Tensor& input, const c10d::ReduceOp& op);
  void allGatherOne(Launch& launch, const std::string& call, at::Tensor& output,
                    const at::Tensor& input);

  // The streams of one CUDA device, from torch's pool: `internal` runs the collectives,
  // `staging` the copies back of staged operations (HostStaging in launch.hpp).
  struct DeviceStreams {
    c10::Stream internal;
    sharc::CudaStream handle;  // internal's cudaStream_t
    c10::Stream staging;
  };
  const DeviceStreams& deviceStreams(c10::Device device);

  std::shared_ptr<sharc::Communicator> comm_;
  std::vector<int64_t> globalRanks_;  // empty for the default group
  std::atomic<std::chrono::milliseconds> timeout_;
  std::once_flag ended_;  // shutdown or abort ran
  uint64_t seq_ = 0;      // operations started on this group
  bool coalescing_ = false;
  std::vector<sharc::Request> coalesced_;
  std::vector<c10::intrusive_ptr<SharcWork>> coalescedWorks_;
  std::vector<c10::intrusive_ptr<CudaWork>> coalescedCuda_;
  std::mutex streamsMu_;
  std::map<int, DeviceStreams> streams_;  // by CUDA device index
  std::atomic<bool> streamCalls_{false};  // a stream-ordered call was made since the last barrier
};

/// The creator torch calls for every group of backend "sharc".
c10::intrusive_ptr<c10d::Backend> createBackend(const c10::intrusive_ptr<c10d::Store>& store,
                                                int rank, int size, double timeoutSeconds,
                                                const std::vector<int64_t>& globalRanks);

}  // namespace sharc::torch_backend

// Collectives over memory the host may not touch (CUDA device memory), staged through host
// memory: each chunk is copied into a host staging slot, the host collective runs on the
// slot, and the result is copied back, pipelined so that the copies of neighbouring chunks
// overlap each chunk's collective on the network. The copies go through a DeviceQueue, so the
// pipeline runs (and is tested) over HostDeviceQueue as well as CudaDeviceQueue. Internal to
// sharc; always compiled.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <sharc/communicator.hpp>
#include <sharc/types.hpp>
#include <vector>

#include "core/device_queue.hpp"

namespace sharc::gpu {

using core::DeviceQueue;
using core::QueueMemory;

/// One collective, with the buffer semantics of the host collectives (Communicator), NCCL's
/// in-place forms included; `count` is per rank for AllGather and ReduceScatter.
struct StagedCall {
  CollectiveKind kind = CollectiveKind::AllReduce;  ///< AllGather to Broadcast
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  DataType type = DataType::Float32;
  RedOp op = RedOp::Sum;  ///< ReduceScatter and AllReduce only
  int root = 0;           ///< Broadcast only
};

/// How a staged call is cut into chunks: chunk k covers elements [first(k), first(k) +
/// length(k)) of each rank's block (AllGather, ReduceScatter) or of the buffer (AllReduce,
/// Broadcast). The chunks are of near-equal length (the first ones are the longest), at most
/// max(1, chunkBytes / element size) elements, aligned to 256 bytes where that bound allows,
/// and cover [0, count) exactly. Depends on count, type and chunkBytes only, so every rank
/// cuts alike.
struct ChunkPlan {
  size_t count = 0;
  size_t chunkElems = 0;  ///< length of every chunk but the last (which may be shorter)
  size_t chunks = 0;      ///< 0 for count 0
  size_t first(size_t k) const noexcept { return k * chunkElems; }
  size_t length(size_t k) const noexcept { return std::min(chunkElems, count - first(k)); }
};
/// Throws sharc::Error(InvalidArgument) for chunkBytes 0 or an invalid type.
ChunkPlan planChunks(size_t count, DataType type, size_t chunkBytes);

/// Host staging slots cached between staged calls, so that pinned memory is allocated once
/// rather than per call: a slot grows (is reallocated) when a call needs more, and keeps its
/// size after. Owned by the caller (e.g. one per communicator and device), used by one call
/// at a time; needs `slots` x (chunk bytes per rank x ranks) for AllGather and ReduceScatter.
class StagingPool {
 public:
  static constexpr size_t kDefaultSlots = 3;
  /// `slots` >= 1: 2 overlap the copies of one chunk with the collective of another, 3 (the
  /// default) let the copies in of chunk k+1 and out of chunk k-1 both overlap chunk k.
  explicit StagingPool(DeviceQueue& copies, size_t slots = kDefaultSlots);
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  DeviceQueue& engine() const noexcept { return copies_; }
  size_t slots() const noexcept { return slots_.size(); }
  /// Slot `i` (< slots()), at least `bytes` long; its contents are undefined.
  void* slot(size_t i, size_t bytes);
  /// Bytes of staging held now.
  size_t bytesHeld() const noexcept;
  /// Frees every slot (the next call allocates again).
  void release() noexcept;
  /// Gives slot `i`'s memory up without freeing it: after a failure, for staging that an
  /// unfinished operation may still write.
  void abandon(size_t i) noexcept;

 private:
  DeviceQueue& copies_;
  std::vector<QueueMemory> slots_;
};

/// Runs `call` on buffers the host may not touch, staged through host memory from
/// `staging`'s engine and slots, on host communicator `comm`, in chunks of at most
/// `chunkBytes` per rank (planChunks), pipelined: while chunk k's collective runs on the
/// network, chunk k+1 is copied in and chunk k-1 copied out. Every rank must make the same
/// call (the chunks are the same on every rank; each is one host collective, issued in
/// order). Count 0 issues one host collective of count 0, as the host call would. Blocking;
/// throws sharc::Error at once for bad arguments, the host collective's or the engine's
/// error, or Timeout after `timeout` (milliseconds::max(): none). Before it throws, the copies
/// already enqueued finish; staging that a collective still pending may write is abandoned
/// (leaked, with a warning) rather than freed.
void runStaged(Communicator& comm, StagingPool& staging, const StagedCall& call, size_t chunkBytes,
               std::chrono::milliseconds timeout);

/// The same with staging allocated for this call only (StagingPool::kDefaultSlots slots).
void runStaged(Communicator& comm, DeviceQueue& copies, const StagedCall& call, size_t chunkBytes,
               std::chrono::milliseconds timeout);

}  // namespace sharc::gpu

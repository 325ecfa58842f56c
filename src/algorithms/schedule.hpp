// A schedule is a collective as a graph of operations (send, receive, reduce, copy, divide)
// with dependencies, executed without blocking: advance() posts every operation whose
// dependencies are done, within windows that bound the messages in flight.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <queue>
#include <sharc/error.hpp>
#include <sharc/types.hpp>
#include <string>
#include <vector>

#include "core/device_queue.hpp"
#include "node_map.hpp"
#include "queue_pool.hpp"
#include "send_window.hpp"
#include "tag.hpp"
#include "transport/endpoint.hpp"

namespace sharc::algo {

// Messages in flight per schedule: sends in send_window.hpp (sendWindow, SendWindow).
// At most recvWindow() receives are posted, oldest first: a quarter of what the endpoint's
// provider holds posted (its fi_info rx_attr->size), at most kMaxPostedRecvs. The rest is left
// to collectives running beside this one (FSDP overlaps an AllGather with a ReduceScatter), to
// control receives, and to messages that arrive before their receive, which some providers
// count in the same pool (libfabric's shm, 1,024 entries: fi_trecv fails with ENOMEM when
// they run out; tcp;ofi_rxm holds 2,048). Receives ready out of schedule order (an older one
// still waits on a local operation) may take only the window less its in-order quarter, so
// the oldest receive not yet posted always finds a place. (Posting in the order they became
// ready let receives needed late fill the cap ahead of ones needed now: a ring AllReduce of
// 100+ chunks per block posted its all-gather receives first, its reduce-scatter receives
// never, and every rank waited until the timeout.) The window is wide because an uneven ring
// runs chunk-major at its fast ranks while receives are posted step-major: with 256 places a
// ring AllReduce of 1 GiB on 8+4 ranks lost 19 % waiting for places (docs/planning.md).
/// Most receives a schedule keeps posted at once, whatever the provider holds.
inline constexpr size_t kMaxPostedRecvs = 1024;
/// The receives a schedule keeps posted at once on an endpoint whose provider holds
/// `providerRecvs` posted receives (Endpoint::recvQueueSize()): a quarter, within [4,
/// kMaxPostedRecvs].
constexpr size_t recvWindow(size_t providerRecvs) {
  const size_t quarter = providerRecvs / 4;
  return quarter < 4 ? 4 : (quarter < kMaxPostedRecvs ? quarter : kMaxPostedRecvs);
}
/// Of a window's places, those only the oldest receive not yet posted may take.
constexpr size_t inOrderRecvs(size_t window) {
  return window / 4;
}

/// Scratch memory for schedules, reused across calls (allocation and page faults are costly).
class ScratchPool {
 public:
  struct Buffer {
    std::unique_ptr<std::byte[]> data;
    size_t size = 0;
  };
  Buffer acquire(size_t bytes);
  void release(Buffer buffer);

 private:
  std::vector<Buffer> free_;
};

/// What a schedule needs from its communicator.
struct ScheduleContext {
  transport::Endpoint* endpoint = nullptr;
  const std::vector<uint32_t>* peers = nullptr;  ///< communicator rank -> endpoint peer id
  /// communicator rank -> process id, when every rank is on this host and cross-memory
  /// attach works between them (null otherwise: no remoteRead).
  const std::vector<int32_t>* pids = nullptr;
  ScratchPool* scratch = nullptr;
  /// Node of every rank (never null while a schedule runs: one node when all share a host).
  const NodeMap* nodes = nullptr;
  /// Hierarchical algorithms use the rotated proxy rule (hierarchical_pattern.hpp).
  bool hierRotate = false;
  int rank = 0;
  int size = 1;
  uint32_t commId = 0;
  /// The call's sequence number on its communicator (1-based; the tag carries its low bits).
  uint64_t seq = 0;
  CollectiveKind kind = CollectiveKind::Barrier;
  DataType type = DataType::Uint8;
  RedOp op = RedOp::Sum;
  size_t count = 0;
  std::string algorithm;  ///< for messages and logs
  std::chrono::steady_clock::time_point deadline;
  /// The call's own buffers (null where it has none): the regions rearm() moves the
  /// operations' addresses between.
  const void* send = nullptr;
  const void* recv = nullptr;
  size_t sendBytes = 0, recvBytes = 0;

  // ---- the device path (docs/gpu.md): null `device` runs everything on the host ----
  /// Runs the schedule's reductions, copies and divisions (asynchronously, tracked by fences);
  /// the host then touches no buffer of the call, only the schedule's hostScratch().
  core::DeviceQueue* device = nullptr;
  /// scratch() memory on the device path (device memory from `device`).
  QueuePool* deviceScratch = nullptr;
  /// Host staging for links that cannot carry device memory (allocateStaging).
  QueuePool* staging = nullptr;
  /// Per communicator rank: non-zero where the link carries device memory itself (the
  /// provider has FI_HMEM); zero where each message is staged through host memory.
  const std::vector<uint8_t>* directLinks = nullptr;
};

class Schedule final : public transport::TransferOwner {
 public:
  using OpId = uint32_t;
  enum class State { Running, Done, Failed };

  explicit Schedule(ScheduleContext ctx);
  ~Schedule();
  Schedule(const Schedule&) = delete;
  Schedule& operator=(const Schedule&) = delete;

  // ---- building (before start) ----
  OpId send(int peer, uint32_t slot, const void* buf, size_t bytes);
  OpId recv(int peer, uint32_t slot, void* buf, size_t bytes);
  /// Point-to-point forms: the message's sequence is the caller's (counted per peer and tag)
  /// instead of the schedule's.
  OpId sendWithSeq(int peer, uint32_t seq, uint32_t slot, const void* buf, size_t bytes);
  OpId recvWithSeq(int peer, uint32_t seq, uint32_t slot, void* buf, size_t bytes);
  /// dst = a op b over `count` elements of the schedule's type (Avg reduces as Sum).
  OpId reduce(void* dst, const void* a, const void* b, size_t count);
  OpId copy(void* dst, const void* src, size_t bytes);
  /// `rows` copies of `width` bytes, row i from src + i * srcPitch to dst + i * dstPitch, as
  /// one operation (one strided copy on a device queue).
  OpId copyRows(void* dst, size_t dstPitch, const void* src, size_t srcPitch, size_t width,
                size_t rows);
  /// Copies `bytes` at (remoteBase[0] + offset) in `peer`'s memory into dst (single copy,
  /// same host). remoteBase points at a transport::RemoteBuffer: [0] is the peer's buffer and
  /// [1] its length in bytes, the rest its shared allocation if it has one (then the copy is
  /// done through a mapping of it instead of cross-memory attach);
  /// both are read when the operation runs (a receive may deliver them).
  /// `expectedLength` is what remoteBase[1] must be (the same call on every rank has buffers
  /// of the same length); anything else fails the schedule as a mismatched count.
  OpId remoteRead(int peer, const uint64_t* remoteBase, uint64_t expectedLength, uint64_t offset,
                  void* dst, size_t bytes);
  /// The reverse: copies `bytes` from src to (remoteBase[0] + offset) in `peer`'s memory.
  OpId remoteWrite(int peer, const uint64_t* remoteBase, uint64_t expectedLength, uint64_t offset,
                   const void* src, size_t bytes);
  /// data /= size (finishes Avg); a no-op for other ops.
  OpId divide(void* data, size_t count);
  /// A local check run once its dependencies are done: a non-empty result fails the
  /// schedule as a mismatched call (InvalidUsage) with that text after describe().
  OpId check(std::function<std::string()> verify);
  /// `op` starts only after `before` has completed.
  void after(OpId op, OpId before);
  /// Told of a racing receive's message (race): `won` for the first to arrive; otherwise a
  /// loser's message that arrived before its cancel took effect.
  using ArrivalFn = std::function<void(OpId recv, size_t bytes, bool won)>;
  /// Makes the receives `recvs` race (a receive from any source): the first to complete wins
  /// (its count must be exact), the others are canceled, or never posted. A loser whose message
  /// came anyway (any count up to its size) is handed to `onArrival` too, and is no error.
  /// One race per schedule, built before it starts.
  void race(std::vector<OpId> recvs, ArrivalFn onArrival);
  /// Scratch bytes owned by the schedule (returned to the pool when it is destroyed): device
  /// memory on the device path, for data the schedule's operations move and reduce.
  std::byte* scratch(size_t bytes);
  /// Host scratch for what the host itself reads (a check's inputs: roots, addresses), on the
  /// device path too; transfers of it are never staged.
  std::byte* hostScratch(size_t bytes);
  /// The device scratch this schedule holds, as (address, bytes): what must be registered
  /// with the provider before it starts.
  std::vector<std::pair<const void*, size_t>> deviceScratchRanges() const;
  /// Whether local operations run on a device queue.
  bool onDevice() const { return ctx_.device != nullptr; }
  /// Transfers staged through host memory so far (device path; for logs and tests).
  uint64_t stagedTransfers() const { return stagedTransfers_; }
  size_t opCount() const { return ops_.size(); }
  const ScheduleContext& context() const { return ctx_; }

  // ---- reuse (a training loop repeats its shapes: rearming skips the build) ----
  /// Readies this schedule for rearm() and says whether it can be rearmed: every operation's
  /// addresses lie in the call's buffers or the schedule's scratch (no checks, remote copies,
  /// host scratch filled at build time, or point-to-point sequences), and it has not started.
  /// Turns each operation's addresses into offsets in their region (send, receive, scratch).
  bool prepareReuse();
  /// Makes a finished (Done) or never started schedule, prepared by prepareReuse(), run again
  /// as call `seq` with these buffers, which must have the sizes and in-place form of the
  /// call it was built for: restores the run state it first started with, takes scratch from
  /// the pools again and points the regions at the new memory, touching no operation.
  /// Returns false (and changes nothing) otherwise.
  bool rearm(uint64_t seq, std::chrono::steady_clock::time_point deadline, const void* send,
             const void* recv);

  /// What an operation does (the engine runs it; the planner's replay reads it).
  enum class OpKind : uint8_t { Send, Recv, Reduce, Copy, Divide, RemoteRead, RemoteWrite, Check };
  /// One operation as built, for replaying a schedule offline (src/plan/schedule_sim.cc).
  struct OpInfo {
    OpKind kind = OpKind::Check;
    int peer = -1;      ///< communicator rank (transfers and remote copies)
    uint32_t slot = 0;  ///< the tag's slot (transfers)
    uint32_t seq = 0;   ///< the message's own sequence when ownSeq (point-to-point)
    bool ownSeq = false;
    size_t bytes = 0;                ///< bytes moved, copied, reduced (one input) or divided
    std::vector<OpId> dependents{};  ///< operations that start only after this one
  };
  /// Every operation in id order (read-only: building state, before start).
  std::vector<OpInfo> describeOps() const;

  // ---- running ----
  /// Posts what is ready (receives, then sends) and runs local operations, over and over until
  /// nothing moves: a device queue's all at once, the thread's one per round, so that a send
  /// a reduction makes ready is posted before the next reduction runs. Returns the state.
  State advance();
  State state() const { return state_; }
  /// Moves the deadline (SHARC_TIMEOUT_MS) later by `extra` (the stall probe's grace for a
  /// rank whose peer is alive and itself waiting: stall_probe.cc).
  void extendDeadline(std::chrono::steady_clock::duration extra) { ctx_.deadline += extra; }
  /// Fails the schedule: cancels posted transfers (they drain via the endpoint).
  void fail(Result code, const std::string& message);
  Result errorCode() const { return errorCode_; }
  const std::string& errorMessage() const { return errorMessage_; }
  /// True when no transfer of this schedule is still posted and no operation of it still
  /// queued on the device (safe to free); polls the device queue.
  bool quiescent();
  /// "rank 2: AllGather #57 (count=7, float32, ring)" for messages.
  std::string describe() const;
  /// Where a running schedule stands, for the flight recorder and the stall probe.
  struct Progress {
    size_t opsDone = 0, opsTotal = 0;
    const char* waitingFor = "none";  ///< "recv", "send", "local", "device" or "none"
    int peer = -1;                    ///< communicator rank waited on, -1 if none
    uint64_t bytesReceived = 0, bytesExpected = 0;
  };
  /// (For a failed schedule: where it stood when it failed.)
  Progress progress() const;

  void onTransferDone(transport::Transfer& t, size_t bytes, uint64_t tag) override;
  void onTransferError(transport::Transfer& t, Result code, const std::string& message) override;

 private:
  enum class OpState : uint8_t { Waiting, Ready, Posted, Done };
  struct Op {
    OpKind kind;
    int peer = -1;
    uint32_t slot = 0;
    uint32_t seq = 0;
    bool ownSeq = false;                // point-to-point: `seq` replaces the schedule's sequence
    LinkClass link = LinkClass::Local;  // sends: the link they take (add, for the window)
    // dst, src, src2: the reuse region each is an offset in (prepareReuse), or kNoRegion
    // where it is an address.
    uint8_t region[3] = {kNoRegion, kNoRegion, kNoRegion};
    void* dst = nullptr;
    const void* src = nullptr;
    const void* src2 = nullptr;
    size_t size = 0;  // bytes for transfers and copies, elements for reduce/divide
    size_t rows = 1, dstPitch = 0, srcPitch = 0;  // copies: `rows` of `size` bytes (copyRows)
    uint64_t remoteOffset = 0;
    uint64_t expectedLength = 0;
    transport::Transfer transfer{};
    // The device path: a transfer of device memory over a link without FI_HMEM goes through
    // `stage` (host staging): a send copies in first, a receive copies out after.
    bool hostBuffer = false;  // its buffer is hostScratch(): never staged
    bool staged = false;
    bool stagedIn = false;    // a staged send whose copy into `stage` has finished
    bool atEndpoint = false;  // posted to the endpoint and not completed (what fail() cancels)
    uint8_t race = 0;         // kRacing, kLost (race)
    core::QueueMemory stage{};
  };
  // A device operation in flight: `op` moves on once `ticket` has finished.
  struct DeviceWait {
    core::DeviceQueue::Ticket ticket;
    OpId op;
  };
  static constexpr uint8_t kNoRegion = 255;
  static constexpr uint8_t kRacing = 1, kLost = 2;  // Op::race
  static constexpr OpId kNoOp = UINT32_MAX;
  // An operation's addresses, wherever they are kept (Op::region).
  std::byte* address(const void* p, uint8_t region) const {
    auto* a = static_cast<std::byte*>(const_cast<void*>(p));
    return region == kNoRegion
               ? a
               : reinterpret_cast<std::byte*>(regionBase_[region]) + reinterpret_cast<uintptr_t>(p);
  }
  std::byte* dstOf(const Op& op) const { return address(op.dst, op.region[0]); }
  std::byte* srcOf(const Op& op) const { return address(op.src, op.region[1]); }
  std::byte* src2Of(const Op& op) const { return address(op.src2, op.region[2]); }
  // The tag of call ctx.seq's messages, less the sender and slot (tag::base).
  static uint64_t tagBaseOf(const ScheduleContext& ctx);
  OpId add(Op op);
  void indexDependents();  // edges_ into depBegin_ / deps_, at start
  void complete(OpId id);
  void runLocal(Op& op);
  bool post(OpId id);
  // ---- races (schedule_race.cc) ----
  // A racing receive's message arrived (the schedule runs): true when it was handled here,
  // false when it goes on as any receive's (the winner's count is checked there).
  bool raceArrived(OpId id, size_t bytes);
  // A racing receive failed: true when that is its cancel (it lost), not an error.
  bool raceCanceled(OpId id, Result code);
  // ---- the device path (schedule_device.cc) ----
  void markStaged(OpId id);        // at build time: decides whether a transfer is staged
  void runOnDevice(OpId id);       // enqueues a local operation, tracked by a fence
  bool startStagedSend(OpId id);   // enqueues a staged send's copy into host staging
  bool postStagedRecv(OpId id);    // posts a staged receive into host staging
  void finishStagedRecv(OpId id);  // enqueues a staged receive's copy out of staging
  bool pollDevice();               // moves on the operations whose fences have finished
  bool postTransfer(OpId id, const void* buf, void* rbuf);
  void releaseDeviceMemory() noexcept;  // gives scratch and staging back (destructor)
  void start();                         // indexes dependencies, sizes the windows (once)
  void seedReady();                     // queues the operations that depend on nothing
  void queueReady(OpId id);             // marks `id` ready and queues it by kind
  // A schedule gives its scratch back to the pools as soon as it is done (rearm() takes it
  // again): an idle schedule kept for reuse holds none.
  void parkScratch();
  // Keeps the run state a prepared schedule starts with (seedReady): what rearm() restores.
  void snapshotArmed();
  std::string waitingOn() const;
  // Sizes window_ by the distinct ranks this schedule sends to on each link class.
  void sizeSendWindow();
  // The link a transfer with `peer` takes (SendWindow's classes).
  LinkClass linkOf(int peer) const;

  ScheduleContext ctx_;
  uint64_t tagBase_;
  uint32_t slotRotation_;  // added to collective slots on the wire (post): a hash of the count
  std::deque<Op> ops_;     // deque: Transfer addresses stay fixed as ops are added
  // Each operation's run state and count of dependencies not yet done, apart from ops_ so
  // that rearm() restores them with two copies.
  std::vector<OpState> states_;
  std::vector<uint32_t> pending_;
  // Dependencies: (before, op) pairs as built (one vector, not one per operation: a schedule
  // is built on every call), then from the start each operation's dependents in
  // deps_[depBegin_[id] .. depBegin_[id + 1]), in the order they were added.
  std::vector<std::pair<OpId, OpId>> edges_;
  std::vector<uint32_t> depBegin_;
  std::vector<OpId> deps_;
  // Ready reductions, copies and divisions, oldest in schedule order first: the thread runs
  // them in the order the builder interleaved them with the transfers.
  std::priority_queue<OpId, std::vector<OpId>, std::greater<OpId>> readyLocal_;
  // Ready sends by link class (LinkClass), oldest in schedule order first, as receives are
  // posted: a forward built before the rank's later own sends goes before them.
  std::priority_queue<OpId, std::vector<OpId>, std::greater<OpId>> readySends_[2];
  // Ready receives, oldest (lowest id) first (posting rules: recvWindow, inOrderRecvs).
  std::priority_queue<OpId, std::vector<OpId>, std::greater<OpId>> readyRecvs_;
  std::vector<OpId> recvOrder_;  // every receive's id, in schedule order
  size_t oldestUnposted_ = 0;    // index into recvOrder_ of the oldest receive not posted
  std::vector<ScratchPool::Buffer> scratch_;
  std::vector<size_t> scratchBytes_;             // what each scratch() asked for (host)
  std::vector<size_t> deviceScratchBytes_;       // the same on the device path
  std::vector<const std::byte*> parkedScratch_;  // where each was before parkScratch()
  std::vector<const void*> parkedDeviceScratch_;
  bool ownAddressesOnly_ = true;  // no check, remote copy, host scratch or own sequence
  bool preparedForReuse_ = false;
  // Where each region's offsets start (prepareReuse): receive buffer, send buffer, scratch.
  std::vector<uintptr_t> regionBase_;
  // The run state as first started (prepared schedules): what rearm() restores.
  struct Armed {
    std::vector<OpState> states;
    std::vector<uint32_t> pending;
    std::vector<OpId> sends[2], recvs, local;
  };
  Armed armed_;
  std::vector<core::QueueMemory> deviceScratch_;
  std::vector<std::pair<const std::byte*, size_t>> hostScratch_;  // device path: host ranges
  std::deque<DeviceWait> deviceWaits_;  // oldest first (the queue finishes in order)
  std::deque<OpId> stagedSends_;        // staged sends copied in, waiting to be posted
  uint64_t stagedTransfers_ = 0;
  std::vector<std::function<std::string()>> checks_;  // Check ops (Op::size indexes it)
  State state_ = State::Running;
  bool started_ = false;
  size_t done_ = 0;
  size_t posted_ = 0, postedRecvs_ = 0;
  SendWindow window_;                    // sized when it starts
  size_t recvWindow_ = kMaxPostedRecvs;  // recvWindow() of the endpoint, set when it starts
  Result errorCode_ = Result::Success;
  std::string errorMessage_;
  Progress failedAt_;
  std::vector<OpId> raceOps_;  // the racing receives (race)
  ArrivalFn onArrival_;
  OpId raceWinner_ = kNoOp;
};

}  // namespace sharc::algo

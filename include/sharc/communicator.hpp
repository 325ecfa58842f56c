/// \file
/// sharc's C++ API: communicators and their collectives over host memory.
///
/// Buffer semantics follow NCCL: every collective is out-of-place unless the buffers overlap
/// exactly as NCCL's in-place forms do (AllGather: sendbuff == recvbuff + rank*count*size;
/// ReduceScatter: recvbuff == sendbuff + rank*count*size; AllReduce/Broadcast: equal
/// pointers). Any other overlap is rejected.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <sharc/cuda.hpp>
#include <sharc/error.hpp>
#include <sharc/types.hpp>
#include <string>
#include <vector>

namespace sharc {

/// Opaque rendezvous token: the root's address, port and a random job token.
/// Create it once (makeUniqueId), send its bytes to every rank by any means, and pass it to
/// Communicator::create on each rank.
struct UniqueId {
  static constexpr size_t kBytes = 128;
  std::array<char, kBytes> bytes{};
};

/// Starts a rendezvous server thread in this process and returns the id that names it.
/// The server lives until the job it serves has connected and finished initialising, or until
/// SHARC_TIMEOUT_MS passes.
UniqueId makeUniqueId();

namespace detail {
class RequestState;
class CommunicatorImpl;
}  // namespace detail

/// Handle to a non-blocking collective. Cheap to copy; all copies share one operation.
/// The buffers passed to the collective must stay valid until it completes.
class Request {
 public:
  Request() = default;
  /// Drives progress once; true when the operation has completed successfully.
  /// Throws sharc::Error if it failed (peer died, mismatch, timeout).
  bool test();
  /// Drives progress until completion; throws sharc::Error(Timeout) if `timeout` passes
  /// first (the operation stays pending and can be waited on again), or the operation's
  /// own error. The default waits up to SHARC_TIMEOUT_MS (after which the operation fails).
  void wait(std::chrono::milliseconds timeout = std::chrono::milliseconds::max());
  /// True once the operation has finished, successfully or not (no progress driven).
  bool isCompleted() const noexcept;
  /// True for a request that refers to an operation.
  explicit operator bool() const noexcept { return state_ != nullptr; }
  /// The rank a receive from any source (Communicator::irecvAny) took its message from, once
  /// it has completed; -1 before, and for every other operation.
  int source() const noexcept;

 private:
  friend class detail::CommunicatorImpl;
  explicit Request(std::shared_ptr<detail::RequestState> s) : state_(std::move(s)) {}
  std::shared_ptr<detail::RequestState> state_;
};

/// Options for creating a communicator; defaults come from the environment (SHARC_*).
struct CommOptions {
  /// libfabric provider ("tcp;ofi_rxm", "shm", "efa", ...); empty: SHARC_FI_PROVIDER, then
  /// FI_PROVIDER, then automatic.
  std::string provider;
  /// Bound on every blocking wait and on each operation; 0: SHARC_TIMEOUT_MS.
  std::chrono::milliseconds timeout{0};
  /// Ranks of one node exchange through sharc's shared-memory transport rather than the
  /// provider (false, or SHARC_SHM=0: the provider carries everything).
  bool sharedMemory = true;
};

/// How sharc runs one call: the algorithm the tuner picked, its pipelining chunk and the cost
/// model's predicted time (docs/tuner.md).
struct CallPlan {
  std::string algorithm;   ///< "ring", "recursive_doubling", "direct_write", "hierarchical", ...
  size_t chunkBytes = 0;   ///< pipelining chunk in bytes
  double predictedUs = 0;  ///< predicted time of one call in microseconds
  std::string breakdown;   ///< one line: the model's terms behind the prediction
  /// "host"; on the device path (docs/gpu.md) which links carry device memory directly and
  /// which stage it through host memory, and why.
  std::string path;
};

/// A caller's rendezvous channel (a key-value store, a launcher's exchange): called
/// collectively, every rank passes one blob of at most 64 KiB and gets all blobs back,
/// indexed by rank. Rounds are matched in call order. It reports failure by throwing.
using ExchangeFn = std::function<std::vector<std::string>(const std::string& blob)>;

/// One send or receive of a point-to-point group (Communicator::igroup).
struct PointToPoint {
  enum class Kind : uint8_t { Send, Recv };
  Kind kind = Kind::Send;
  int peer = 0;         ///< the other rank, in this communicator
  void* buf = nullptr;  ///< read by a send, written by a receive
  size_t bytes = 0;     ///< a receive must get exactly this many bytes
  uint32_t tag = 0;     ///< matched between the pair; tags are told apart modulo kMaxTags
  static constexpr uint32_t kMaxTags = 8191;
};

/// A group of ranks that run collectives together. Thread-safe: calls may come from several
/// threads, and every rank must issue the same collectives in the same order.
class Communicator {
 public:
  /// Joins the job named by `id` as `rank` of `nranks` (collective over all ranks).
  static std::shared_ptr<Communicator> create(const UniqueId& id, int nranks, int rank,
                                              const CommOptions& options = {});
  /// Joins the job described by the environment: SHARC_ROOT=host:port, SHARC_RANK,
  /// SHARC_WORLD_SIZE, or torchrun's MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE, or Open MPI's
  /// OMPI_COMM_WORLD_RANK/SIZE with SHARC_ROOT or MASTER_ADDR/MASTER_PORT. Rank 0 serves the
  /// rendezvous on the root address.
  static std::shared_ptr<Communicator> createFromEnvironment(const CommOptions& options = {});

  /// Joins a job of `nranks` ranks whose rendezvous goes through `exchange` (collective):
  /// no port of sharc's own is opened; the exchange carries the endpoint addresses.
  static std::shared_ptr<Communicator> createFromExchange(int rank, int nranks,
                                                          const ExchangeFn& exchange,
                                                          const CommOptions& options = {});

  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const noexcept;
  int size() const noexcept;
  /// The libfabric provider this communicator's endpoint uses.
  std::string provider() const;

  /// The plan a call of `kind` with `count` elements of `type` (per rank for AllGather and
  /// ReduceScatter, in total for AllReduce) gets: the same choice the call itself makes,
  /// SHARC_ALGO and SHARC_CHUNK_BYTES included. Local: no communication.
  CallPlan plan(CollectiveKind kind, size_t count, DataType type) const;

  /// Collective over this communicator: ranks passing the same color form a new communicator,
  /// ordered by (key, old rank). A negative color returns nullptr (the rank joins none).
  std::shared_ptr<Communicator> split(int color, int key);

  /// Collective over `members` only (ranks of this communicator, in the new communicator's
  /// order; this rank among them): a communicator over the same endpoint, its id agreed
  /// through `exchange`, which must connect exactly the members. Ranks outside take no part,
  /// so it suits groups that not every rank creates (torch's new_group).
  /// `timeout` bounds its operations (0: this communicator's).
  std::shared_ptr<Communicator> subgroup(const std::vector<int>& members,
                                         const ExchangeFn& exchange,
                                         std::chrono::milliseconds timeout = {});

  /// Collective over the ranks not in `excluded` (the survivors; the excluded ranks take no
  /// part, dead or alive): a communicator of the survivors, renumbered densely in their old
  /// order, over the same endpoint, as after a failure (a dead peer, a timeout) or an abort.
  /// With `abortFirst` (NCCL's NCCL_SHRINK_ABORT) this communicator is aborted first: its
  /// pending and later operations fail, here and on every rank it reaches. Every survivor must
  /// pass the same `excluded`; `timeout` (0: this communicator's) bounds the agreement, after
  /// which it throws Timeout.
  std::shared_ptr<Communicator> shrink(const std::vector<int>& excluded,
                                       std::chrono::milliseconds timeout = {},
                                       bool abortFirst = false);

  /// Sends and receives, each matched with its peer's in posting order per (peer, tag), run
  /// as one operation (like ncclGroupStart/End): a pair may send to each other at once.
  Request igroup(const std::vector<PointToPoint>& ops);
  Request isend(const void* buf, size_t bytes, int peer, uint32_t tag = 0);
  Request irecv(void* buf, size_t bytes, int peer, uint32_t tag = 0);
  /// A receive from any other rank (MPI_ANY_SOURCE): the first message on `tag` from any
  /// peer, in each peer's order; Request::source() names the sender. Host memory only. Until
  /// it has completed, other receives on the same tag are refused (its match comes first).
  /// A message a peer sent meanwhile stays that peer's next on the tag. Costs `bytes` of
  /// scratch per peer while it waits.
  Request irecvAny(void* buf, size_t bytes, uint32_t tag = 0);

  /// recvbuff[r*count .. (r+1)*count) receives rank r's sendbuff[0..count).
  Request iallGather(const void* sendbuff, void* recvbuff, size_t count, DataType type);
  /// recvbuff[0..count) = op over ranks r of sendbuff_r[rank*count .. (rank+1)*count).
  Request ireduceScatter(const void* sendbuff, void* recvbuff, size_t count, DataType type,
                         RedOp op);
  /// recvbuff[0..count) = op over ranks r of sendbuff_r[0..count).
  Request iallReduce(const void* sendbuff, void* recvbuff, size_t count, DataType type, RedOp op);
  /// recvbuff[0..count) on every rank = sendbuff[0..count) of `root` (sendbuff is only read
  /// on the root).
  Request ibroadcast(const void* sendbuff, void* recvbuff, size_t count, DataType type, int root);
  /// Completes once every rank has entered the barrier.
  Request ibarrier();

  /// Blocking forms: the non-blocking call followed by wait().
  void allGather(const void* sendbuff, void* recvbuff, size_t count, DataType type);
  void reduceScatter(const void* sendbuff, void* recvbuff, size_t count, DataType type, RedOp op);
  void allReduce(const void* sendbuff, void* recvbuff, size_t count, DataType type, RedOp op);
  void broadcast(const void* sendbuff, void* recvbuff, size_t count, DataType type, int root);
  void barrier();

  /// Stream-ordered forms, as NCCL's (CUDA device pointers; host pointers work too). The call
  /// returns without waiting: the collective starts once the work queued on `stream` before
  /// it has finished, and work queued on `stream` after it sees the result. Calls on one
  /// communicator run in the order they were made; every rank must make the same calls in
  /// the same order. Ranks on one host exchange device buffers through CUDA IPC (several
  /// ranks may share a GPU); elsewhere data is staged through pinned host memory.
  /// Throws at once for bad arguments, or sharc::Error(InvalidUsage) when CUDA is unusable.
  /// A failure met after the call returned is kept: asyncError() reports it, every later
  /// stream-ordered call throws it, and the stream is released (its result undefined).
  void allGather(const void* sendbuff, void* recvbuff, size_t count, DataType type,
                 CudaStream stream);
  void reduceScatter(const void* sendbuff, void* recvbuff, size_t count, DataType type, RedOp op,
                     CudaStream stream);
  void allReduce(const void* sendbuff, void* recvbuff, size_t count, DataType type, RedOp op,
                 CudaStream stream);
  void broadcast(const void* sendbuff, void* recvbuff, size_t count, DataType type, int root,
                 CudaStream stream);
  /// Success, or the first failure of a stream-ordered call after it had returned (with its
  /// message in `message` when given).
  Result asyncError(std::string* message = nullptr) const;
  /// Blocks until every stream-ordered call made so far has finished on the host side (its
  /// stream may still have later work); throws its failure, or Timeout after `timeout`.
  void synchronizeStreamCalls(std::chrono::milliseconds timeout = std::chrono::milliseconds::max());

  /// Releases the endpoint share and fails every pending operation; later calls on this
  /// communicator throw InvalidUsage. Called by the destructor if not called before. Unless
  /// aborted, it first waits for the other ranks in a closing barrier (so that none still
  /// needs this endpoint for its last operation), at most `closingWait` (and at most the
  /// communicator's timeout); a barrier that fails or times out is only logged.
  void destroy(std::chrono::milliseconds closingWait = std::chrono::seconds(10)) noexcept;

  /// Fails every pending and later operation of this communicator on this rank at once, with
  /// an error carrying `reason`, and tells the other ranks (their pending and later operations
  /// fail too). Callable from any thread at any time; no closing barrier. destroy() (or the
  /// destructor) then releases the endpoint share without waiting for peers. Abort reaches
  /// every communicator split from this one (transitively) as well.
  void abort(const std::string& reason = "aborted by the application") noexcept;

  /// Success while the communicator is healthy; otherwise why it failed: this rank's own
  /// failure's code (Timeout, SystemError for a dead peer, InvalidUsage for abort(), ...) or
  /// RemoteError when a peer failed first, and the message in `message` when given.
  Result failure(std::string* message = nullptr) const;
  /// Bounds each operation started from now on by `timeout` (> 0) instead of the timeout the
  /// communicator was created with; operations already started keep theirs.
  void setTimeout(std::chrono::milliseconds timeout);

  /// The flight record of this process's world (this communicator, the one it was split
  /// from and every split): the last SHARC_TRACE_ENTRIES calls of each with their state and,
  /// for calls in progress, the peer each waits on. JSON; docs/hangs.md "Flight record format
  /// (version 1)" names the fields. `sharc-trace` analyses the records of all ranks.
  std::string traceJson() const;
  /// Writes traceJson() to `dir` (default: SHARC_TRACE_DIR) as
  /// sharc-trace-<world key>-rank<world rank>.json and returns the path; throws
  /// InvalidArgument when no directory is given or set, SystemError when it cannot write.
  std::string dumpTrace(const std::string& dir = "") const;

  /// Internal: the implementation object (for sharc's own plugins).
  detail::CommunicatorImpl& impl() { return *impl_; }

 private:
  explicit Communicator(std::unique_ptr<detail::CommunicatorImpl> impl);
  std::unique_ptr<detail::CommunicatorImpl> impl_;
  friend class detail::CommunicatorImpl;
};

}  // namespace sharc

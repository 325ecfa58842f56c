// The engine behind sharc::Communicator: one endpoint and progress engine shared by a world
// communicator and everything split from it, the per-communicator state, and requests.
#pragma once

#include <atomic>

#include <array>
#include <bitset>
#include <chrono>
#include <memory>
#include <mutex>
#include <sharc/communicator.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "algorithms/schedule.hpp"
#include "algorithms/selector.hpp"
#include "algorithms/tuner.hpp"
#include "transport/endpoint.hpp"

namespace sharc::gpu {
class StreamExecutor;
}

namespace sharc::detail {

class CommState;

/// One endpoint and the operations in flight on it. All access holds `mu`.
class Engine {
 public:
  explicit Engine(std::unique_ptr<transport::Endpoint> endpoint);
  ~Engine();

  std::mutex mu;
  transport::Endpoint& endpoint() { return *endpoint_; }
  algo::ScratchPool scratch;
  std::bitset<algo::tag::kMaxComms> usedCommIds;
  /// More ranks on this host than CPUs: idle waits sleep early so busy ranks get the cores.
  bool oversubscribed = false;
  /// Ranks of this node reach each other through the shared-memory transport.
  bool sharedMemory = false;
  /// Hierarchical collectives use the rotated proxy rule (SHARC_HIER_PROXY).
  bool hierRotate = false;
  /// Where the ranks of the world communicator are (decides the one-host algorithms).
  algo::Locality locality = algo::Locality::Network;

  /// Polls the endpoint and advances every active operation; true if anything happened.
  bool progressLocked();
  void addActive(std::shared_ptr<RequestState> request) { active_.push_back(std::move(request)); }
  /// Keeps an object with posted transfers alive until they have all completed.
  void drain(std::shared_ptr<algo::Schedule> s) { drainingSchedules_.push_back(std::move(s)); }
  void drain(std::shared_ptr<CommState> c) { drainingComms_.push_back(std::move(c)); }
  /// Fails the active operations of `comm` (used by abort and destroy).
  void failActive(const CommState* comm, Result code, const std::string& message);

 private:
  std::unique_ptr<transport::Endpoint> endpoint_;
  std::vector<std::shared_ptr<RequestState>> active_;
  std::vector<std::shared_ptr<algo::Schedule>> drainingSchedules_;
  std::vector<std::shared_ptr<CommState>> drainingComms_;
};

/// What one communicator is: its ranks, tag space, sequence and abort channel.
class CommState final : public transport::TransferOwner {
 public:
  CommState(std::shared_ptr<Engine> engine, uint32_t id, int rank, std::vector<uint32_t> peers,
            std::vector<int32_t> pids, algo::NodeMap nodes, std::chrono::milliseconds timeout,
            algo::AlgorithmOverride algos);
  ~CommState();

  std::shared_ptr<Engine> engine;
  const uint32_t id;
  const int rank;
  const int size;
  const std::vector<uint32_t> peers;  ///< communicator rank -> endpoint peer
  const std::vector<int32_t> pids;    ///< communicator rank -> pid; empty without single copy
  const algo::NodeMap nodes;          ///< communicator rank -> node
  /// Bound on each operation started from now on (Communicator::setTimeout changes it).
  std::atomic<std::chrono::milliseconds> timeout;
  const algo::AlgorithmOverride algos;
  uint32_t nextSeq = 0;
  std::array<int, 8> lastAlgorithm{-1, -1, -1, -1, -1, -1, -1, -1};  ///< per CollKind, for logs
  /// Recent tuner plans by (collective, bytes): every input of the plan but these is fixed
  /// for the communicator's life.
  std::unordered_map<uint64_t, algo::Plan> plans;
  /// Point-to-point sequences per (peer << 32 | slot), sends and receives apart.
  std::unordered_map<uint64_t, uint32_t> sendSeq, recvSeq;
  bool aborted = false;
  std::string abortMessage;
  /// Why the communicator failed (Success while it has not): this rank's failure's code, or
  /// RemoteError for a peer's notice.
  Result abortCode = Result::Success;

  /// Posts the abort-notice receive (engine lock held).
  void start();
  /// Marks the communicator failed with `code` and tells every other rank (engine lock held).
  void abort(const std::string& reason, Result code);
  /// Cancels the abort-notice receive before the communicator goes away (engine lock held).
  void close();
  bool quiescent() const { return posted_ == 0; }

  void onTransferDone(transport::Transfer& t, size_t bytes, uint64_t tag) override;
  void onTransferError(transport::Transfer& t, Result code, const std::string& message) override;

 private:
  transport::Transfer controlRecv_;
  char controlBuf_[256] = {};
  std::vector<std::unique_ptr<transport::Transfer>> noticeSends_;
  std::string notice_;
  int posted_ = 0;
  bool controlPosted_ = false;
};

/// Shared state of a Request.
class RequestState {
 public:
  enum class Status { Pending, Done, Failed };
  RequestState(std::shared_ptr<CommState> comm, std::shared_ptr<algo::Schedule> schedule)
      : comm(std::move(comm)), schedule(std::move(schedule)) {}
  std::shared_ptr<CommState> comm;
  std::shared_ptr<algo::Schedule> schedule;
  Status status = Status::Pending;  // written under the engine lock
  Result code = Result::Success;
  std::string message;
  /// Set when the schedule failed: until then the error waits for its transfers to drain.
  std::chrono::steady_clock::time_point drainUntil{};
};

class CommunicatorImpl {
 public:
  explicit CommunicatorImpl(std::shared_ptr<CommState> state);
  ~CommunicatorImpl();
  static std::shared_ptr<Communicator> wrap(std::shared_ptr<CommState> state);

  int rank() const { return state_->rank; }
  int size() const { return state_->size; }
  std::string provider() const;

  /// Validates, builds the schedule of `kind` and starts it.
  Request start(algo::CollKind kind, const void* send, void* recv, size_t count, DataType type,
                RedOp op, int root);
  /// The tuner's plan for a call of `kind` with `count` elements of `type`.
  algo::Plan plan(algo::CollKind kind, size_t count, DataType type,
                  bool withBreakdown = true) const;
  std::shared_ptr<Communicator> split(int color, int key);
  /// Members-only creation over the same endpoint (point_to_point.cc has the rest).
  std::shared_ptr<Communicator> subgroup(const std::vector<int>& members,
                                         const ExchangeFn& exchange,
                                         std::chrono::milliseconds timeout);
  /// Starts a group of sends and receives as one request (point_to_point.cc).
  Request startGroup(const std::vector<PointToPoint>& ops);
  /// Validates and queues a stream-ordered call (stream_calls.cc).
  void startStream(algo::CollKind kind, const void* send, void* recv, size_t count, DataType type,
                   RedOp op, int root, CudaStream stream);
  Result streamAsyncError(std::string* message) const;
  void synchronizeStreamCalls(std::chrono::milliseconds timeout);
  void destroy(std::chrono::milliseconds closingWait = std::chrono::seconds(10)) noexcept;
  /// Fails every pending and later operation here and tells the peers (communicator.hpp).
  void abort(const std::string& reason) noexcept;
  Result failure(std::string* message) const;
  void setTimeout(std::chrono::milliseconds timeout);
  bool destroyed() const { return destroyed_; }
  CommState& state() { return *state_; }

 private:
  void validate(algo::CollKind kind, const void* send, void* recv, size_t count, DataType type,
                RedOp op, int root) const;
  // Fills what every schedule of this communicator shares (engine lock held).
  algo::ScheduleContext baseContext(algo::CollKind kind, DataType type, RedOp op, size_t count);
  // Registers a built schedule and posts what it can (engine lock held).
  Request launch(std::shared_ptr<algo::Schedule> schedule);
  // Lets queued stream-ordered calls finish and stops their worker (stream_calls.cc).
  void stopStreamCalls() noexcept;
  std::shared_ptr<CommState> state_;
  mutable std::mutex streamMu_;
  std::unique_ptr<gpu::StreamExecutor> streamExecutor_;  // made by the first stream call
  bool destroyed_ = false;
};

/// Blocks until `request` finishes or `timeout` passes (throws Timeout then).
void waitRequest(RequestState& request, std::chrono::milliseconds timeout);

}  // namespace sharc::detail

// The engine behind sharc::Communicator: one endpoint and progress engine shared by a world
// communicator and everything split from it, the per-communicator state, and requests.
#pragma once

#include <array>
#include <atomic>
#include <bitset>
#include <chrono>
#include <list>
#include <memory>
#include <mutex>
#include <sharc/communicator.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "algorithms/schedule.hpp"
#include "algorithms/tuner.hpp"
#include "flight_recorder.hpp"
#include "learned_tuner.hpp"
#include "transport/endpoint.hpp"

namespace sharc::gpu {
class StreamExecutor;
}

namespace sharc::detail {

class CommState;
class EngineWatch;

/// Who the ranks of the world (the communicator made at init) are, for flight records.
struct WorldInfo {
  std::string key;  ///< the same on every rank of one world, different across jobs (16 hex)
  int rank = 0;
  int size = 1;
  std::vector<std::string> hosts;  ///< per world rank
  std::vector<int32_t> pids;       ///< per world rank
};

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

  // ---- flight records, stall probe (trace_json.cc, stall_probe.cc, engine_watch.cc) ----
  WorldInfo world;
  /// Live communicators on this endpoint (registered by CommState::start, removed by close).
  std::vector<CommState*> comms;
  /// The whole process's record for this world as JSON (format: README "Flight records").
  std::string traceJson(const std::string& reason, const std::string& message) const;
  /// Writes traceJson to `dir` (atomically: a temporary file renamed); returns the path.
  std::string writeTrace(const std::string& dir, const std::string& reason,
                         const std::string& message) const;
  /// Asks for a dump to SHARC_TRACE_DIR at the end of this progress pass (when it is set).
  void requestDump(const std::string& reason, const std::string& message);
  /// A communicator whose control receive delivered a message to handle after polling.
  void controlPending(CommState* c) { controlPending_.push_back(c); }
  /// Sends stall probes for operations that waited longer than SHARC_STALL_PROBE_MS.
  void probeStalls();
  /// probeStalls() unless it ran less than 100 ms ago.
  void probeStallsIfDue();
  /// The active request of `comm` with flight-record id `traceId`, null if none.
  RequestState* activeRequest(const CommState* comm, uint64_t traceId) const;
  /// The active collective of `comm` with sequence `seq`, null if none.
  RequestState* activeCall(const CommState* comm, uint64_t seq) const;
  /// Starts the watch thread (stall probes, SIGUSR1, trace socket) if any of them is on.
  void startWatch();

 private:
  std::unique_ptr<transport::Endpoint> endpoint_;
  std::vector<std::shared_ptr<RequestState>> active_;
  std::vector<std::shared_ptr<algo::Schedule>> drainingSchedules_;
  std::vector<std::shared_ptr<CommState>> drainingComms_;
  std::vector<CommState*> controlPending_;
  std::string dumpReason_, dumpMessage_;
  bool dumpPending_ = false;
  std::unique_ptr<EngineWatch> watch_;
  std::chrono::steady_clock::time_point lastProbeCheck_{};
};

/// A call as the stall probe describes it on the control channel (plain bytes: every rank
/// runs the same build).
struct ProbeCall {
  uint64_t seq = 0;  ///< 0: none
  uint64_t count = 0;
  int32_t root = -1;
  uint8_t kind = 0, type = 0, op = 0, hasOp = 0, state = 0, internal = 0;
  static ProbeCall of(const TraceEntry& e);
  /// "AllGather #7 (count=3, float32)" with op, root and what sharc called it for.
  std::string describe() const;
  /// Same collective, type, op, count and root.
  bool sameCall(const ProbeCall& o) const;
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
  /// Collective calls issued so far: the last sequence number (tags carry its low 12 bits).
  uint64_t calls = 0;
  uint64_t p2pGroups = 0;         ///< point-to-point groups issued so far
  int parentId = -1;              ///< the communicator this one was split from (-1: the world)
  const char* path = "host";      ///< "stream": the executor of stream-ordered calls
  const char* internalCall = "";  ///< set around calls sharc makes itself (split, destroy)
  FlightRecorder recorder;
  /// Communicators split from this one: abort reaches them too.
  std::vector<std::weak_ptr<CommState>> children;
  bool userAborted = false;  ///< failed through Communicator::abort
  bool dumped = false;       ///< its failure has been written to SHARC_TRACE_DIR
  std::array<int, 8> lastAlgorithm{-1, -1, -1, -1,
                                   -1, -1, -1, -1};  ///< per CollectiveKind, for logs
  /// A plan that needs no measurement: SHARC_ALGO's, the SHARC_TUNER_FILE choice or the
  /// model's.
  struct StaticPlan {
    algo::Plan plan;
    bool fixed = false;  ///< SHARC_ALGO or the file chose it: not learned
  };
  /// Recent static plans by (collective, bytes): every input of the plan but these is fixed
  /// for the communicator's life.
  std::unordered_map<uint64_t, StaticPlan> plans;
  /// What the learning tuner measured and chose per (collective, bytes).
  LearnedTuner learner{core::Config::get().tunerLearn, core::Config::get().tunerLearnAfter};
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
  bool quiescent() const { return posted_ == 0 && unposted_ == 0; }
  /// What is still outstanding on the control channel, for messages.
  std::string controlState() const;
  /// Posts the control messages the provider could not take yet (engine lock held).
  void retryControlSends();

  void onTransferDone(transport::Transfer& t, size_t bytes, uint64_t tag) override;
  void onTransferError(transport::Transfer& t, Result code, const std::string& message) override;

  // ---- stall probe (stall_probe.cc) ----
  /// Asks communicator rank `peer` which call it is in (engine lock held).
  void sendProbe(int peer, const TraceEntry& mine);
  /// Handles the control messages received since the last pass (engine lock held).
  void serviceControl();

 private:
  struct ControlSend {
    transport::Transfer transfer;
    std::string bytes;
    int peer = -1;
    bool posted = false;
    bool done = false;  // completed, failed or dropped: freed by reapControlSends()
  };
  // Frees the finished control sends. Never while the list is walked: a post may progress
  // the provider, whose completions mark other sends done.
  void reapControlSends();
  void postControlSend(std::list<ControlSend>::iterator s);
  void postControlRecv();
  void sendControl(int peer, std::string bytes);
  void answerProbe(int asker, const std::string& body);
  void readReply(int peer, const std::string& body);

  transport::Transfer controlRecv_;
  char controlBuf_[256] = {};
  std::list<ControlSend> controlSends_;
  std::vector<std::pair<int, std::string>> inbox_;  // (sender, message) to service
  int posted_ = 0;
  int unposted_ = 0;  // control sends waiting for the provider (a connection being made)
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
  uint64_t traceId = 0;  ///< its flight-record entry
  std::chrono::steady_clock::time_point startedAt{}, probedAt{};
  int probedPeer = -1;           ///< the peer asked last, while its answer is awaited
  bool reportedSilence = false;  ///< the peer's silence has been logged
  bool graceGiven = false;       ///< the deadline was moved once (stall_probe.cc, kWaiterGrace)
  std::string probeNote;         ///< what the stall probe found (added to a timeout's message)
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
  Request start(CollectiveKind kind, const void* send, void* recv, size_t count, DataType type,
                RedOp op, int root);
  /// The plan a call of `kind` with `count` elements of `type` gets now: SHARC_ALGO, else
  /// the SHARC_TUNER_FILE choice, else the learned one once settled, else the model's.
  algo::Plan plan(CollectiveKind kind, size_t count, DataType type,
                  bool withBreakdown = true) const;
  std::shared_ptr<Communicator> split(int color, int key);
  /// Members-only creation over the same endpoint (point_to_point.cc has the rest).
  std::shared_ptr<Communicator> subgroup(const std::vector<int>& members,
                                         const ExchangeFn& exchange,
                                         std::chrono::milliseconds timeout);
  /// Starts a group of sends and receives as one request (point_to_point.cc).
  Request startGroup(const std::vector<PointToPoint>& ops);
  /// Validates and queues a stream-ordered call (stream_calls.cc).
  void startStream(CollectiveKind kind, const void* send, void* recv, size_t count, DataType type,
                   RedOp op, int root, CudaStream stream);
  Result streamAsyncError(std::string* message) const;
  void synchronizeStreamCalls(std::chrono::milliseconds timeout);
  void destroy(std::chrono::milliseconds closingWait = std::chrono::seconds(10)) noexcept;
  /// Fails every pending and later operation here and tells the peers (communicator.hpp).
  void abort(const std::string& reason) noexcept;
  Result failure(std::string* message) const;
  /// The flight record of this process (communicator.hpp).
  std::string traceJson() const;
  /// Writes it to `dir` ("" = SHARC_TRACE_DIR) and returns the file's path.
  std::string dumpTrace(const std::string& dir) const;
  void setTimeout(std::chrono::milliseconds timeout);
  bool destroyed() const { return destroyed_; }
  CommState& state() { return *state_; }

 private:
  void validate(CollectiveKind kind, const void* send, void* recv, size_t count, DataType type,
                RedOp op, int root) const;
  // What the cost model sees of a call here.
  algo::CallShape shapeOf(CollectiveKind kind, size_t count, DataType type) const;
  // SHARC_ALGO's plan, else the SHARC_TUNER_FILE choice, else the model's.
  CommState::StaticPlan staticPlan(CollectiveKind kind, size_t count, DataType type,
                                   bool withBreakdown) const;
  // The learning tuner's agreement on a shape: issues it (an internal AllReduce) at the call
  // after its exploration, and decides at the next call (learned_tuner.hpp).
  void agreeIfDue(uint64_t planKey);
  // Fills what every schedule of this communicator shares (engine lock held).
  algo::ScheduleContext baseContext(CollectiveKind kind, DataType type, RedOp op, size_t count);
  // Registers a built schedule and posts what it can (engine lock held).
  Request launch(std::shared_ptr<algo::Schedule> schedule, uint64_t traceId);
  // Lets queued stream-ordered calls finish and stops their worker (stream_calls.cc).
  void stopStreamCalls() noexcept;
  std::shared_ptr<CommState> state_;
  mutable std::mutex streamMu_;
  std::unique_ptr<gpu::StreamExecutor> streamExecutor_;  // made by the first stream call
  std::atomic<bool> destroyed_{false};  // read by abort() and calls on other threads
};

/// Where a request's schedule stands, for the flight record.
TraceProgress traceProgress(const RequestState& r);

/// Blocks until `request` finishes or `timeout` passes (throws Timeout then).
void waitRequest(RequestState& request, std::chrono::milliseconds timeout);

}  // namespace sharc::detail

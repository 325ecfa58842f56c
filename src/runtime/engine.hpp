// Engine: one endpoint and the operations in flight on it, shared by a world communicator
// and every communicator split from it.
#pragma once

#include <bitset>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "algorithms/schedule.hpp"
#include "algorithms/tuner.hpp"
#include "runtime/device_resources.hpp"
#include "transport/endpoint.hpp"

namespace sharc::detail {

class CommState;
class EngineWatch;
class RequestState;

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

  /// The device path's queue and memory for CUDA device `cudaDevice` (-1: the host device
  /// queue of SHARC_DEVICE_PATH=host), made on first use. Throws sharc::Error where that
  /// queue cannot exist (a CUDA device in a build without CUDA).
  DeviceResources& deviceResources(int cudaDevice);

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
  // Before the schedules below: they give their scratch and staging back to it.
  std::map<int, std::unique_ptr<DeviceResources>> devices_;
  std::vector<std::shared_ptr<RequestState>> active_;
  std::vector<std::shared_ptr<algo::Schedule>> drainingSchedules_;
  std::vector<std::shared_ptr<CommState>> drainingComms_;
  std::vector<CommState*> controlPending_;
  std::string dumpReason_, dumpMessage_;
  bool dumpPending_ = false;
  std::unique_ptr<EngineWatch> watch_;
  std::chrono::steady_clock::time_point lastProbeCheck_{};
};

}  // namespace sharc::detail

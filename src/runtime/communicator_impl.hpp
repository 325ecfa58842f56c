// CommunicatorImpl: what sharc::Communicator forwards to (starting collectives, point-to-point
// groups, stream-ordered calls, split, abort and destroy).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <sharc/communicator.hpp>
#include <string>
#include <vector>

#include "algorithms/schedule.hpp"
#include "algorithms/tuner.hpp"
#include "runtime/comm_state.hpp"
#include "runtime/engine.hpp"
#include "runtime/request_state.hpp"

namespace sharc::gpu {
class StreamExecutor;
}

namespace sharc::detail {

/// The tuner's parameters: built-in defaults overlaid with SHARC_TUNER_FILE, read once.
const algo::TunerParams& tunerParams();

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
  /// start() on the device path with CUDA device `cudaDevice`'s queue (-1: the host device
  /// queue): the buffers are that device's memory (communicator_impl_device.cc).
  Request startOnDevice(CollectiveKind kind, const void* send, void* recv, size_t count,
                        DataType type, RedOp op, int root, int cudaDevice);
  /// The plan a call of `kind` with `count` elements of `type` gets now: SHARC_ALGO, else
  /// the SHARC_TUNER_FILE choice, else the learned one once settled, else the model's.
  algo::Plan plan(CollectiveKind kind, size_t count, DataType type,
                  bool withBreakdown = true) const;
  /// CallPlan::path of this communicator's host-form calls.
  std::string dataPath() const;
  std::shared_ptr<Communicator> split(int color, int key);
  /// Members-only creation over the same endpoint (point_to_point.cc has the rest).
  std::shared_ptr<Communicator> subgroup(const std::vector<int>& members,
                                         const ExchangeFn& exchange,
                                         std::chrono::milliseconds timeout);
  /// The survivors' communicator (communicator_impl_shrink.cc).
  std::shared_ptr<Communicator> shrink(const std::vector<int>& excluded,
                                       std::chrono::milliseconds timeout, bool abortFirst);
  /// Starts a group of sends and receives as one request (point_to_point.cc).
  Request startGroup(const std::vector<PointToPoint>& ops);
  /// Starts a receive from any other rank (communicator_impl_any_source.cc).
  Request startRecvAny(void* buf, size_t bytes, uint32_t tag);
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
  // start()'s common part: `device` is a CUDA ordinal, -1 for the host device queue, or
  // kNoDevice for the host path.
  static constexpr int kNoDevice = -2;
  Request startOn(CollectiveKind kind, const void* send, void* recv, size_t count, DataType type,
                  RedOp op, int root, int device);
  // The device path (communicator_impl_device.cc): fills ctx's device fields, decides the
  // links once per communicator and registers the call's buffers (engine lock held).
  void useDevice(algo::ScheduleContext& ctx, DeviceResources& dev, CollectiveKind kind,
                 const void* send, void* recv, size_t count, DataType type, int root);
  // Decides once per communicator which links carry device memory and which stage, and
  // what the tuner costs device calls with (engine lock held).
  void decideDeviceLinks(DeviceResources& dev) const;
  // Registers the schedule's device scratch (engine lock held); throws on failure.
  void registerScratch(const algo::Schedule& schedule, DeviceResources& dev);
  // What the cost model sees of a call here (`device`: on the device path, whose links
  // decideDeviceLinks has decided).
  algo::CallShape shapeOf(CollectiveKind kind, size_t count, DataType type, bool device) const;
  // SHARC_ALGO's plan, else the SHARC_TUNER_FILE choice, else the model's.
  CommState::StaticPlan staticPlan(CollectiveKind kind, size_t count, DataType type,
                                   bool withBreakdown, bool device) const;
  // The learning tuner's agreement on a shape: issues it (an internal AllReduce) at the call
  // after its exploration, and decides at the next call (learned_tuner.hpp).
  void agreeIfDue(uint64_t planKey);
  // Fills what every schedule of this communicator shares (engine lock held).
  algo::ScheduleContext baseContext(CollectiveKind kind, DataType type, RedOp op, size_t count);
  // Registers a built schedule and posts what it can (engine lock held).
  Request launch(std::shared_ptr<algo::Schedule> schedule, uint64_t traceId);
  Request launch(std::shared_ptr<RequestState> request, uint64_t traceId);
  /// A started point-to-point operation's flight record (engine lock held); returns its id.
  uint64_t recordPointToPoint(size_t bytes);
  /// Checks a group's receives against pending receives from any source and stray messages
  /// (engine lock held); throws before anything changes.
  void checkReceives(const std::vector<PointToPoint>& ops, const std::string& call) const;
  /// A receive of `p` that a stray message satisfies: copies it out, and counts it received
  /// (engine lock held, after checkReceives). False when none waits.
  bool takeStray(const PointToPoint& p);
  // Lets queued stream-ordered calls finish and stops their worker (stream_calls.cc).
  void stopStreamCalls() noexcept;
  std::shared_ptr<CommState> state_;
  mutable std::mutex streamMu_;
  std::unique_ptr<gpu::StreamExecutor> streamExecutor_;  // made by the first stream call
  std::atomic<bool> destroyed_{false};  // read by abort() and calls on other threads
};

}  // namespace sharc::detail

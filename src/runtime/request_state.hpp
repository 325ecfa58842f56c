// RequestState: what a sharc::Request refers to (its communicator, schedule and outcome).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <sharc/error.hpp>
#include <string>

#include "algorithms/schedule.hpp"
#include "runtime/comm_state.hpp"
#include "runtime/flight_recorder.hpp"

namespace sharc::detail {

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
  int source = -1;               ///< a receive from any source: the rank it took

  /// Done or failed (engine lock held).
  bool finished() const { return status != Status::Pending; }
  /// Throws the failure's code and message if it failed (engine lock held).
  void throwIfFailed() const {
    if (status == Status::Failed) throw Error(code, message);
  }
};

/// Where a request's schedule stands, for the flight record.
TraceProgress traceProgress(const RequestState& r);

/// Blocks until `request` finishes or `timeout` passes (throws Timeout then).
void waitRequest(RequestState& request, std::chrono::milliseconds timeout);

}  // namespace sharc::detail

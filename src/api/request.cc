// sharc::Request: test() and wait() drive the engine's progress.
#include <sharc/communicator.hpp>

#include "runtime/engine.hpp"
#include "runtime/request_state.hpp"

namespace sharc {

bool Request::test() {
  if (!state_) throw Error(Result::InvalidUsage, "test() on an empty sharc::Request");
  detail::RequestState& r = *state_;
  // The engine's watch thread may finish r at any time: status, code and message are read
  // under the engine's lock, as it writes them.
  std::lock_guard<std::mutex> lock(r.comm->engine->mu);
  if (!r.finished()) r.comm->engine->progressLocked();
  r.throwIfFailed();
  return r.status == detail::RequestState::Status::Done;
}

void Request::wait(std::chrono::milliseconds timeout) {
  if (!state_) throw Error(Result::InvalidUsage, "wait() on an empty sharc::Request");
  detail::waitRequest(*state_, timeout);
}

bool Request::isCompleted() const noexcept {
  if (!state_) return false;
  std::lock_guard<std::mutex> lock(state_->comm->engine->mu);
  return state_->finished();
}

int Request::source() const noexcept {
  if (!state_) return -1;
  std::lock_guard<std::mutex> lock(state_->comm->engine->mu);
  return state_->status == detail::RequestState::Status::Done ? state_->source : -1;
}

}  // namespace sharc

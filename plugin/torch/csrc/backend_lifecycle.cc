// ProcessGroupSharc's life cycle as current torch drives it: abort, shutdown, the error state,
// the options and the timeout (see torch_compat.hpp for the torch versions that ask for each).
#include "backend.hpp"
#include "tensor_args.hpp"

namespace sharc::torch_backend {
namespace {

constexpr std::chrono::milliseconds kClosingWait{1000};

}  // namespace

void ProcessGroupSharc::abortGroup(const std::string& reason) {
  // The engine fails every pending operation (waiting threads wake up with the reason) and
  // tells the peers; the communicator is released without a closing barrier. The abort
  // itself runs outside the once: an abort while another thread is in shutdown()'s closing
  // barrier ends that barrier now (abort after the communicator is gone does nothing).
  comm_->abort("rank " + std::to_string(rank_) + ": " + reason);
  std::call_once(ended_, [&] { comm_->destroy(); });
}

void ProcessGroupSharc::shutdownGroup() {
  // A normal end: a closing barrier lets the peers finish their last operations, but waits
  // at most a second (a peer may be gone); operations still pending then fail ("communicator
  // destroyed").
  std::call_once(ended_, [&] { comm_->destroy(kClosingWait); });
}

void ProcessGroupSharc::changeTimeout(std::chrono::milliseconds timeout) {
  engineCall("set_timeout", rank_, [&] { comm_->setTimeout(timeout); });
  timeout_.store(timeout);
}

#if SHARC_TORCH_HAS_ABORT
c10d::ErrorType ProcessGroupSharc::getError() {
  switch (comm_->failure()) {
    case sharc::Result::Success: return c10d::ErrorType::SUCCESS;
    case sharc::Result::Timeout: return c10d::ErrorType::TIMEOUT;
    case sharc::Result::RemoteError: return c10d::ErrorType::REMOTE_ERROR;
    default: return c10d::ErrorType::COMM_ERROR;
  }
}
#endif

#if SHARC_TORCH_HAS_BACKEND_OPTIONS
c10::intrusive_ptr<c10d::Backend::Options> ProcessGroupSharc::getBackendOptions() {
  auto options = c10::make_intrusive<Options>(getBackendName(), timeout_.load());
  for (int64_t r : globalRanks_) options->global_ranks_in_group.push_back(static_cast<uint64_t>(r));
  if (globalRanks_.empty())
    for (int r = 0; r < size_; ++r)
      options->global_ranks_in_group.push_back(static_cast<uint64_t>(r));
  options->group_name = getGroupUid();
  options->group_desc = getGroupDesc();
  return options;
}
#endif

}  // namespace sharc::torch_backend

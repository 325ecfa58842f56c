#include "net_request.hpp"

#include <algorithm>

namespace sharc::nccl {

void NetRequest::reset(Use u, void* comm, uint32_t toPeer) {
  use = u;
  owner = comm;
  n = 0;
  pending = 0;
  peer = toPeer;
  posted.fill(false);
  sizes.fill(0);
  matchedTag = 0;
  polls = 0;
  error = Result::Success;
  message.clear();
  for (size_t i = 0; i < transfers.size(); ++i) {
    transfers[i].owner = this;
    transfers[i].index = static_cast<uint32_t>(i);
  }
}

void NetRequest::onTransferDone(transport::Transfer& t, size_t bytes, uint64_t tag) {
  if (use != Use::Send) {  // a send keeps the size it posted (completions may report 0)
    sizes[t.index] = bytes;
    matchedTag = tag;
  }
  posted[t.index] = false;
  --pending;
}

void NetRequest::onTransferError(transport::Transfer& t, Result code, const std::string& msg) {
  if (error == Result::Success) {
    error = code == Result::InvalidUsage ? Result::InvalidUsage : Result::RemoteError;
    message = msg;
  }
  posted[t.index] = false;
  --pending;
}

void NetRequest::cancelPosted(transport::Endpoint& endpoint) {
  for (int i = 0; i < n; ++i)
    if (posted[static_cast<size_t>(i)]) endpoint.cancel(transfers[static_cast<size_t>(i)]);
}

RequestPool::RequestPool(size_t capacity) {
  slots_.reserve(capacity);
  free_.reserve(capacity);
  for (size_t i = 0; i < capacity; ++i) {
    slots_.push_back(std::make_unique<NetRequest>());
    free_.push_back(slots_.back().get());
  }
}

NetRequest* RequestPool::acquire(NetRequest::Use use, void* comm, uint32_t peer) {
  if (free_.empty()) return nullptr;
  NetRequest* r = free_.back();
  free_.pop_back();
  r->reset(use, comm, peer);
  return r;
}

void RequestPool::release(NetRequest* request) {
  request->use = NetRequest::Use::Free;
  free_.push_back(request);
}

bool RequestPool::owns(const NetRequest* request) const {
  return std::any_of(slots_.begin(), slots_.end(),
                     [&](const std::unique_ptr<NetRequest>& s) { return s.get() == request; });
}

std::vector<std::unique_ptr<NetRequest>> RequestPool::takeInFlight(transport::Endpoint& endpoint) {
  std::vector<std::unique_ptr<NetRequest>> inFlight;
  for (std::unique_ptr<NetRequest>& slot : slots_) {
    if (slot->use == NetRequest::Use::Free || slot->pending == 0) continue;
    slot->cancelPosted(endpoint);
    slot->owner = nullptr;
    inFlight.push_back(std::move(slot));
  }
  std::erase(slots_, nullptr);
  free_.clear();
  return inFlight;
}

}  // namespace sharc::nccl

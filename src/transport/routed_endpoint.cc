#include "routed_endpoint.hpp"

#include <sharc/error.hpp>

namespace sharc::transport {

RoutedEndpoint::RoutedEndpoint(std::unique_ptr<Endpoint> fabric, std::unique_ptr<ShmEndpoint> local,
                               size_t peers)
    : fabric_(std::move(fabric)), local_(std::move(local)), allLocal_(true) {
  for (size_t p = 0; p < peers; ++p)
    allLocal_ = allLocal_ && local_->reaches(static_cast<uint32_t>(p));
}

RoutedEndpoint::~RoutedEndpoint() = default;

PostStatus RoutedEndpoint::postSend(uint32_t peer, uint64_t tag, const void* buf, size_t len,
                                    Transfer& t) {
  Endpoint& via = local_->reaches(peer) ? static_cast<Endpoint&>(*local_) : *fabric_;
  const PostStatus st = via.postSend(peer, tag, buf, len, t);
  if (st == PostStatus::Failed) lastError_ = via.lastError();
  return st;
}

PostStatus RoutedEndpoint::postRecv(uint32_t fromPeer, uint64_t tag, uint64_t ignore, void* buf,
                                    size_t len, Transfer& t) {
  if (fromPeer != kAnyPeer) {
    Endpoint& via = local_->reaches(fromPeer) ? static_cast<Endpoint&>(*local_) : *fabric_;
    const PostStatus st = via.postRecv(fromPeer, tag, ignore, buf, len, t);
    if (st == PostStatus::Failed) lastError_ = via.lastError();
    return st;
  }
  Wildcard& w = wildcards_.emplace_back();
  w.user = &t;
  w.fabricHalf.owner = w.localHalf.owner = this;
  const PostStatus f = fabric_->postRecv(kAnyPeer, tag, ignore, buf, len, w.fabricHalf);
  if (f != PostStatus::Posted) {
    lastError_ = fabric_->lastError();
    wildcards_.pop_back();
    return f == PostStatus::Retry ? f : PostStatus::Failed;
  }
  if (local_->postRecv(kAnyPeer, tag, ignore, buf, len, w.localHalf) != PostStatus::Posted)
    w.localOpen = false;  // the fabric half alone still serves
  return PostStatus::Posted;
}

void RoutedEndpoint::cancel(Transfer& t) {
  for (Wildcard& w : wildcards_)
    if (w.user == &t) {
      if (w.fabricOpen) fabric_->cancel(w.fabricHalf);
      if (w.localOpen) local_->cancel(w.localHalf);
      return;
    }
  // Each transport ignores transfers it does not hold.
  fabric_->cancel(t);
  local_->cancel(t);
}

size_t RoutedEndpoint::progress() {
  size_t handled = local_->progress();
  if (!allLocal_ || ++sinceFabricPoll_ >= 256) {
    sinceFabricPoll_ = 0;
    handled += fabric_->progress();
  }
  return handled;
}

std::string RoutedEndpoint::lastError() const {
  return lastError_;
}

void RoutedEndpoint::onTransferDone(Transfer& t, size_t bytes, uint64_t tag) {
  finishHalf(t, true, bytes, tag, Result::Success, {});
}

void RoutedEndpoint::onTransferError(Transfer& t, Result code, const std::string& message) {
  finishHalf(t, false, 0, 0, code, message);
}

// One half of a wildcard receive has finished: the first result goes to the user, the other
// half is canceled, and the pair is forgotten once both halves are closed.
void RoutedEndpoint::finishHalf(Transfer& half, bool ok, size_t bytes, uint64_t tag, Result code,
                                const std::string& message) {
  for (auto it = wildcards_.begin(); it != wildcards_.end(); ++it) {
    Wildcard& w = *it;
    const bool isFabric = &half == &w.fabricHalf;
    if (!isFabric && &half != &w.localHalf) continue;
    (isFabric ? w.fabricOpen : w.localOpen) = false;
    const bool otherOpen = isFabric ? w.localOpen : w.fabricOpen;
    Transfer* user = w.user;
    bool report = false;
    if (!w.reported && (ok || !otherOpen)) {
      w.reported = report = true;
      if (otherOpen) {
        if (isFabric)
          local_->cancel(w.localHalf);
        else
          fabric_->cancel(w.fabricHalf);
      }
    }
    if (!w.fabricOpen && !w.localOpen) wildcards_.erase(it);
    // Reported last: the owner may post again from its callback.
    if (report) {
      if (ok)
        user->owner->onTransferDone(*user, bytes, tag);
      else
        user->owner->onTransferError(*user, code, message);
    }
    return;
  }
}

}  // namespace sharc::transport

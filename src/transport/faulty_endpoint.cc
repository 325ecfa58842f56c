#include "faulty_endpoint.hpp"

#include "core/log.hpp"
#include "core/message_tag.hpp"

namespace sharc::transport {
namespace {

namespace tag = core::tag;

// A collective's message (not an abort notice, not point-to-point).
bool collective(uint64_t t) {
  return tag::isCollectiveSlot(tag::slotOf(t));
}

}  // namespace

FaultyEndpoint::FaultyEndpoint(std::unique_ptr<Endpoint> inner, core::FaultPlan& plan,
                               int worldRank)
    : inner_(std::move(inner)), plan_(plan), rank_(worldRank) {
  SHARC_INFO("rank " << rank_ << ": SHARC_FAULT: injecting faults through the endpoint");
}

FaultyEndpoint::~FaultyEndpoint() {
  inner_.reset();  // first: no completion may reach the shadows freed after it
}

bool FaultyEndpoint::dropped() {
  if (dropReason_.empty()) dropReason_ = plan_.dropped(rank_);
  return !dropReason_.empty();
}

template <typename Post>
PostStatus FaultyEndpoint::postShadowed(Transfer& t, uint64_t tag, bool counted, Post&& post) {
  if (dropped()) {
    lastError_ = dropReason_;
    return PostStatus::Failed;
  }
  auto s = std::make_unique<Shadow>();
  s->owner = this;
  s->user = &t;
  s->tag = tag;
  s->counted = counted;
  const PostStatus st = post(*s);
  switch (st) {
    case PostStatus::Posted: shadows_[&t] = std::move(s); break;
    case PostStatus::Failed: lastError_ = inner_->lastError(); break;
    case PostStatus::Retry: break;
    case PostStatus::Completed:  // an injected send: it completes here
      if (counted) {
        std::string message;
        if (plan_.onCompletion(rank_, tag::commOf(tag), tag::seqOf(tag), message) ==
            core::FaultHit::Fail) {
          lastError_ = message;
          return PostStatus::Failed;
        }
      }
      break;
  }
  return st;
}

PostStatus FaultyEndpoint::postSend(uint32_t peer, uint64_t tag, const void* buf, size_t len,
                                    Transfer& t) {
  if (tag::slotOf(tag) != tag::kControlSlot) {  // abort notices are never held back
    const auto delay =
        plan_.sendDelay(rank_, tag::commOf(tag),
                        collective(tag) ? std::optional<uint32_t>(tag::seqOf(tag)) : std::nullopt);
    if (delay.count() > 0) {
      // Not posted until `delay` after the first attempt: the caller retries meanwhile, and
      // the rest of its progress (receives, other calls) goes on.
      const auto now = std::chrono::steady_clock::now();
      auto it = held_.find(&t);
      if (it == held_.end() || it->second.tag != tag) {
        if (held_.size() > 4096) held_.clear();  // entries of calls that failed while held
        held_[&t] = {tag, now};
        return PostStatus::Retry;
      }
      if (now - it->second.since < delay) return PostStatus::Retry;
      held_.erase(it);
    }
  }
  return postShadowed(t, tag, collective(tag),
                      [&](Transfer& s) { return inner_->postSend(peer, tag, buf, len, s); });
}

PostStatus FaultyEndpoint::postRecv(uint32_t fromPeer, uint64_t tag, uint64_t ignore, void* buf,
                                    size_t len, Transfer& t) {
  // A receive whose tag leaves the sequence open (the abort-notice receive) is no call's.
  const bool counted = collective(tag) && (ignore & tag::kSeqMask) == 0;
  return postShadowed(t, tag, counted, [&](Transfer& s) {
    return inner_->postRecv(fromPeer, tag, ignore, buf, len, s);
  });
}

PostStatus FaultyEndpoint::postRead(uint32_t peer, void* buf, size_t len, uint64_t remoteAddr,
                                    uint64_t remoteBase, uint64_t remoteKey, Transfer& t) {
  return postShadowed(t, 0, false, [&](Transfer& s) {
    return inner_->postRead(peer, buf, len, remoteAddr, remoteBase, remoteKey, s);
  });
}

bool FaultyEndpoint::registerMemory(const MemoryRegistration& m, uint64_t& key) {
  const bool ok = inner_->registerMemory(m, key);
  if (!ok) lastError_ = inner_->lastError();
  return ok;
}

void FaultyEndpoint::cancel(Transfer& t) {
  held_.erase(&t);
  auto it = shadows_.find(&t);
  if (it != shadows_.end()) inner_->cancel(*it->second);
}

void FaultyEndpoint::onTransferDone(Transfer& t, size_t bytes, uint64_t tag) {
  auto& s = static_cast<Shadow&>(t);
  Transfer* user = s.user;
  // Owned here until this returns: the user may post its transfer again from the callback.
  auto node = shadows_.extract(user);
  if (dropped()) {  // the endpoint is gone: nothing more is delivered
    user->owner->onTransferError(*user, Result::SystemError, dropReason_);
    return;
  }
  if (s.counted) {
    std::string message;
    if (plan_.onCompletion(rank_, tag::commOf(s.tag), tag::seqOf(s.tag), message) ==
        core::FaultHit::Fail) {
      user->owner->onTransferError(*user, Result::SystemError, message);
      return;
    }
  }
  user->owner->onTransferDone(*user, bytes, tag);
}

void FaultyEndpoint::onTransferError(Transfer& t, Result code, const std::string& message) {
  auto& s = static_cast<Shadow&>(t);
  Transfer* user = s.user;
  auto node = shadows_.extract(user);
  user->owner->onTransferError(*user, code, message);
}

}  // namespace sharc::transport

#include "striped_endpoint.hpp"

#include <algorithm>
#include <cstring>
#include <sharc/error.hpp>
#include <type_traits>

namespace sharc::transport {
namespace {

// Near-equal pieces, the larger first (the same cut on both sides).
size_t pieceLen(size_t len, size_t parts, size_t i) {
  return len / parts + (i < len % parts ? 1 : 0);
}

}  // namespace

StripedEndpoint::StripedEndpoint(std::vector<std::unique_ptr<Endpoint>> rails)
    : rails_(std::move(rails)) {
  if (rails_.empty()) throw Error(Result::InternalError, "multi-rail: no rail endpoints");
}

StripedEndpoint::~StripedEndpoint() = default;

std::string StripedEndpoint::localAddress() const {
  std::string out;
  for (const auto& rail : rails_) {
    const std::string a = rail->localAddress();
    const uint32_t n = static_cast<uint32_t>(a.size());
    out.append(reinterpret_cast<const char*>(&n), sizeof(n));
    out += a;
  }
  return out;
}

void StripedEndpoint::setPeers(const std::vector<std::string>& addresses) {
  std::vector<std::vector<std::string>> perRail(rails_.size());
  for (size_t p = 0; p < addresses.size(); ++p) {
    const std::string& a = addresses[p];
    size_t at = 0;
    for (size_t r = 0; r < rails_.size(); ++r) {
      uint32_t n = 0;
      if (at + sizeof(n) > a.size())
        throw Error(Result::InvalidUsage,
                    "multi-rail: peer " + std::to_string(p) + " has fewer than " +
                        std::to_string(rails_.size()) +
                        " rails (give every rank the same number of NICs: SHARC_NICS)");
      std::memcpy(&n, a.data() + at, sizeof(n));
      at += sizeof(n);
      if (at + n > a.size())
        throw Error(Result::InvalidUsage,
                    "multi-rail: malformed address of peer " + std::to_string(p));
      perRail[r].push_back(a.substr(at, n));
      at += n;
    }
    if (at != a.size())
      throw Error(Result::InvalidUsage,
                  "multi-rail: peer " + std::to_string(p) + " has more than " +
                      std::to_string(rails_.size()) +
                      " rails (give every rank the same number of NICs: SHARC_NICS)");
  }
  for (size_t r = 0; r < rails_.size(); ++r) rails_[r]->setPeers(perRail[r]);
}

size_t StripedEndpoint::maxMessageSize() const {
  size_t most = SIZE_MAX;
  for (const auto& rail : rails_) most = std::min(most, rail->maxMessageSize());
  return most;
}

size_t StripedEndpoint::recvQueueSize() const {
  size_t least = SIZE_MAX;
  for (const auto& rail : rails_) least = std::min(least, rail->recvQueueSize());
  return least;
}

PostStatus StripedEndpoint::postSend(uint32_t peer, uint64_t tag, const void* buf, size_t len,
                                     Transfer& t) {
  if (stripePieces(len, rails_.size()) == 1)
    return unstriped(rails_[0]->postSend(peer, tag, buf, len, t));
  return start(
      striped_.emplace_back(Striped{.user = &t,
                                    .send = true,
                                    .peer = peer,
                                    .tag = tag,
                                    .buf = static_cast<std::byte*>(const_cast<void*>(buf))}),
      len);
}

PostStatus StripedEndpoint::postRecv(uint32_t fromPeer, uint64_t tag, uint64_t ignore, void* buf,
                                     size_t len, Transfer& t) {
  if (stripePieces(len, rails_.size()) == 1 || fromPeer == kAnyPeer)
    return unstriped(rails_[0]->postRecv(fromPeer, tag, ignore, buf, len, t));
  return start(striped_.emplace_back(Striped{.user = &t,
                                             .peer = fromPeer,
                                             .tag = tag,
                                             .ignore = ignore,
                                             .buf = static_cast<std::byte*>(buf)}),
               len);
}

PostStatus StripedEndpoint::unstriped(PostStatus st) {
  if (st == PostStatus::Failed) lastError_ = rails_[0]->lastError();
  return st;
}

// Cuts a new striped message into stripePieces pieces, piece i for rail i, and posts what the
// rails take now.
PostStatus StripedEndpoint::start(Striped& s, size_t len) {
  const size_t parts = stripePieces(len, rails_.size());
  s.pieces.resize(parts);
  size_t offset = 0;
  for (size_t i = 0; i < parts; ++i) {
    s.pieces[i].transfer.owner = this;
    s.pieces[i].transfer.index = static_cast<uint32_t>(i);
    s.pieces[i].record = &s;
    s.pieces[i].offset = offset;
    s.pieces[i].len = pieceLen(len, parts, i);
    offset += s.pieces[i].len;
  }
  s.open = parts;
  if (!postPieces(s)) waitingPost_.push_back(&s);
  return PostStatus::Posted;
}

bool StripedEndpoint::postPieces(Striped& s) {
  for (size_t i = 0; i < s.pieces.size(); ++i) {
    Piece& p = s.pieces[i];
    if (p.posted || p.done) continue;
    if (s.failed || s.canceled) {  // never posted: finished as it is
      p.done = true;
      --s.open;
      reportIfFinished(s);
      continue;
    }
    Endpoint& rail = *rails_[i];
    const PostStatus st =
        s.send ? rail.postSend(s.peer, s.tag, s.buf + p.offset, p.len, p.transfer)
               : rail.postRecv(s.peer, s.tag, s.ignore, s.buf + p.offset, p.len, p.transfer);
    if (st == PostStatus::Retry) return false;
    if (st == PostStatus::Posted) {
      p.posted = true;
    } else if (st == PostStatus::Completed) {  // an injected send piece
      p.posted = true;
      finishPiece(p.transfer, true, p.len, s.tag, Result::Success, {});
    } else {
      p.posted = true;
      finishPiece(p.transfer, false, 0, 0, Result::SystemError,
                  "rail " + std::to_string(i) + ": " + rail.lastError());
    }
  }
  return true;
}

void StripedEndpoint::cancel(Transfer& t) {
  for (Striped& s : striped_)
    if (s.user == &t && !s.canceled) {
      // Part of the message is here, so all of it was sent: it completes. (Canceling the
      // rest would leave it unmatched, for a later receive of the same tag to take.)
      if (!s.send && s.received > 0) return;
      s.userCanceled = !s.send;
      s.canceled = true;
      s.failed = true;
      s.code = Result::SystemError;
      s.message = "canceled";
      cancelPieces(s);
      return;
    }
  rails_[0]->cancel(t);  // an unstriped transfer (rail 0 ignores what it does not hold)
}

void StripedEndpoint::cancelPieces(Striped& s) {
  for (size_t i = 0; i < s.pieces.size(); ++i)
    if (s.pieces[i].posted && !s.pieces[i].done) {
      s.pieces[i].cancelAsked = true;
      rails_[i]->cancel(s.pieces[i].transfer);
    }
  postPieces(s);  // pieces never posted finish now
}

void StripedEndpoint::withdrawCancel(Striped& s) {
  s.userCanceled = s.canceled = s.failed = false;
  s.withdrawn = true;
  s.code = Result::Success;
  s.message.clear();
  for (Piece& p : s.pieces)
    if (p.done && !p.arrived) {  // stopped (canceled, or never posted): again
      p.done = p.posted = p.cancelAsked = false;
      ++s.open;
    }
  postOrQueue(s);
}

void StripedEndpoint::postOrQueue(Striped& s) {
  if (!postPieces(s) &&
      std::find(waitingPost_.begin(), waitingPost_.end(), &s) == waitingPost_.end())
    waitingPost_.push_back(&s);
}

size_t StripedEndpoint::progress() {
  size_t handled = 0;
  for (auto& rail : rails_) handled += rail->progress();
  while (!waitingPost_.empty() && postPieces(*waitingPost_.front())) waitingPost_.pop_front();
  // Records whose pieces have all finished were reported; forget them.
  if (reportedRecords_ > 0) {
    std::erase_if(striped_, [](const Striped& s) { return s.reported; });
    reportedRecords_ = 0;
  }
  return handled;
}

void StripedEndpoint::onTransferDone(Transfer& t, size_t bytes, uint64_t tag) {
  finishPiece(t, true, bytes, tag, Result::Success, {});
}

void StripedEndpoint::onTransferError(Transfer& t, Result code, const std::string& message) {
  finishPiece(t, false, 0, 0, code, message);
}

void StripedEndpoint::finishPiece(Transfer& t, bool ok, size_t bytes, uint64_t tag, Result code,
                                  const std::string& message) {
  static_assert(std::is_standard_layout_v<Piece>, "a Piece must start at its transfer");
  Piece& p = *reinterpret_cast<Piece*>(&t);
  Striped& s = *p.record;
  {
    p.done = true;
    --s.open;
    if (ok) {
      p.arrived = true;
      if (s.userCanceled) withdrawCancel(s);
      s.received += bytes;
      s.matchedTag = tag;
      // A short piece: the sender cut another length. End the message here; the schedule
      // sees the short total and reports the mismatched count.
      if (!s.send && bytes < p.len && !s.canceled) {
        s.canceled = true;
        cancelPieces(s);
      }
    } else if (s.withdrawn && p.cancelAsked) {  // its cancel was withdrawn: post it again
      p.done = p.posted = p.cancelAsked = false;
      ++s.open;
      postOrQueue(s);
      return;
    } else if (!s.canceled && !s.failed) {
      s.failed = true;
      s.code = code;
      s.message = message;
      cancelPieces(s);
    }
    reportIfFinished(s);
  }
}

void StripedEndpoint::reportIfFinished(Striped& s) {
  if (s.open != 0 || s.reported) return;
  s.reported = true;
  ++reportedRecords_;
  Transfer& user = *s.user;
  if (s.failed)
    user.owner->onTransferError(user, s.code, s.message);
  else
    user.owner->onTransferDone(user, s.received, s.matchedTag);
}

bool StripedEndpoint::supportsHmem(std::string& why) const {
  for (size_t i = 0; i < rails_.size(); ++i)
    if (!rails_[i]->supportsHmem(why)) {
      why = "rail " + std::to_string(i) + ": " + why;
      return false;
    }
  return true;
}

bool StripedEndpoint::registerMemory(const MemoryRegistration& m, uint64_t& key) {
  for (size_t i = 0; i < rails_.size(); ++i) {
    uint64_t railKey = 0;
    if (!rails_[i]->registerMemory(m, railKey)) {
      lastError_ = "rail " + std::to_string(i) + ": " + rails_[i]->lastError();
      for (size_t j = 0; j < i; ++j) rails_[j]->releaseMemory(m.buf, m.len);
      return false;
    }
    if (i == 0) key = railKey;
  }
  return true;
}

void StripedEndpoint::releaseMemory(const void* buf, size_t len) {
  for (auto& rail : rails_) rail->releaseMemory(buf, len);
}

}  // namespace sharc::transport

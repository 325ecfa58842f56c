#include "shm_endpoint.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <sharc/error.hpp>

#include "core/copy.hpp"
#include "core/log.hpp"

namespace sharc::transport {

// Layout of one FIFO in the segment: the writer's and the reader's counters on separate cache
// lines, then the slots, each a 64-byte header and its payload.
struct ShmEndpoint::Fifo {
  alignas(64) std::atomic<uint64_t> tail;  // slots written (by the sender)
  alignas(64) std::atomic<uint64_t> head;  // slots read (by the receiver)
};

namespace {

struct alignas(64) SlotHeader {
  uint64_t tag;
  uint64_t total;  // bytes of the whole message
  uint32_t bytes;  // payload bytes in this slot
  uint32_t flags;
};
constexpr uint32_t kFirst = 1;    // first fragment of a message
constexpr uint32_t kAbandon = 2;  // the sender canceled the message it was writing

static_assert(sizeof(SlotHeader) == 64);
static_assert(std::atomic<uint64_t>::is_always_lock_free, "FIFO counters must be lock-free");
constexpr size_t kFifoHeader = 128;
constexpr size_t kSegmentHeader = 4096;
constexpr auto kPeerCheckInterval = std::chrono::milliseconds(100);
// An unexpected message of up to this size is buffered in one allocation; larger ones grow.
constexpr size_t kUnexpectedFirst = size_t{1} << 20;

SlotHeader* slotAt(void* fifo, const ShmGeometry& g, uint64_t seq) {
  auto* base = static_cast<std::byte*>(fifo) + kFifoHeader;
  return reinterpret_cast<SlotHeader*>(base + (seq % g.slots) * (sizeof(SlotHeader) + g.slotBytes));
}

// Why a slot with header `h` cannot come from a sharc writer, given the message being read
// (nullptr: it can). Checked before anything is copied: the peer's bytes must not move this
// rank's copies out of the slot or out of the receiving buffer.
const char* malformedSlot(const SlotHeader& h, bool active, size_t total, size_t received,
                          uint32_t slotBytes) {
  if (h.flags & kAbandon) return nullptr;
  if (h.bytes > slotBytes) return "a fragment larger than a slot";
  if (h.flags & kFirst) {
    if (active) return "a new message before the last one ended";
    if (h.bytes > h.total) return "a fragment larger than its message";
  } else {
    if (!active) return "a fragment outside any message";
    if (h.bytes > total - received) return "a fragment beyond the end of its message";
  }
  return nullptr;
}

// A process that has exited (or is a zombie nobody has reaped yet) is not coming back.
bool processGone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const auto paren = line.rfind(')');
  const char state = paren != std::string::npos && paren + 2 < line.size() ? line[paren + 2] : '?';
  return state == 'Z' || state == 'X';
}

}  // namespace

ShmGeometry ShmGeometry::forRanks(int ranks) {
  ShmGeometry g{static_cast<uint32_t>(ranks), 16, 64 * 1024};
  const size_t pairs = static_cast<size_t>(ranks) * static_cast<size_t>(ranks);
  // Shrink the slots to 4 KiB first, then their number to 4, then the slots to 1 KiB.
  while (pairs * g.fifoBytes() > (size_t{512} << 20)) {
    if (g.slotBytes > 4096)
      g.slotBytes /= 2;
    else if (g.slots > 4)
      g.slots /= 2;
    else if (g.slotBytes > 1024)
      g.slotBytes /= 2;
    else
      break;
  }
  return g;
}

size_t ShmGeometry::fifoBytes() const {
  return kFifoHeader + size_t{slots} * (sizeof(SlotHeader) + slotBytes);
}

size_t ShmGeometry::segmentBytes() const {
  return kSegmentHeader + size_t{ranks} * ranks * fifoBytes();
}

void ShmGeometry::reserveInbound(ShmSegment& segment, int me) const {
  if (me == 0) segment.reserve(0, kSegmentHeader);
  for (uint32_t i = 0; i < ranks; ++i)
    if (static_cast<int>(i) != me)
      segment.reserve(kSegmentHeader + (size_t{i} * ranks + static_cast<size_t>(me)) * fifoBytes(),
                      fifoBytes());
}

ShmEndpoint::ShmEndpoint(ShmSegment segment, ShmGeometry geometry, int me,
                         std::vector<uint32_t> peerOfLocal, std::vector<pid_t> pidOfLocal)
    : segment_(std::move(segment)),
      geometry_(geometry),
      me_(me),
      peerOfLocal_(std::move(peerOfLocal)),
      peers_(peerOfLocal_.size()),
      nextPeerCheck_(std::chrono::steady_clock::now() + kPeerCheckInterval) {
  if (segment_.size() < geometry_.segmentBytes() || peerOfLocal_.size() != geometry_.ranks ||
      pidOfLocal.size() != geometry_.ranks)
    throw Error(Result::InternalError, "shared memory: segment does not match its geometry");
  uint32_t maxPeer = 0;
  for (uint32_t p : peerOfLocal_) maxPeer = std::max(maxPeer, p);
  localOfPeer_.assign(size_t{maxPeer} + 1, -1);
  auto* base = static_cast<std::byte*>(segment_.data()) + kSegmentHeader;
  const size_t n = geometry_.ranks;
  for (size_t i = 0; i < n; ++i) {
    localOfPeer_[peerOfLocal_[i]] = static_cast<int>(i);
    peers_[i].out = reinterpret_cast<Fifo*>(base + (me * n + i) * geometry_.fifoBytes());
    peers_[i].in = reinterpret_cast<Fifo*>(base + (i * n + me) * geometry_.fifoBytes());
    peers_[i].pid = pidOfLocal[i];
  }
}

ShmEndpoint::~ShmEndpoint() {
  SHARC_INFO("shared memory: " << messages_ << " messages received, " << unexpectedCount_
                               << " of them before their receive was posted");
}

PostStatus ShmEndpoint::postSend(uint32_t peer, uint64_t tag, const void* buf, size_t len,
                                 Transfer& t) {
  if (!reaches(peer) || localOfPeer_[peer] == me_) {
    lastError_ = "shared memory: peer " + std::to_string(peer) + " is not on this node";
    return PostStatus::Failed;
  }
  Peer& p = peers_[localOfPeer_[peer]];
  if (p.dead) {
    lastError_ = !p.malformed.empty() ? p.malformed
                                      : "shared memory: peer " + std::to_string(peer) + " (pid " +
                                            std::to_string(p.pid) + ") has exited";
    return PostStatus::Failed;
  }
  const bool idle = p.sends.empty() && !p.abandon;
  p.sends.push_back(Send{&t, tag, static_cast<const std::byte*>(buf), len});
  // Eager: a message that fits into the free slots right now is complete at once (no
  // completion is reported for it then).
  if (idle && writeSends(p, &t)) return PostStatus::Completed;
  return PostStatus::Posted;
}

// Writes queued sends into free slots. Completions are reported through progress(), except
// for `inlineSend`'s: returns true if that one was written completely.
bool ShmEndpoint::writeSends(Peer& p, Transfer* inlineSend) {
  uint64_t head = p.out->head.load(std::memory_order_acquire);
  bool inlineDone = false;
  while (p.abandon || !p.sends.empty()) {
    if (p.tail - head >= geometry_.slots) {
      head = p.out->head.load(std::memory_order_acquire);
      if (p.tail - head >= geometry_.slots) break;
    }
    SlotHeader* slot = slotAt(p.out, geometry_, p.tail);
    if (p.abandon) {
      *slot = SlotHeader{0, 0, 0, kAbandon};
      p.abandon = false;
    } else {
      Send& s = p.sends.front();
      const size_t bytes = std::min<size_t>(s.len - s.offset, geometry_.slotBytes);
      *slot = SlotHeader{s.tag, s.len, static_cast<uint32_t>(bytes), s.offset == 0 ? kFirst : 0u};
      if (bytes > 0) std::memcpy(slot + 1, s.buf + s.offset, bytes);
      s.offset += bytes;
      if (s.offset == s.len) {
        if (s.t == inlineSend)
          inlineDone = true;
        else
          done(s.t, s.len, s.tag);
        p.sends.pop_front();
      }
    }
    p.out->tail.store(++p.tail, std::memory_order_release);
  }
  return inlineDone;
}

PostStatus ShmEndpoint::postRecv(uint32_t fromPeer, uint64_t tag, uint64_t ignore, void* buf,
                                 size_t len, Transfer& t) {
  Recv r{&t, tag, ignore, static_cast<std::byte*>(buf), len};
  const bool any = fromPeer == kAnyPeer;
  if (!any && (!reaches(fromPeer) || localOfPeer_[fromPeer] == me_)) {
    lastError_ = "shared memory: peer " + std::to_string(fromPeer) + " is not on this node";
    return PostStatus::Failed;
  }
  // A message that is already here (or arriving) matches first, oldest first.
  for (size_t i = 0; i < peers_.size(); ++i) {
    if (!any && static_cast<int>(i) != localOfPeer_[fromPeer]) continue;
    Peer& p = peers_[i];
    for (auto it = p.unexpected.begin(); it != p.unexpected.end(); ++it) {
      if (it->claimedBy || !matches(r, it->tag)) continue;
      if (it->received == it->size) {
        deliverUnexpected(*it, r);
        p.unexpected.erase(it);
      } else {
        it->claimedBy = std::make_unique<Recv>(r);
      }
      return PostStatus::Posted;
    }
  }
  if (!any && peers_[localOfPeer_[fromPeer]].dead) {
    const Peer& p = peers_[localOfPeer_[fromPeer]];
    lastError_ = !p.malformed.empty()
                     ? p.malformed
                     : "shared memory: peer " + std::to_string(fromPeer) + " has exited";
    return PostStatus::Failed;
  }
  (any ? anyRecvs_ : peers_[localOfPeer_[fromPeer]].recvs).push_back(r);
  return PostStatus::Posted;
}

void ShmEndpoint::deliverUnexpected(Unexpected& u, const Recv& r) {
  if (u.size > r.len) {
    failed(r.t, Result::InvalidUsage,
           "message larger than the posted buffer (" + std::to_string(u.size - r.len) +
               " bytes beyond it)");
    return;
  }
  if (u.size > 0) std::memcpy(r.buf, u.data.get(), u.size);
  done(r.t, u.size, u.tag);
}

void ShmEndpoint::done(Transfer* t, size_t bytes, uint64_t tag) {
  completions_.push_back(Completion{t, true, bytes, tag, Result::Success, {}});
}

void ShmEndpoint::failed(Transfer* t, Result code, std::string message) {
  completions_.push_back(Completion{t, false, 0, 0, code, std::move(message)});
}

// Matches the first fragment of a message to a posted receive, or keeps it as unexpected.
void ShmEndpoint::startIncoming(int local, uint64_t tag, size_t total) {
  Peer& p = peers_[local];
  Incoming& in = p.incoming;
  in = Incoming{true, tag, total, 0, nullptr, nullptr, nullptr, false};
  ++messages_;
  auto take = [&](std::list<Recv>& list) {
    for (auto it = list.begin(); it != list.end(); ++it) {
      if (!matches(*it, tag)) continue;
      in.recv = it->t;
      if (total > it->len) {
        failed(it->t, Result::InvalidUsage,
               "message larger than the posted buffer (" + std::to_string(total - it->len) +
                   " bytes beyond it)");
        in.discard = true;
      } else {
        in.dst = it->buf;
      }
      list.erase(it);
      return true;
    }
    return false;
  };
  if (take(p.recvs) || take(anyRecvs_)) {
    if (in.discard) in.recv = nullptr;  // truncated: already failed
    return;
  }
  ++unexpectedCount_;
  // The buffer grows as fragments arrive (reserveUnexpected): a size in a slot header alone
  // does not make this rank allocate it.
  p.unexpected.push_back(Unexpected{tag, nullptr, total, 0, 0, nullptr});
  in.unexpected = &p.unexpected.back();
}

// Makes the unexpected message being read from `p` hold `bytes` more; false when memory is
// short. Messages up to kUnexpectedFirst get their whole size at once.
bool ShmEndpoint::reserveUnexpected(Peer& p, size_t bytes) {
  Unexpected& u = *p.incoming.unexpected;
  const size_t need = u.received + bytes;  // <= u.size: malformedSlot
  if (need <= u.capacity && u.data) return true;
  const size_t capacity = std::min(u.size, std::max({need, 2 * u.capacity, kUnexpectedFirst}));
  try {
    auto grown = std::make_unique_for_overwrite<std::byte[]>(capacity);
    if (u.received > 0) std::memcpy(grown.get(), u.data.get(), u.received);
    u.data = std::move(grown);
  } catch (const std::bad_alloc&) {
    return false;
  }
  u.capacity = capacity;
  p.incoming.dst = u.data.get();
  return true;
}

// Reads what peer `local` has written; returns the number of slots consumed. The peer's
// counters and slot headers are checked first: garbage there fails the peer (dropPeer)
// instead of steering this rank's copies (found by tests/fuzz/fuzz_shm_fifo.cc).
size_t ShmEndpoint::readFragments(int local) {
  Peer& p = peers_[local];
  if (p.dead) return 0;
  const uint64_t tail = p.in->tail.load(std::memory_order_acquire);
  auto drop = [&](const std::string& what) {  // off the hot path: only on garbage
    const std::string why = "peer " + std::to_string(peerOfLocal_[local]) + what;
    p.malformed = "shared memory: " + why;
    dropPeer(local, why);
  };
  if (tail > p.head && tail - p.head > geometry_.slots) {
    drop(" wrote a malformed FIFO: " + std::to_string(tail - p.head) +
         " slots published in a ring of " + std::to_string(geometry_.slots));
    return 0;
  }
  size_t consumed = 0;
  for (; p.head < tail; ++consumed) {
    const SlotHeader* slot = slotAt(p.in, geometry_, p.head);
    const SlotHeader h = *slot;  // one read: the peer could change the slot meanwhile
    Incoming& in = p.incoming;
    if (const char* bad = malformedSlot(h, in.active, in.total, in.received, geometry_.slotBytes)) {
      drop(std::string(" wrote a malformed slot (") + bad + ": tag " + std::to_string(h.tag) +
           ", " + std::to_string(h.bytes) + " bytes of " + std::to_string(h.total) + ", flags " +
           std::to_string(h.flags) + ")");
      return consumed;
    }
    if (h.flags & kAbandon) {
      if (in.active && in.recv)
        failed(in.recv, Result::RemoteError,
               "peer " + std::to_string(peerOfLocal_[local]) + " canceled the message");
      if (in.active && in.unexpected) {
        // A receive that claimed the message while it arrived fails with it.
        if (in.unexpected->claimedBy)
          failed(in.unexpected->claimedBy->t, Result::RemoteError,
                 "peer " + std::to_string(peerOfLocal_[local]) + " canceled the message");
        p.unexpected.remove_if([&](const Unexpected& u) { return &u == in.unexpected; });
      }
      in = Incoming{};
    } else {
      if (h.flags & kFirst) startIncoming(local, h.tag, h.total);
      if (in.unexpected && !reserveUnexpected(p, h.bytes)) {
        drop(": out of memory for a " + std::to_string(in.total) +
             "-byte message that arrived before its receive");
        return consumed;
      }
      // Large messages are outputs (blocks of a collective): stream them past the cache.
      if (!in.discard && h.bytes > 0)
        core::copyLarge(in.dst + in.received, slot + 1, h.bytes, in.total);
      in.received += h.bytes;
      if (in.unexpected) in.unexpected->received = in.received;
      if (in.received >= in.total) {
        if (in.recv && !in.discard) done(in.recv, in.total, in.tag);
        if (in.unexpected && in.unexpected->claimedBy) {
          const Recv r = *in.unexpected->claimedBy;
          Unexpected* u = in.unexpected;
          deliverUnexpected(*u, r);
          p.unexpected.remove_if([&](const Unexpected& x) { return &x == u; });
        }
        in = Incoming{};
      }
    }
    p.in->head.store(p.head + 1, std::memory_order_release);
    ++p.head;
  }
  return consumed;
}

void ShmEndpoint::cancel(Transfer& t) {
  auto dropRecv = [&](std::list<Recv>& list) {
    for (auto it = list.begin(); it != list.end(); ++it)
      if (it->t == &t) {
        list.erase(it);
        failed(&t, Result::SystemError, "canceled");
        return true;
      }
    return false;
  };
  if (dropRecv(anyRecvs_)) return;
  for (Peer& p : peers_) {
    if (dropRecv(p.recvs)) return;
    for (Unexpected& u : p.unexpected)
      if (u.claimedBy && u.claimedBy->t == &t) {
        u.claimedBy.reset();
        failed(&t, Result::SystemError, "canceled");
        return;
      }
    // A receive whose message is being read is past canceling (as a matched fi_trecv is):
    // it completes. Dropping the rest would lose a message its sender has sent.
    if (p.incoming.active && p.incoming.recv == &t) return;
    for (auto it = p.sends.begin(); it != p.sends.end(); ++it)
      if (it->t == &t) {
        // A half-written message is ended with an abandon mark so the reader resynchronises.
        if (it->offset > 0) p.abandon = true;
        p.sends.erase(it);
        failed(&t, Result::SystemError, "canceled");
        return;
      }
  }
}

size_t ShmEndpoint::progress() {
  size_t handled = 0;
  bool pending = false;  // a peer that exits while nothing waits on it is not an error
  for (size_t i = 0; i < peers_.size(); ++i) {
    if (static_cast<int>(i) == me_) continue;
    Peer& p = peers_[i];
    if (p.abandon || !p.sends.empty()) {
      const uint64_t before = p.tail;
      writeSends(p, nullptr);
      handled += p.tail - before;  // slots written are progress too (the waiter keeps spinning)
    }
    handled += readFragments(static_cast<int>(i));
    pending = pending || !p.sends.empty() || !p.recvs.empty() || p.incoming.active;
  }
  // Reading the clock on every poll would cost more than the poll: every 1024th.
  if (pending && (++polls_ & 1023) == 0 && std::chrono::steady_clock::now() >= nextPeerCheck_)
    checkPeers();
  // Owners may post from their callbacks: report from a private list.
  std::vector<Completion> ready;
  ready.swap(completions_);
  for (Completion& c : ready) {
    if (c.ok)
      c.t->owner->onTransferDone(*c.t, c.bytes, c.tag);
    else
      c.t->owner->onTransferError(*c.t, c.code, c.message);
  }
  return handled + ready.size();
}

void ShmEndpoint::checkPeers() {
  nextPeerCheck_ = std::chrono::steady_clock::now() + kPeerCheckInterval;
  for (size_t i = 0; i < peers_.size(); ++i)
    if (static_cast<int>(i) != me_ && !peers_[i].dead && processGone(peers_[i].pid))
      failPeer(static_cast<int>(i), "peer " + std::to_string(peerOfLocal_[i]) + " (pid " +
                                        std::to_string(peers_[i].pid) + ", same node) has exited");
}

// Everything that needs a peer that has exited fails; what it already wrote is still read.
void ShmEndpoint::failPeer(int local, const std::string& why) {
  readFragments(local);
  if (!peers_[local].dead) dropPeer(local, why);
}

// Fails everything that needs peer `local`, which is not read from again.
void ShmEndpoint::dropPeer(int local, const std::string& why) {
  Peer& p = peers_[local];
  p.dead = true;
  SHARC_WARN("shared memory: " << why);
  for (Send& s : p.sends) failed(s.t, Result::RemoteError, why);
  p.sends.clear();
  for (Recv& r : p.recvs) failed(r.t, Result::RemoteError, why);
  p.recvs.clear();
  if (p.incoming.active && p.incoming.recv) failed(p.incoming.recv, Result::RemoteError, why);
  for (Unexpected& u : p.unexpected)
    if (u.claimedBy) failed(u.claimedBy->t, Result::RemoteError, why);
  p.unexpected.clear();
  p.incoming = Incoming{};
}

}  // namespace sharc::transport

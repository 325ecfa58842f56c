// Receives from any source: one receive per peer races (Schedule::race); the first message
// is taken, and one that a loser's cancel came too late for waits as that peer's next.
#include <cstring>

#include "core/log.hpp"
#include "runtime/communicator_impl.hpp"

namespace sharc::detail {
namespace {

[[noreturn]] void invalid(Result code, int rank, const std::string& call, const std::string& what) {
  throw Error(code, "rank " + std::to_string(rank) + ": " + call + ": " + what);
}

uint32_t p2pSlot(uint32_t tag) {
  return algo::tag::kP2PSlotBase + tag % algo::tag::kP2PTags;
}

uint64_t p2pKey(int peer, uint32_t slot) {
  return uint64_t{static_cast<uint32_t>(peer)} << 32 | slot;
}

// Whether a receive from any source on `slot` has not finished yet.
bool anySourcePending(const CommState& c, uint32_t slot) {
  const auto it = c.anySourceRecvs.find(slot);
  if (it == c.anySourceRecvs.end()) return false;
  const std::shared_ptr<RequestState> r = it->second.lock();
  return r && !r->finished();
}

}  // namespace

void CommunicatorImpl::checkReceives(const std::vector<PointToPoint>& ops,
                                     const std::string& call) const {
  const CommState& c = *state_;
  for (const PointToPoint& p : ops) {
    if (p.kind != PointToPoint::Kind::Recv) continue;
    const uint32_t slot = p2pSlot(p.tag);
    const std::string what =
        "receive from rank " + std::to_string(p.peer) + " (tag " + std::to_string(p.tag) + "): ";
    if (anySourcePending(c, slot))
      invalid(Result::InvalidUsage, c.rank, call,
              what +
                  "a receive from any source on this tag has not completed; wait for it "
                  "first (it is matched before later receives on the tag)");
    const auto stray = c.strayMessages.find(p2pKey(p.peer, slot));
    if (stray != c.strayMessages.end() && stray->second.size() != p.bytes)
      invalid(Result::InvalidUsage, c.rank, call,
              what + "its next message holds " + std::to_string(stray->second.size()) +
                  " bytes where " + std::to_string(p.bytes) + " were expected");
  }
}

bool CommunicatorImpl::takeStray(const PointToPoint& p) {
  CommState& c = *state_;
  const uint64_t key = p2pKey(p.peer, p2pSlot(p.tag));
  const auto stray = c.strayMessages.find(key);
  if (stray == c.strayMessages.end()) return false;
  if (p.bytes > 0) std::memcpy(p.buf, stray->second.data(), p.bytes);
  c.strayMessages.erase(stray);
  ++c.recvSeq[key];
  return true;
}

Request CommunicatorImpl::startRecvAny(void* buf, size_t bytes, uint32_t tag) {
  CommState& c = *state_;
  const std::string call = "recv from any source";
  if (destroyed_) invalid(Result::InvalidUsage, c.rank, call, "communicator used after destroy");
  if (bytes > 0 && buf == nullptr)
    invalid(Result::InvalidArgument, c.rank, call,
            "null buffer for " + std::to_string(bytes) + " bytes");
  if (c.size < 2)
    invalid(Result::InvalidUsage, c.rank, call,
            "the communicator has no other rank (size " + std::to_string(c.size) + ")");
  Engine& engine = *c.engine;
  const size_t window = algo::recvWindow(engine.endpoint().recvQueueSize());
  if (static_cast<size_t>(c.size - 1) > window)
    invalid(Result::InvalidUsage, c.rank, call,
            "it posts one receive per peer, and " + std::to_string(c.size - 1) +
                " peers exceed the " + std::to_string(window) + " this endpoint keeps posted");
  const uint32_t slot = p2pSlot(tag);
  std::lock_guard<std::mutex> lock(engine.mu);
  if (c.aborted) invalid(Result::RemoteError, c.rank, call, c.abortMessage);
  if (anySourcePending(c, slot))
    invalid(Result::InvalidUsage, c.rank, call,
            "another receive from any source on tag " + std::to_string(tag) +
                " has not completed; wait for it first");

  auto schedule = std::make_shared<algo::Schedule>(
      baseContext(CollectiveKind::PointToPoint, DataType::Uint8, RedOp::Sum, bytes));
  auto request = std::make_shared<RequestState>(state_, schedule);
  // A message already here (a stray from an earlier race) is the first to have arrived.
  for (int peer = 0; peer < c.size && request->source < 0; ++peer) {
    if (peer == c.rank || !c.strayMessages.contains(p2pKey(peer, slot))) continue;
    const PointToPoint p{PointToPoint::Kind::Recv, peer, buf, bytes, tag};
    checkReceives({p}, call);
    takeStray(p);
    request->source = peer;
  }
  if (request->source < 0) {
    std::vector<algo::Schedule::OpId> probes;
    std::vector<std::pair<int, std::byte*>> from;  // per probe: its peer and scratch
    for (int peer = 0; peer < c.size; ++peer) {
      if (peer == c.rank) continue;
      std::byte* scratch = schedule->hostScratch(bytes);
      probes.push_back(
          schedule->recvWithSeq(peer, c.recvSeq[p2pKey(peer, slot)], slot, scratch, bytes));
      from.emplace_back(peer, scratch);
    }
    const algo::Schedule::OpId first = probes.front();
    RequestState* r = request.get();  // owns the schedule, and so outlives its callbacks
    schedule->race(std::move(probes), [&c, r, buf, slot, first, from = std::move(from)](
                                          algo::Schedule::OpId id, size_t n, bool won) {
      const auto& [peer, scratch] = from[id - first];
      const uint64_t key = p2pKey(peer, slot);
      if (won) {
        if (n > 0) std::memcpy(buf, scratch, n);
        ++c.recvSeq[key];
        r->source = peer;
      } else {
        c.strayMessages[key].assign(scratch, scratch + n);
      }
    });
    c.anySourceRecvs[slot] = request;
  }
  SHARC_TRACE(schedule->describe() << ": receive from any source on tag " << tag);
  return launch(std::move(request), recordPointToPoint(bytes));
}

}  // namespace sharc::detail

// Point-to-point groups and members-only sub-communicators: what frameworks that own the
// group structure (torch's c10d) need from the engine.
#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "core/config.hpp"
#include "core/log.hpp"
#include "runtime/communicator_impl.hpp"

namespace sharc::detail {
namespace {

[[noreturn]] void invalid(Result code, int rank, const std::string& call, const std::string& what) {
  throw Error(code, "rank " + std::to_string(rank) + ": " + call + ": " + what);
}

}  // namespace

Request CommunicatorImpl::startGroup(const std::vector<PointToPoint>& ops) {
  CommState& c = *state_;
  const std::string call = "send/recv";
  if (destroyed_) invalid(Result::InvalidUsage, c.rank, call, "communicator used after destroy");
  size_t bytes = 0;
  for (const PointToPoint& p : ops) {
    const char* what = p.kind == PointToPoint::Kind::Send ? "send to" : "receive from";
    if (p.peer < 0 || p.peer >= c.size || p.peer == c.rank)
      invalid(Result::InvalidArgument, c.rank, call,
              std::string(what) + " rank " + std::to_string(p.peer) +
                  ": peer out of range (expected another rank in 0.." + std::to_string(c.size - 1) +
                  ")");
    if (p.bytes > 0 && p.buf == nullptr)
      invalid(Result::InvalidArgument, c.rank, call,
              std::string(what) + " rank " + std::to_string(p.peer) + ": null buffer for " +
                  std::to_string(p.bytes) + " bytes");
    bytes += p.bytes;
  }
  Engine& engine = *c.engine;
  std::lock_guard<std::mutex> lock(engine.mu);
  if (c.aborted) invalid(Result::RemoteError, c.rank, call, c.abortMessage);
  checkReceives(ops, call);
  auto schedule = std::make_shared<algo::Schedule>(
      baseContext(CollectiveKind::PointToPoint, DataType::Uint8, RedOp::Sum, bytes));
  for (const PointToPoint& p : ops) {
    const uint32_t slot = algo::tag::kP2PSlotBase + p.tag % algo::tag::kP2PTags;
    const uint64_t key = uint64_t{static_cast<uint32_t>(p.peer)} << 32 | slot;
    if (p.kind == PointToPoint::Kind::Send)
      schedule->sendWithSeq(p.peer, c.sendSeq[key]++, slot, p.buf, p.bytes);
    else if (!takeStray(p))
      schedule->recvWithSeq(p.peer, c.recvSeq[key]++, slot, p.buf, p.bytes);
  }
  SHARC_TRACE(schedule->describe());
  return launch(std::move(schedule), recordPointToPoint(bytes));
}

uint64_t CommunicatorImpl::recordPointToPoint(size_t bytes) {
  CommState& c = *state_;
  TraceEntry& e = c.recorder.add();
  e.p2pSeq = ++c.p2pGroups;
  e.kind = CollectiveKind::PointToPoint;
  e.count = bytes;
  e.path = c.path;
  e.state = TraceState::Started;
  e.queuedNs = e.startedNs = wallClockNs();
  return e.id;
}

std::shared_ptr<Communicator> CommunicatorImpl::subgroup(const std::vector<int>& members,
                                                         const ExchangeFn& exchange,
                                                         std::chrono::milliseconds timeout) {
  CommState& c = *state_;
  const std::string call = "subgroup";
  if (destroyed_) invalid(Result::InvalidUsage, c.rank, call, "communicator used after destroy");
  std::unordered_set<int> seen;
  int newRank = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    const int m = members[i];
    if (m < 0 || m >= c.size || !seen.insert(m).second)
      invalid(Result::InvalidArgument, c.rank, call,
              "member " + std::to_string(m) +
                  " is out of range or repeated (expected distinct "
                  "ranks in 0.." +
                  std::to_string(c.size - 1) + ")");
    if (m == c.rank) newRank = static_cast<int>(i);
  }
  if (newRank < 0)
    invalid(Result::InvalidArgument, c.rank, call,
            "this rank is not among the members (only members take part)");

  // Each member contributes the member list it was given and the communicator ids in use on
  // its endpoint; the new communicator takes the lowest id free on all of them.
  constexpr size_t kWords = algo::tag::kMaxComms / 64;
  std::string mine(sizeof(uint64_t) * kWords, '\0');
  {
    std::lock_guard<std::mutex> lock(c.engine->mu);
    for (uint32_t i = 0; i < algo::tag::kMaxComms; ++i)
      if (c.engine->usedCommIds.test(i))
        mine[i / 8] = static_cast<char>(mine[i / 8] | 1 << (i % 8));
  }
  mine.append(reinterpret_cast<const char*>(members.data()), members.size() * sizeof(int));
  const std::vector<std::string> all = exchange(mine);
  if (all.size() != members.size())
    invalid(Result::InvalidUsage, c.rank, call,
            "the exchange returned " + std::to_string(all.size()) +
                " blobs (expected one per "
                "member: " +
                std::to_string(members.size()) + ")");
  std::string used(sizeof(uint64_t) * kWords, '\0');
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].size() != mine.size() ||
        std::memcmp(all[i].data() + used.size(), mine.data() + used.size(),
                    mine.size() - used.size()) != 0)
      invalid(Result::InvalidUsage, c.rank, call,
              "member " + std::to_string(i) +
                  " passed another member list (every member must "
                  "pass the same ranks in the same order)");
    for (size_t b = 0; b < used.size(); ++b) used[b] = static_cast<char>(used[b] | all[i][b]);
  }
  uint32_t id = algo::tag::kMaxComms;
  for (uint32_t i = 0; i < algo::tag::kMaxComms && id == algo::tag::kMaxComms; ++i)
    if ((used[i / 8] >> (i % 8) & 1) == 0) id = i;
  if (id == algo::tag::kMaxComms)
    invalid(Result::InvalidUsage, c.rank, call,
            "all " + std::to_string(algo::tag::kMaxComms) +
                " communicator ids are in use; destroy unused ones");

  std::vector<uint32_t> peers;
  std::vector<int32_t> pids;
  for (int m : members) {
    peers.push_back(c.peers[static_cast<size_t>(m)]);
    if (!c.pids.empty()) pids.push_back(c.pids[static_cast<size_t>(m)]);
  }
  auto child = std::make_shared<CommState>(
      c.engine, id, newRank, std::move(peers), std::move(pids), c.nodes.subset(members),
      timeout.count() > 0 ? timeout : c.timeout.load(), c.algos);
  child->parentId = static_cast<int>(c.id);
  {
    std::lock_guard<std::mutex> lock(c.engine->mu);
    child->start();
    // Forget destroyed children first: an expired weak_ptr pins its CommState's storage
    // (make_shared), about 1 KiB per split, for as long as this communicator lives.
    std::erase_if(c.children, [](const std::weak_ptr<CommState>& w) { return w.expired(); });
    c.children.push_back(child);
  }
  SHARC_INFO("rank " << c.rank << ": subgroup of " << members.size() << " -> rank " << newRank
                     << ", communicator id " << id);
  return wrap(std::move(child));
}

}  // namespace sharc::detail

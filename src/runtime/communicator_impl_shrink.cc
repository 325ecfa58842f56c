// Shrinking a communicator to its survivors: they agree on a communicator id among themselves,
// without the excluded ranks, over the failed communicator's own tag space.
#include <algorithm>
#include <cstring>
#include <thread>

#include "core/log.hpp"
#include "runtime/communicator_impl.hpp"

namespace sharc::detail {
namespace {

[[noreturn]] void invalid(Result code, int rank, const std::string& what) {
  throw Error(code, "rank " + std::to_string(rank) + ": shrink: " + what);
}

// What each survivor tells the others: the communicator ids in use on its endpoint.
struct Offer {
  uint64_t used[algo::tag::kMaxComms / 64];
};

std::string rankList(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}

}  // namespace

std::shared_ptr<Communicator> CommunicatorImpl::shrink(const std::vector<int>& excluded,
                                                       std::chrono::milliseconds timeout,
                                                       bool abortFirst) {
  CommState& c = *state_;
  if (destroyed_) invalid(Result::InvalidUsage, c.rank, "communicator used after destroy");
  std::vector<bool> out(static_cast<size_t>(c.size), false);
  for (int r : excluded) {
    if (r < 0 || r >= c.size || out[static_cast<size_t>(r)])
      invalid(Result::InvalidArgument, c.rank,
              "excluded rank " + std::to_string(r) + " is out of range or repeated (expected " +
                  "distinct ranks in 0.." + std::to_string(c.size - 1) + ")");
    if (r == c.rank) invalid(Result::InvalidArgument, c.rank, "this rank excludes itself");
    out[static_cast<size_t>(r)] = true;
  }
  std::vector<int> survivors;
  int newRank = -1;
  for (int r = 0; r < c.size; ++r) {
    if (out[static_cast<size_t>(r)]) continue;
    if (r == c.rank) newRank = static_cast<int>(survivors.size());
    survivors.push_back(r);
  }
  const std::chrono::milliseconds wait = timeout.count() > 0 ? timeout : c.timeout.load();
  Engine& engine = *c.engine;

  // The survivors' ids in use, exchanged as point-to-point messages on the control slot with
  // a sequence of their own (the control channel's notices have sequence 0): no message of this
  // communicator's operations (failed, or still running) can match them, and the excluded
  // ranks are not asked.
  std::vector<uint32_t> peers;
  std::vector<int32_t> pids;
  for (int m : survivors) {
    peers.push_back(c.peers[static_cast<size_t>(m)]);
    if (!c.pids.empty()) pids.push_back(c.pids[static_cast<size_t>(m)]);
  }
  const algo::NodeMap nodes = c.nodes.subset(survivors);
  Offer mine{};
  std::vector<Offer> offers(survivors.size());
  std::shared_ptr<algo::Schedule> exchange;
  {
    std::lock_guard<std::mutex> lock(engine.mu);
    if (abortFirst && !c.aborted)
      c.abort("rank " + std::to_string(c.rank) + " shrinks the communicator, excluding ranks " +
                  rankList(excluded),
              Result::RemoteError);
    for (uint32_t i = 0; i < algo::tag::kMaxComms; ++i)
      if (engine.usedCommIds.test(i)) mine.used[i / 64] |= uint64_t{1} << (i % 64);
    offers[static_cast<size_t>(newRank)] = mine;
    algo::ScheduleContext ctx = baseContext(CollectiveKind::PointToPoint, DataType::Uint8,
                                            RedOp::Sum, sizeof(Offer) * survivors.size());
    ctx.peers = &peers;
    ctx.pids = nullptr;
    ctx.nodes = &nodes;
    ctx.rank = newRank;
    ctx.size = static_cast<int>(survivors.size());
    ctx.deadline = std::chrono::steady_clock::now() + wait;
    ctx.algorithm = "shrink";
    exchange = std::make_shared<algo::Schedule>(std::move(ctx));
    const uint32_t seq = ++c.shrinks;
    for (int p = 0; p < static_cast<int>(survivors.size()); ++p) {
      if (p == newRank) continue;
      exchange->recvWithSeq(p, seq, algo::tag::kControlSlot, &offers[static_cast<size_t>(p)],
                            sizeof(Offer));
      exchange->sendWithSeq(p, seq, algo::tag::kControlSlot, &mine, sizeof(Offer));
    }
  }
  // Driven here, not as a request of this communicator: it may have failed, and then its
  // operations fail at once.
  for (;;) {
    algo::Schedule::State st;
    {
      std::lock_guard<std::mutex> lock(engine.mu);
      engine.progressLocked();
      st = exchange->advance();
      if (st == algo::Schedule::State::Failed) {
        const std::string why = exchange->errorMessage();
        const Result code = exchange->errorCode();
        if (!exchange->quiescent()) engine.drain(exchange);  // the provider may still write
        invalid(code, c.rank,
                "agreeing with the survivors (ranks " + rankList(survivors) + ") failed: " + why);
      }
    }
    if (st == algo::Schedule::State::Done) break;
    std::this_thread::yield();
  }

  uint64_t used[algo::tag::kMaxComms / 64] = {};
  for (const Offer& o : offers)
    for (size_t w = 0; w < std::size(used); ++w) used[w] |= o.used[w];
  uint32_t id = algo::tag::kMaxComms;
  for (uint32_t i = 0; i < algo::tag::kMaxComms && id == algo::tag::kMaxComms; ++i)
    if ((used[i / 64] >> (i % 64) & 1) == 0) id = i;
  if (id == algo::tag::kMaxComms)
    invalid(Result::InvalidUsage, c.rank,
            "all " + std::to_string(algo::tag::kMaxComms) +
                " communicator ids are in use; destroy unused ones");
  auto child =
      std::make_shared<CommState>(c.engine, id, newRank, std::move(peers), std::move(pids), nodes,
                                  timeout.count() > 0 ? timeout : c.timeout.load(), c.algos);
  {
    std::lock_guard<std::mutex> lock(engine.mu);
    child->start();
  }
  SHARC_INFO("rank " << c.rank << ": shrink without ranks " << rankList(excluded) << " -> rank "
                     << newRank << " of " << survivors.size() << ", communicator id " << id);
  return wrap(std::move(child));
}

}  // namespace sharc::detail

#include "schedule_sim.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <queue>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "algorithms/schedule.hpp"
#include "algorithms/send_window.hpp"
#include "cluster_model.hpp"
#include "schedule_flows.hpp"
#include "schedule_ops.hpp"
#include "sharc/error.hpp"

namespace sharc::plan {
namespace {

using Kind = algo::Schedule::OpKind;
using Ops = SimOps;
// The engine's posting rules (schedule.hpp: sendWindow, recvWindow, inOrderRecvs;
// send_window.hpp): ready sends oldest in schedule order first, two per peer the rank sends to
// (at least 32) posted at once, each link class keeping two per peer of its own; receives
// oldest first,
// those ready ahead of an older one still waiting taking at most the window less its in-order
// places. The window is the engine's on a provider that holds 4 x kMaxPostedRecvs (4,096) posted
// receives or more.
constexpr auto kMaxPostedRecvs = static_cast<uint32_t>(algo::kMaxPostedRecvs);
constexpr auto kInOrderRecvs = static_cast<uint32_t>(algo::inOrderRecvs(algo::kMaxPostedRecvs));
constexpr double kInf = std::numeric_limits<double>::infinity();

enum class Ev : uint8_t { FlowStart, Arrival, Advance, ThreadBusy, ThreadFree };
struct Event {
  double t;
  uint64_t order;  // ties: first scheduled first (deterministic)
  Ev type;
  uint32_t id;
  int group = 0;  // loop()'s group heap only
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : order > o.order; }
};

struct Message {
  int src, dst;
  uint32_t slot;
  double bytes;
  uint32_t sendOp;
};

class Replay {
 public:
  Replay(const algo::TunerParams& p, const algo::NodeMap& map, Ops ops, size_t chunkBytes,
         const SimOptions& options)
      : p_(p),
        map_(map),
        ops_(std::move(ops)),
        n_(map.size()),
        nodes_(map.nodes()),
        chunk_(static_cast<double>(algo::modelChunkBytes(chunkBytes))) {
    ranks_.resize(static_cast<size_t>(n_));
    // On a CPU transport (tcp, shared memory: !dmaTransfers) the bytes move when the two
    // ranks' progress threads copy them (send/recv, FIFO copies), so a message stands still
    // while either thread reduces or copies: each rank's thread is a link its messages
    // cross, of unbounded rate while the thread is free and none while it is busy.
    cpuTransport_ = !p.dmaTransfers;
    // By DMA, messages within a node and between nodes share no link: each node's local
    // flows are a group of their own (rates recomputed for that node only), the fabric's
    // another; on a CPU transport the threads tie them into one group.
    split_ = options.groupFlows && !cpuTransport_;
    fabric_ = split_ ? nodes_ : 0;
    // Links: each node's NICs out and in; each rank's local link out and in; where a rank
    // drives only its share of the node's NICs (TunerParams::fabricRankShare < 1), each
    // rank's own NICs out and in at that share. Split, a node's local links are its group's
    // (its ranks' out, then in).
    rankNics_ = p.fabricRankShare < 1;
    nodeImplied_.assign(static_cast<size_t>(nodes_), 0);
    bool implied = rankNics_;
    for (int k = 0; options.groupFlows && rankNics_ && k < nodes_; ++k) {
      nodeImplied_[static_cast<size_t>(k)] =
          static_cast<double>(map.ranksOf[static_cast<size_t>(k)].size()) * p.fabricRankShare <=
          1 + 1e-12;
      implied = implied && nodeImplied_[static_cast<size_t>(k)];
    }
    // Where no node link binds and every message between nodes goes from a rank to the rank
    // of the same local index (the hierarchical schedules: rail-aligned), the fabric's flows
    // of each local index share no link with the others': a group per local index.
    rails_ = split_ && implied && !p.fabricHalfDuplex && railAligned() ? map.maxLocal() : 1;
    groups_.assign(static_cast<size_t>(fabric_ + rails_), SimFlows());
    groupVer_.assign(groups_.size(), 0);
    touched_.assign(groups_.size(), 0);
    const size_t res = 2 * static_cast<size_t>(nodes_ + n_) + (rankNics_ ? 2 * n_ : 0);
    std::vector<double> cap(res, p.fabric.gbps * 1e3);  // bytes per us
    for (size_t i = 2 * static_cast<size_t>(nodes_); i < 2 * static_cast<size_t>(nodes_ + n_); ++i)
      cap[i] = p.local.gbps * 1e3;
    for (size_t i = 2 * static_cast<size_t>(nodes_ + n_); i < res; ++i)
      cap[i] = p.fabricRankShare * p.fabric.gbps * 1e3;
    for (int g = 0; g < rails_; ++g) {
      groups_[static_cast<size_t>(fabric_ + g)].capacity = cap;
    }
    if (split_)
      for (int k = 0; k < nodes_; ++k)
        groups_[static_cast<size_t>(k)].capacity.assign(
            2 * map.ranksOf[static_cast<size_t>(k)].size(), p.local.gbps * 1e3);
    if (cpuTransport_) {
      std::vector<double>& one = groups_[0].capacity;  // not split: one group
      threadBase_ = static_cast<int>(one.size());
      one.resize(one.size() + static_cast<size_t>(n_), kThreadFree);
      threadBusy_.assign(static_cast<size_t>(n_), 0);
    }
  }

  bool railAligned() const {
    for (int r = 0; r < n_; ++r)
      for (uint32_t g = ops_.base[static_cast<size_t>(r)];
           g < ops_.base[static_cast<size_t>(r) + 1]; ++g) {
        const auto q = static_cast<size_t>(ops_.peer[g]);
        if (ops_.kind[g] == Kind::Send && map_.nodeOf[q] != map_.nodeOf[static_cast<size_t>(r)] &&
            map_.localRank[q] != map_.localRank[static_cast<size_t>(r)])
          return false;
      }
    return true;
  }

  SimResult run() {
    postedOrDone_.assign(ops_.kind.size(), 0);
    std::vector<int> lastSendTo(static_cast<size_t>(n_), -1);
    for (int r = 0; r < n_; ++r) {
      size_t peers[2] = {0, 0};
      for (uint32_t g = ops_.base[r]; g < ops_.base[r + 1]; ++g) {
        if (ops_.kind[g] == Kind::Recv) ranks_[r].recvOrder.push_back(g);
        if (ops_.kind[g] == Kind::Send && lastSendTo[static_cast<size_t>(ops_.peer[g])] != r) {
          lastSendTo[static_cast<size_t>(ops_.peer[g])] = r;
          ++peers[static_cast<size_t>(linkOf(r, g))];
        }
      }
      // the engine's window, whatever p_ says
      ranks_[r].window.size(peers[0], peers[1]);
    }
    for (int r = 0; r < n_; ++r) {
      for (uint32_t g = ops_.base[r]; g < ops_.base[r + 1]; ++g)
        if (ops_.pending[g] == 0) ready(r, g);
      push(p_.stepUs, Ev::Advance, static_cast<uint32_t>(r));  // building the schedule
      ranks_[r].scheduled = true;
    }
    loop();
    SimResult out = rank0_;
    for (int r = 0; r < n_; ++r) {
      const Rank& k = ranks_[r];
      if (k.done != ops_.base[r + 1] - ops_.base[r]) {
        std::string what = "simulate: the replay deadlocked: rank " + std::to_string(r) +
                           " completed " + std::to_string(k.done) + " of " +
                           std::to_string(ops_.base[r + 1] - ops_.base[r]) + " operations";
        for (uint32_t g = ops_.base[r]; g < ops_.base[r + 1]; ++g)
          if (ops_.kind[g] == Kind::Recv && posted_.count(g)) {
            what += "; it waits for slot " + std::to_string(ops_.slot[g]) + " from rank " +
                    std::to_string(ops_.peer[g]);
            break;
          }
        throw Error(Result::InternalError, what);
      }
      out.us = std::max(out.us, k.lastDone);
    }
    out.messages = messages_.size();
    out.operations = ops_.kind.size();
    for (const SimFlows& g : groups_) out.rateUpdates += g.updates();
    return out;
  }

 private:
  struct Rank {
    // ready reductions and copies, oldest in schedule order first (Schedule::advance)
    std::priority_queue<uint32_t, std::vector<uint32_t>, std::greater<uint32_t>> local;
    // ready sends by link class (algo::LinkClass), oldest in schedule order first
    std::priority_queue<uint32_t, std::vector<uint32_t>, std::greater<uint32_t>> sends[2];
    // ready receives, oldest first; every receive in schedule order; the oldest not posted
    std::priority_queue<uint32_t, std::vector<uint32_t>, std::greater<uint32_t>> recvs;
    std::vector<uint32_t> recvOrder;
    size_t oldestUnposted = 0;
    std::vector<uint32_t> finished;  // completions the next advance takes in
    uint32_t postedRecvs = 0, done = 0;
    algo::SendWindow window;  // the engine's, for the ranks it sends to
    double cpuFree = 0, lastDone = 0;
    bool scheduled = false;
  };

  // The link class of rank r's transfer g (Schedule::linkOf).
  algo::LinkClass linkOf(int r, uint32_t g) const {
    return map_.nodeOf[static_cast<size_t>(ops_.peer[g])] == map_.nodeOf[static_cast<size_t>(r)]
               ? algo::LinkClass::Local
               : algo::LinkClass::Remote;
  }

  void push(double t, Ev type, uint32_t id) { events_.push({t, order_++, type, id}); }

  int rankOf(uint32_t g) const {
    return static_cast<int>(std::upper_bound(ops_.base.begin(), ops_.base.end(), g) -
                            ops_.base.begin()) -
           1;
  }

  static uint64_t key(int src, int dst, uint32_t slot) {
    return static_cast<uint64_t>(src) << 40 | static_cast<uint64_t>(dst) << 16 | slot;
  }

  void ready(int r, uint32_t g) {
    Rank& k = ranks_[r];
    const Kind kind = ops_.kind[g];
    if (kind == Kind::Recv)
      k.recvs.push(g);
    else if (kind == Kind::Send)
      k.sends[static_cast<size_t>(linkOf(r, g))].push(g);
    else
      k.local.push(g);
  }

  // The operation is done (Schedule::complete): its dependents may become ready.
  void complete(int r, uint32_t g, double t) {
    Rank& k = ranks_[r];
    ++k.done;
    k.lastDone = std::max(k.lastDone, t);
    for (uint32_t i = ops_.depBegin[g]; i < ops_.depBegin[g + 1]; ++i)
      if (--ops_.pending[ops_.deps[i]] == 0) {
        ready(r, ops_.deps[i]);
      }
  }

  // A transfer finished at t; the rank takes it in at its next advance.
  void finish(int r, uint32_t g, double t) {
    Rank& k = ranks_[r];
    k.finished.push_back(g);
    k.lastDone = std::max(k.lastDone, t);
    if (!k.scheduled && !inAdvance_) {
      k.scheduled = true;
      push(std::max(t, k.cpuFree), Ev::Advance, static_cast<uint32_t>(r));
    }
  }

  // Schedule::advance on rank r's progress thread, from `now` or when it is free.
  void advance(int r, double now) {
    Rank& k = ranks_[r];
    k.scheduled = false;
    inAdvance_ = true;
    double t = std::max(now, k.cpuFree);
    for (uint32_t g : k.finished) {
      if (ops_.kind[g] == Kind::Send)
        k.window.done(linkOf(r, g));
      else
        --k.postedRecvs;
      complete(r, g, t);
    }
    k.finished.clear();
    bool progressed = true;
    while (progressed) {
      progressed = false;
      while (!k.recvs.empty()) {
        while (k.oldestUnposted < k.recvOrder.size() &&
               postedOrDone_[k.recvOrder[k.oldestUnposted]])
          ++k.oldestUnposted;
        const uint32_t g = k.recvs.top();
        const bool inOrder =
            k.oldestUnposted < k.recvOrder.size() && g == k.recvOrder[k.oldestUnposted];
        if (k.postedRecvs >= (inOrder ? kMaxPostedRecvs : kMaxPostedRecvs - kInOrderRecvs)) break;
        k.recvs.pop();
        postedOrDone_[g] = 1;
        ++k.postedRecvs;
        const uint64_t id = key(ops_.peer[g], r, ops_.slot[g]);
        if (const auto it = arrived_.find(id); it != arrived_.end()) {
          arrived_.erase(it);
          finish(r, g, t);  // an unexpected message: matched as the receive is posted
        } else if (!waiting_.emplace(id, g).second) {
          throw Error(Result::InternalError, "simulate: two receives of rank " + std::to_string(r) +
                                                 " match slot " + std::to_string(ops_.slot[g]));
        } else {
          posted_.insert(g);
        }
        progressed = true;
      }
      for (int c = k.window.next(k.sends); c >= 0; c = k.window.next(k.sends)) {
        const uint32_t g = k.sends[c].top();
        k.sends[c].pop();
        k.window.posted(static_cast<algo::LinkClass>(c));
        t += p_.stepUs;
        messages_.push_back({r, ops_.peer[g], ops_.slot[g], ops_.bytes[g], g});
        push(t, Ev::FlowStart, static_cast<uint32_t>(messages_.size() - 1));
        progressed = true;
      }
      if (!k.local.empty()) {  // one at a time: what it makes ready is posted first (advance)
        const uint32_t g = k.local.top();
        k.local.pop();
        const double start = t;
        if (ops_.kind[g] == Kind::Reduce) t += ops_.bytes[g] / (p_.reduceGbps * 1e3);
        if (ops_.kind[g] == Kind::Copy) t += ops_.bytes[g] / (p_.copyGbps * 1e3);
        if (cpuTransport_ && t > start) {  // the thread is busy: its messages stand still
          push(start, Ev::ThreadBusy, static_cast<uint32_t>(r));
          push(t, Ev::ThreadFree, static_cast<uint32_t>(r));
        }
        complete(r, g, t);
        progressed = true;
      }
    }
    k.cpuFree = t;
    inAdvance_ = false;
    if (!k.finished.empty()) {
      k.scheduled = true;
      push(t, Ev::Advance, static_cast<uint32_t>(r));
    }
  }

  bool crosses(const Message& m) const {
    return map_.nodeOf[static_cast<size_t>(m.src)] != map_.nodeOf[static_cast<size_t>(m.dst)];
  }

  // A message posted while an earlier one between the same two ranks is still on the wire
  // waits for it: one connection per pair carries its messages in order.
  void postFlow(uint32_t id, double now) {
    const Message& m = messages_[id];
    auto& queue = pairs_[key(m.src, m.dst, 0)];
    queue.push_back(id);
    if (queue.size() == 1) startFlow(id, now);
  }

  void flowDone(uint32_t id, double now) {
    const Message& m = messages_[id];
    if (m.src == 0 && m.bytes > 0 && crosses(m)) {
      if (--rank0Moving_ == 0) rank0_.fabricBusyUs += now - rank0Since_;
      rank0_.fabricLastUs = now;
    }
    double at = now + (crosses(m) ? p_.fabric.alphaUs : p_.local.alphaUs);
    // On a CPU transport a message longer than the call's chunk (a log-step algorithm's whole
    // blocks) is copied out of the transport's buffers by the receiver's thread, and beyond
    // one chunk's worth that copy no longer overlaps the wire (the model's step(): tcp's
    // receive copy, measured on the 2-core host): the thread is busy that long after the
    // last byte, its other messages standing still, and the receive completes after it.
    if (cpuTransport_ && m.bytes > chunk_) {
      push(at, Ev::ThreadBusy, static_cast<uint32_t>(m.dst));
      at += (m.bytes - chunk_) / (p_.copyGbps * 1e3);
      push(at, Ev::ThreadFree, static_cast<uint32_t>(m.dst));
    }
    push(at, Ev::Arrival, id);
    const auto it = pairs_.find(key(m.src, m.dst, 0));
    it->second.pop_front();
    if (!it->second.empty())
      startFlow(it->second.front(), now);
    else
      pairs_.erase(it);
  }

  void startFlow(uint32_t id, double now) {
    const Message& m = messages_[id];
    if (m.bytes <= 0) {
      flowDone(id, now);
      return;
    }
    if (m.src == 0 && crosses(m)) {
      if (rank0Moving_++ == 0) rank0Since_ = now;
      if (!rank0Started_) rank0_.fabricFirstUs = now;
      rank0Started_ = true;
    }
    SimFlow f;
    f.msg = id;
    f.links = 2;
    f.remaining = m.bytes;
    std::fill(std::begin(f.weight), std::end(f.weight), 1.0);
    int group = fabric_ + (rails_ > 1 ? map_.localRank[static_cast<size_t>(m.src)] : 0);
    if (crosses(m)) {
      // The node's NICs out and in, unless its ranks' own NICs add up to no more (then
      // the node's link never binds: leaving it out changes no rate).
      const int from = map_.nodeOf[static_cast<size_t>(m.src)];
      const int to = map_.nodeOf[static_cast<size_t>(m.dst)];
      f.links = 0;
      if (!nodeImplied_[static_cast<size_t>(from)]) f.res[f.links++] = from;
      if (!nodeImplied_[static_cast<size_t>(to)]) f.res[f.links++] = nodes_ + to;
      if (rankNics_) {  // the sender's own NICs out, the receiver's in
        f.res[f.links++] = 2 * (nodes_ + n_) + m.src;
        f.res[f.links++] = 2 * (nodes_ + n_) + n_ + m.dst;
      }
      // A message cut into fewer pieces than the rank has rails (StripedEndpoint: under
      // 32 KiB one) moves over that many of them, taking 1 / (pieces x fabricRailShare) of
      // each fabric link's rate per byte.
      const double rails = algo::railScale(p_, m.bytes);
      for (int i = 0; i < f.links; ++i) f.weight[i] = rails;
      // Half duplex (cost_model.hpp, "half-duplex turns"): this weight per byte on the pair's
      // connection makes an exchange of x each way hold it for the rule's max(x, 2x - 64 KiB).
      const double turn = 1.0 - algo::kDuplexOverlapBytes / (2.0 * m.bytes);
      if (p_.fabricHalfDuplex && turn > 0) {
        f.weight[f.links] = turn * rails;
        const uint64_t pair = key(std::min(m.src, m.dst), std::max(m.src, m.dst), 0);
        std::vector<double>& cap = groups_[static_cast<size_t>(fabric_)].capacity;
        auto [it, added] = connection_.emplace(pair, static_cast<int>(cap.size()));
        if (added) cap.push_back(p_.fabric.gbps * 1e3);
        f.res[f.links++] = it->second;
      }
    } else if (split_) {  // the node's group: its ranks' local egress, then ingress
      group = map_.nodeOf[static_cast<size_t>(m.src)];
      f.res[0] = map_.localRank[static_cast<size_t>(m.src)];
      f.res[1] = static_cast<int>(map_.ranksOf[static_cast<size_t>(group)].size()) +
                 map_.localRank[static_cast<size_t>(m.dst)];
    } else {
      f.res[0] = 2 * nodes_ + m.src;       // rank's local egress
      f.res[1] = 2 * nodes_ + n_ + m.dst;  // rank's local ingress
    }
    if (cpuTransport_) {  // both progress threads move it
      f.res[f.links++] = threadBase_ + m.src;
      f.res[f.links++] = threadBase_ + m.dst;
    }
    groups_[static_cast<size_t>(group)].add(f, now);
    ++onWire_;
    touch(group);
  }

  void touch(int g) {
    if (!touched_[static_cast<size_t>(g)]) {
      touched_[static_cast<size_t>(g)] = 1;
      touchedList_.push_back(g);
    }
  }

  void arrive(uint32_t id, double now) {
    const Message& m = messages_[id];
    finish(m.src, m.sendOp, now);  // delivered: the send completes
    const uint64_t k = key(m.src, m.dst, m.slot);
    if (const auto it = waiting_.find(k); it != waiting_.end()) {
      const uint32_t g = it->second;
      waiting_.erase(it);
      posted_.erase(g);
      finish(m.dst, g, now);
    } else if (!arrived_.emplace(k, now).second) {
      throw Error(Result::InternalError,
                  "simulate: two messages from rank " + std::to_string(m.src) + " to rank " +
                      std::to_string(m.dst) + " on slot " + std::to_string(m.slot));
    }
  }

  // Events in time order; each group's next finish (or due update) in a heap of its own,
  // an entry valid while the group's version is unchanged.
  void loop() {
    double now = 0;
    while (!events_.empty() || onWire_ > 0) {
      for (int g : touchedList_) {
        SimFlows& flows = groups_[static_cast<size_t>(g)];
        touched_[static_cast<size_t>(g)] = 0;
        flows.updateIfDue(now);
        const uint32_t ver = ++groupVer_[static_cast<size_t>(g)];
        if (const double t = flows.next(); t < kInf) groupDue_.push({t, 0, Ev::Advance, ver, g});
      }
      touchedList_.clear();
      while (!groupDue_.empty() &&
             groupDue_.top().id != groupVer_[static_cast<size_t>(groupDue_.top().group)])
        groupDue_.pop();
      now = std::min(events_.empty() ? kInf : events_.top().t,
                     groupDue_.empty() ? kInf : groupDue_.top().t);
      // the last bytes that have left (a pair's next message starts: on the wire next pass)
      while (!groupDue_.empty() && groupDue_.top().t <= now) {
        const Event d = groupDue_.top();
        groupDue_.pop();
        if (d.id != groupVer_[static_cast<size_t>(d.group)]) continue;
        ++groupVer_[static_cast<size_t>(d.group)];
        touch(d.group);
        groups_[static_cast<size_t>(d.group)].finish(now, [&](uint32_t msg) {
          --onWire_;
          flowDone(msg, now);
        });
      }
      while (!events_.empty() && events_.top().t <= now) {
        const Event e = events_.top();
        events_.pop();
        switch (e.type) {
          case Ev::FlowStart: postFlow(e.id, now); break;
          case Ev::Arrival: arrive(e.id, now); break;
          case Ev::Advance: advance(static_cast<int>(e.id), now); break;
          case Ev::ThreadBusy:
            if (threadBusy_[e.id]++ == 0) setThread(e.id, 0.0);
            break;
          case Ev::ThreadFree:
            if (--threadBusy_[e.id] == 0) setThread(e.id, kThreadFree);
            break;
        }
      }
    }
  }

  void setThread(uint32_t r, double capacity) {
    groups_[0].capacity[static_cast<size_t>(threadBase_) + r] = capacity;  // one group
    groups_[0].touch();
    touch(0);
  }

  static constexpr double kThreadFree = 1e30;  // bytes per us: never the narrowest link
  const algo::TunerParams& p_;
  const algo::NodeMap& map_;
  Ops ops_;
  int n_, nodes_;
  double chunk_;  // the call's chunk: longer messages are whole blocks (see flowDone)
  std::vector<Rank> ranks_;
  std::vector<uint8_t> postedOrDone_;  // per operation: a receive posted (or matched)
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  uint64_t order_ = 0;
  bool inAdvance_ = false, rankNics_ = false, cpuTransport_ = false;
  int threadBase_ = 0;           // cpuTransport_: the first progress-thread link
  std::vector<int> threadBusy_;  // per rank: its reductions and copies under way
  std::vector<Message> messages_;
  std::unordered_map<uint64_t, uint32_t> waiting_;  // posted receives by (src, dst, slot)
  std::unordered_map<uint64_t, double> arrived_;    // unexpected messages
  std::unordered_set<uint32_t> posted_;             // receives posted and not yet matched
  std::vector<uint8_t> nodeImplied_;  // per node: its ranks' NICs add up to the node's at most
  bool split_ = false;                // local and fabric flows in groups of their own
  int fabric_ = 0;  // the fabric's first group (split: after the nodes' local groups)
  int rails_ = 1;   // the fabric's groups: one, or one per local index
  std::vector<SimFlows> groups_;
  std::vector<uint32_t> groupVer_;
  std::vector<uint8_t> touched_;  // per group: rates or finish times may have changed
  std::vector<int> touchedList_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> groupDue_;  // id: version
  size_t onWire_ = 0;
  SimResult rank0_;      // rank 0's fabric times (SimResult::fabric*)
  int rank0Moving_ = 0;  // its messages to other nodes now moving
  double rank0Since_ = 0;
  bool rank0Started_ = false;
  std::unordered_map<uint64_t, std::deque<uint32_t>> pairs_;  // messages per (src, dst), in order
  std::unordered_map<uint64_t, int> connection_;              // half duplex: link of each rank pair
};

}  // namespace

// The most operations (all ranks together) simulateCall replays: its state takes about 55 bytes
// per operation (docs/replay-scale.md), so at most about 4.5 GB.
constexpr size_t kMaxReplayOperations = 80'000'000;

algo::CallShape simShape(Collective c, size_t bytes, const algo::NodeMap& map) {
  algo::CallShape s = callShape(c, bytes, map);
  s.bytesPerRank = simCountPerRank(c, bytes, map.size()) * kSimElem;
  return s;
}

SimResult simulate(const algo::TunerParams& p, const algo::NodeMap& map, Collective c, size_t bytes,
                   algo::Algorithm a, size_t chunkBytes, const SimOptions& options) {
  if (map.size() < 1) throw Error(Result::InvalidArgument, "simulate: the node map has no ranks");
  if (simCountPerRank(c, bytes, map.size()) == 0)
    throw Error(Result::InvalidArgument, "simulate: " + std::to_string(bytes) +
                                             " bytes give no float32 element per rank on " +
                                             std::to_string(map.size()) + " ranks");
  Replay replay(p, map, buildSimOps(map, c, bytes, a, chunkBytes), chunkBytes, options);
  return replay.run();
}

SimResult simulateCall(const Cluster& cluster, int nodes, Collective c, size_t bytes,
                       const std::string& algorithm, size_t chunkBytes) {
  if (nodes < 1 || cluster.ranksPerNode < 1)
    throw Error(Result::InvalidArgument,
                "simulate: nodes (" + std::to_string(nodes) + ") and ranks per node (" +
                    std::to_string(cluster.ranksPerNode) + ") must be at least 1");
  const algo::NodeMap map = nodeMap(nodes, cluster.ranksPerNode);
  algo::CallShape shape = simShape(c, bytes, map);
  shape.override = forcedAlgorithm(c, algorithm);
  if (chunkBytes > 0) {
    shape.chunkBytes = chunkBytes;
    shape.chunkBytesSet = true;
  }
  algo::TunerParams params = tunerParams(cluster);
  // The posting window the replay plays (the engine's floor of 32 sends); the cluster's
  // transport (DMA for the GPU profiles; a CPU transport for this host and calibration files).
  params.postedSends = static_cast<int>(algo::kMinPostedSends);
  const algo::Plan chosen = algo::plan(shape, params, false);
  // Every rank's operations are held at once: estimated from rank 0's (the schedules are
  // alike across ranks) before any is built.
  const size_t perRank = SimBuilder(map, c, bytes, chosen.algorithm, chosen.chunkBytes).build(0);
  const double operations = static_cast<double>(perRank) * map.size();
  if (operations > kMaxReplayOperations)
    throw Error(Result::InvalidArgument,
                "simulate: " + std::string(algo::algorithmName(chosen.algorithm)) + " on " +
                    std::to_string(map.size()) + " ranks would replay about " +
                    std::to_string(static_cast<long long>(operations)) + " operations (rank 0's " +
                    std::to_string(perRank) + " on every rank); the replay plays at most " +
                    std::to_string(kMaxReplayOperations) +
                    " (sharc-plan collective predicts any size)");
  return simulate(params, map, c, bytes, chosen.algorithm, chosen.chunkBytes);
}

}  // namespace sharc::plan

// Starting collectives (validation, algorithm choice, schedule), split and destroy.
#include "runtime/communicator_impl.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <sharc/cuda.hpp>

#include "algorithms/algorithms.hpp"
#include "core/collective.hpp"
#include "core/config.hpp"
#include "core/fault_plan.hpp"
#include "core/log.hpp"

namespace sharc::detail {
namespace {
// The key of a call's plans: collective, bytes per rank, and whether it is on the device path
// (costed at the device queue's rates).
uint64_t planKeyOf(CollectiveKind kind, size_t bytes, bool device) {
  return uint64_t{static_cast<uint8_t>(kind)} << 56 | uint64_t{device} << 55 | bytes;
}

bool overlaps(const void* a, size_t an, const void* b, size_t bn) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return an > 0 && bn > 0 && x < y + bn && y < x + an;
}

// A call's buffers: their lengths, and where sendbuff points in the in-place form.
struct CallBuffers {
  size_t sendBytes, recvBytes;
  const void* inPlaceSend;
};
CallBuffers callBuffers(CollectiveKind kind, const void* recv, size_t bytes, int rank, int size) {
  const auto n = static_cast<size_t>(size), r = static_cast<size_t>(rank);
  const auto* at = static_cast<const std::byte*>(recv);
  if (kind == CollectiveKind::AllGather) return {bytes, bytes * n, at + bytes * r};
  if (kind == CollectiveKind::ReduceScatter) return {bytes * n, bytes, at - bytes * r};
  return {bytes, bytes, recv};
}

[[noreturn]] void invalid(Result code, int rank, CollectiveKind kind, const std::string& what) {
  throw Error(code,
              "rank " + std::to_string(rank) + ": " + core::collectiveName(kind) + ": " + what);
}

}  // namespace

std::shared_ptr<Communicator> CommunicatorImpl::wrap(std::shared_ptr<CommState> state) {
  return std::shared_ptr<Communicator>(
      new Communicator(std::make_unique<CommunicatorImpl>(std::move(state))));
}

std::string CommunicatorImpl::provider() const {
  return state_->engine->endpoint().providerName();
}

algo::CallShape CommunicatorImpl::shapeOf(CollectiveKind kind, size_t count, DataType type,
                                          bool device) const {
  const CommState& c = *state_;
  const core::Config& config = core::Config::get();
  algo::CallShape shape;
  shape.kind = kind;
  shape.bytesPerRank = count * dataTypeSize(type);
  shape.nranks = c.size;
  shape.locality = c.engine->locality;
  shape.nodes = &c.nodes;
  shape.maxMessageBytes = c.engine->endpoint().maxMessageSize();
  shape.chunkBytes = config.chunkBytes;
  shape.chunkBytesSet = config.chunkBytesSet;
  shape.override = c.algos;
  shape.device = device ? &c.deviceCall : nullptr;
  return shape;
}

CommState::StaticPlan CommunicatorImpl::staticPlan(CollectiveKind kind, size_t count, DataType type,
                                                   bool withBreakdown, bool device) const {
  const algo::CallShape shape = shapeOf(kind, count, type, device);
  const algo::AlgorithmOverride& o = state_->algos;
  const bool forced = (kind == CollectiveKind::AllGather && o.allGather) ||
                      (kind == CollectiveKind::ReduceScatter && o.reduceScatter) ||
                      (kind == CollectiveKind::AllReduce && o.allReduce);
  CommState::StaticPlan out{algo::plan(shape, tunerParams(), withBreakdown), forced};
  LearnedPlan chosen;
  if (!forced && state_->size > 1 && fileChoice(shape, state_->nodes.nodes(), chosen)) {
    out.plan.algorithm = device ? algo::deviceAlgorithm(chosen.algorithm) : chosen.algorithm;
    out.plan.chunkBytes = chosen.chunkBytes;
    out.plan.predictedUs =
        algo::predictUs(shape, out.plan.algorithm, chosen.chunkBytes, tunerParams(),
                        withBreakdown ? &out.plan.breakdown : nullptr);
    if (withBreakdown) out.plan.breakdown += " [SHARC_TUNER_FILE choice]";
    out.fixed = true;
  }
  return out;
}

algo::Plan CommunicatorImpl::plan(CollectiveKind kind, size_t count, DataType type,
                                  bool withBreakdown) const {
  // The device path (SHARC_DEVICE_PATH=host) plans on the host queue's rates and links.
  const bool device = core::Config::get().devicePath == core::DevicePath::Host && state_->size > 1;
  if (device) {
    std::lock_guard<std::mutex> lock(state_->engine->mu);
    decideDeviceLinks(state_->engine->deviceResources(-1));
  }
  CommState::StaticPlan s = staticPlan(kind, count, type, withBreakdown, device);
  if (s.fixed) return s.plan;
  LearnedPlan learned;
  std::string note;
  {
    std::lock_guard<std::mutex> lock(state_->engine->mu);
    if (!state_->learner.settled(planKeyOf(kind, count * dataTypeSize(type), device), learned,
                                 &note))
      return s.plan;
  }
  algo::Plan p = s.plan;
  const algo::CallShape shape = shapeOf(kind, count, type, device);
  p.algorithm = learned.algorithm;
  p.chunkBytes = learned.chunkBytes;
  p.predictedUs = algo::predictUs(shape, p.algorithm, p.chunkBytes, tunerParams(),
                                  withBreakdown ? &p.breakdown : nullptr);
  if (withBreakdown) p.breakdown += " [" + note + "]";
  return p;
}

void CommunicatorImpl::agreeIfDue(uint64_t planKey) {
  CommState& c = *state_;
  std::shared_ptr<RequestState> pending;
  bool decide = false;
  LearnedTuner::Agreement* agreement = nullptr;
  {
    std::lock_guard<std::mutex> lock(c.engine->mu);
    if (c.aborted) return;
    decide = c.learner.decisionDue(planKey, pending);
    if (!decide) agreement = c.learner.agreementToIssue(planKey, c.recorder);
  }
  if (decide) {
    // Issued at the previous call of this shape: normally long done.
    if (pending) waitRequest(*pending, c.timeout.load());
    pending.reset();
    std::string line;
    {
      std::lock_guard<std::mutex> lock(c.engine->mu);
      if (c.aborted) return;  // the agreement failed: this call fails as well
      line = c.learner.decide(planKey);
    }
    SHARC_INFO("rank " << c.rank << ": " << line);
  } else if (agreement) {
    // The same call of this shape on every rank: one small AllReduce(max) of the medians, so
    // that every rank decides from the same numbers (the slowest rank's view of each plan).
    c.internalCall = "tuner";
    Request req;
    try {
      req = start(CollectiveKind::AllReduce, agreement->mine.data(), agreement->all.data(),
                  agreement->mine.size(), DataType::Float64, RedOp::Max, 0);
    } catch (...) {
      c.internalCall = "";
      throw;
    }
    c.internalCall = "";
    std::lock_guard<std::mutex> lock(c.engine->mu);
    c.learner.issued(planKey, req.state_);
  }
}

void CommunicatorImpl::validate(CollectiveKind kind, const void* send, void* recv, size_t count,
                                DataType type, RedOp op, int root) const {
  const int r = state_->rank, n = state_->size;
  if (destroyed_) invalid(Result::InvalidUsage, r, kind, "communicator used after destroy");
  if (!isValid(type))
    invalid(Result::InvalidArgument, r, kind,
            "unknown data type " + std::to_string(static_cast<int>(type)) + " (expected 0.." +
                std::to_string(kNumDataTypes - 1) + ")");
  if ((kind == CollectiveKind::ReduceScatter || kind == CollectiveKind::AllReduce) && !isValid(op))
    invalid(Result::InvalidArgument, r, kind,
            "unknown reduction op " + std::to_string(static_cast<int>(op)) + " (expected 0.." +
                std::to_string(kNumRedOps - 1) + ")");
  if (kind == CollectiveKind::Broadcast && (root < 0 || root >= n))
    invalid(Result::InvalidArgument, r, kind,
            "root " + std::to_string(root) + " out of range (expected 0.." + std::to_string(n - 1) +
                ")");
  if (kind == CollectiveKind::Barrier) return;
  const size_t elem = dataTypeSize(type);
  const size_t maxCount = std::numeric_limits<size_t>::max() / elem / static_cast<size_t>(n);
  if (count > maxCount)
    invalid(Result::InvalidArgument, r, kind,
            "count " + std::to_string(count) + " overflows (at most " + std::to_string(maxCount) +
                " elements of " + dataTypeName(type) + " per rank for " + std::to_string(n) +
                " ranks)");
  if (count == 0) return;
  const bool needSend = kind != CollectiveKind::Broadcast || r == root;
  if (needSend && send == nullptr)
    invalid(Result::InvalidArgument, r, kind,
            "sendbuff is null with count " + std::to_string(count));
  if (recv == nullptr)
    invalid(Result::InvalidArgument, r, kind,
            "recvbuff is null with count " + std::to_string(count));
  const auto [sendBytes, recvBytes, inPlaceSend] = callBuffers(kind, recv, count * elem, r, n);
  if (needSend && send != inPlaceSend && overlaps(send, sendBytes, recv, recvBytes))
    invalid(Result::InvalidArgument, r, kind,
            "sendbuff and recvbuff overlap but are not the in-place form (expected sendbuff == "
            "recvbuff" +
                std::string(kind == CollectiveKind::AllGather       ? " + rank*count"
                            : kind == CollectiveKind::ReduceScatter ? " - rank*count"
                                                                    : "") +
                " elements, or disjoint buffers)");
}

Request CommunicatorImpl::start(CollectiveKind kind, const void* send, void* recv, size_t count,
                                DataType type, RedOp op, int root) {
  validate(kind, send, recv, count, type, op, root);
  // SHARC_DEVICE_PATH=host: the device path, with the host device queue as the "GPU".
  if (core::Config::get().devicePath == core::DevicePath::Host && state_->size > 1)
    return startOn(kind, send, recv, count, type, op, root, -1);
  // The host forms read and write with the CPU: device memory would crash them.
  if (count > 0 && cudaAvailable()) {
    const bool readsSend = kind != CollectiveKind::Broadcast || root == state_->rank;
    for (const auto& [p, name] :
         {std::pair<const void*, const char*>{readsSend ? send : nullptr, "sendbuff"},
          {recv, "recvbuff"}})
      if (p && memoryKind(p) == MemoryKind::Device)
        invalid(Result::InvalidArgument, state_->rank, kind,
                std::string(name) +
                    " is CUDA device memory: the host form takes host memory (use the form "
                    "that takes a cudaStream_t)");
  }
  return startOn(kind, send, recv, count, type, op, root, kNoDevice);
}

Request CommunicatorImpl::startOnDevice(CollectiveKind kind, const void* send, void* recv,
                                        size_t count, DataType type, RedOp op, int root,
                                        int cudaDevice) {
  validate(kind, send, recv, count, type, op, root);
  return startOn(kind, send, recv, count, type, op, root, cudaDevice);
}

Request CommunicatorImpl::startOn(CollectiveKind kind, const void* send, void* recv, size_t count,
                                  DataType type, RedOp op, int root, int device) {
  CommState& c = *state_;
  const size_t elem = dataTypeSize(type);
  // Training loops repeat the same few shapes: plans are kept per (collective, bytes).
  const uint64_t planKey = planKeyOf(kind, count * elem, device != kNoDevice);
  // The learning tuner's shapes: the collectives the user calls (not sharc's own calls).
  const bool learnable =
      *c.internalCall == '\0' && c.size > 1 && count > 0 &&
      (kind == CollectiveKind::AllGather || kind == CollectiveKind::ReduceScatter ||
       kind == CollectiveKind::AllReduce);
  if (learnable) agreeIfDue(planKey);
  Engine& engine = *c.engine;
  std::lock_guard<std::mutex> lock(engine.mu);
  if (c.aborted) invalid(Result::RemoteError, c.rank, kind, c.abortMessage);

  algo::ScheduleContext ctx = baseContext(
      kind, type,
      (kind == CollectiveKind::ReduceScatter || kind == CollectiveKind::AllReduce) ? op
                                                                                   : RedOp::Sum,
      count);
  DeviceResources* dev = device == kNoDevice ? nullptr : &engine.deviceResources(device);
  if (dev) useDevice(ctx, *dev, kind, send, recv, count, type, root);
  ctx.seq = ++c.calls;
  if (core::FaultPlan* faults = core::FaultPlan::active())  // SHARC_FAULT: faults to inject
    faults->atCall(c.id, static_cast<int>(c.peers[static_cast<size_t>(c.rank)]), ctx.seq);
  // The static plan (SHARC_ALGO, the tuner file's choice or the model's); the model also moves
  // the log-step algorithms (whole blocks in one message) to the chunked ring where a message
  // could exceed the provider's largest.
  auto cached = c.plans.find(planKey);
  if (cached == c.plans.end()) {
    if (c.plans.size() >= 256) c.plans.clear();
    cached = c.plans.emplace(planKey, staticPlan(kind, count, type, false, dev != nullptr)).first;
  }
  LearnedPlan plan{cached->second.plan.algorithm, cached->second.plan.chunkBytes};
  bool explore = false;  // a call of the learning tuner's exploration: timed
  if (learnable && !cached->second.fixed)
    plan = c.learner.next(planKey, shapeOf(kind, count, type, dev != nullptr), tunerParams(), plan,
                          c.recorder, explore);
  // The single-copy algorithms read peers' memory with the CPU: never on the device path.
  const algo::Algorithm algorithm = dev ? algo::deviceAlgorithm(plan.algorithm) : plan.algorithm;
  ctx.algorithm = algo::algorithmName(algorithm);
  // INFO shows each change of algorithm per collective (not every call: that is TRACE), but
  // not the exploration's.
  auto& last = c.lastAlgorithm[static_cast<size_t>(kind) % c.lastAlgorithm.size()];
  if (!explore && last != static_cast<int>(algorithm)) {
    last = static_cast<int>(algorithm);
    std::string breakdown;
    algo::predictUs(shapeOf(kind, count, type, dev != nullptr), algorithm, plan.chunkBytes,
                    tunerParams(), &breakdown);
    SHARC_INFO("rank " << c.rank << ": " << core::collectiveName(kind) << " of " << count * elem
                       << " bytes per rank on " << c.size << " ranks: algorithm " << ctx.algorithm
                       << ", chunk " << plan.chunkBytes << " (" << breakdown << ")");
  }
  const CallBuffers buffers = callBuffers(kind, recv, count * elem, c.rank, c.size);
  ctx.send = send;
  ctx.recv = recv;
  ctx.sendBytes = buffers.sendBytes;
  ctx.recvBytes = buffers.recvBytes;
  // A shape called before rearms the schedule it built (see ScheduleCache).
  const ScheduleShape shape{kind,
                            type,
                            ctx.op,
                            count,
                            kind == CollectiveKind::Broadcast ? root : -1,
                            algorithm,
                            plan.chunkBytes,
                            send == buffers.inPlaceSend,
                            device,
                            dev != nullptr && ctx.directLinks == &c.directLinks};
  const bool cacheable = count > 0;
  std::shared_ptr<algo::Schedule> schedule = cacheable ? c.schedules.take(shape) : nullptr;
  const bool reused = schedule && schedule->rearm(ctx.seq, ctx.deadline, send, recv);
  if (!reused) {
    schedule = std::make_shared<algo::Schedule>(std::move(ctx));
    algo::CollArgs args;
    args.send = send;
    args.recv = recv;
    args.count = count;
    args.root = root;
    args.chunkBytes = plan.chunkBytes;
    switch (kind) {
      case CollectiveKind::AllGather: algo::buildAllGather(*schedule, algorithm, args); break;
      case CollectiveKind::ReduceScatter:
        algo::buildReduceScatter(*schedule, algorithm, args);
        break;
      case CollectiveKind::AllReduce: algo::buildAllReduce(*schedule, algorithm, args); break;
      case CollectiveKind::Broadcast: algo::buildBroadcast(*schedule, args); break;
      default: algo::buildBarrier(*schedule); break;
    }
    if (cacheable) c.schedules.keep(shape, schedule);
  }
  if (dev) registerScratch(*schedule, *dev);
  SHARC_TRACE(schedule->describe() << ": " << schedule->opCount() << " operations"
                                   << (reused ? " (schedule reused)" : ""));
  // The flight record: a few stores and one clock read (no allocation once the ring is full).
  TraceEntry& e = c.recorder.add();
  e.seq = schedule->context().seq;
  e.kind = kind;
  e.type = type;
  e.hasOp = kind == CollectiveKind::ReduceScatter || kind == CollectiveKind::AllReduce;
  e.op = e.hasOp ? op : RedOp::Sum;
  e.root = kind == CollectiveKind::Broadcast ? root : -1;
  e.count = count;
  e.algorithm = algo::algorithmName(algorithm);
  e.chunkBytes = plan.chunkBytes;
  e.scheduleReused = reused;
  e.internal = c.internalCall;
  e.path = !dev                                                ? c.path
           : schedule->context().directLinks == &c.stagedLinks ? "device-staged"
                                                               : c.devicePath;
  e.state = TraceState::Started;
  e.queuedNs = e.startedNs = wallClockNs();
  const uint64_t traceId = e.id;
  Request request = launch(std::move(schedule), traceId);
  if (explore) c.learner.track(planKey, traceId);
  return request;
}

algo::ScheduleContext CommunicatorImpl::baseContext(CollectiveKind kind, DataType type, RedOp op,
                                                    size_t count) {
  CommState& c = *state_;
  Engine& engine = *c.engine;
  algo::ScheduleContext ctx;
  ctx.endpoint = &engine.endpoint();
  ctx.peers = &c.peers;
  ctx.pids = c.pids.empty() ? nullptr : &c.pids;
  ctx.scratch = &engine.scratch;
  ctx.nodes = &c.nodes;
  ctx.hierRotate = engine.hierRotate;
  ctx.rank = c.rank;
  ctx.size = c.size;
  ctx.commId = c.id;
  ctx.kind = kind;
  ctx.type = type;
  ctx.op = op;
  ctx.count = count;
  ctx.deadline = std::chrono::steady_clock::now() + c.timeout.load();
  return ctx;
}

Request CommunicatorImpl::launch(std::shared_ptr<algo::Schedule> schedule, uint64_t traceId) {
  return launch(std::make_shared<RequestState>(state_, std::move(schedule)), traceId);
}

Request CommunicatorImpl::launch(std::shared_ptr<RequestState> request, uint64_t traceId) {
  request->traceId = traceId;
  request->startedAt = std::chrono::steady_clock::now();
  state_->engine->addActive(request);
  state_->engine->progressLocked();  // post what can go right away
  return Request(std::move(request));
}

std::shared_ptr<Communicator> CommunicatorImpl::split(int color, int key) {
  CommState& c = *state_;
  // Each rank contributes (color, key, the communicator ids in use on its endpoint), so
  // the members of a new communicator can pick an id that is free on all of them.
  struct Record {
    int32_t color;
    int32_t key;
    uint64_t used[algo::tag::kMaxComms / 64];
  };
  Record mine{};
  mine.color = color;
  mine.key = key;
  {
    std::lock_guard<std::mutex> lock(c.engine->mu);
    for (uint32_t i = 0; i < algo::tag::kMaxComms; ++i)
      if (c.engine->usedCommIds.test(i)) mine.used[i / 64] |= uint64_t{1} << (i % 64);
  }
  std::vector<Record> all(static_cast<size_t>(c.size));
  c.internalCall = "split";
  Request req;
  try {
    req = start(CollectiveKind::AllGather, &mine, all.data(), sizeof(Record), DataType::Uint8,
                RedOp::Sum, 0);
  } catch (...) {
    c.internalCall = "";
    throw;
  }
  c.internalCall = "";
  waitRequest(*req.state_, std::chrono::milliseconds::max());
  if (color < 0) return nullptr;

  std::vector<int> members;
  for (int r = 0; r < c.size; ++r)
    if (all[r].color == color) members.push_back(r);
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return all[a].key < all[b].key; });
  uint64_t used[algo::tag::kMaxComms / 64] = {};
  for (int m : members)
    for (size_t w = 0; w < std::size(used); ++w) used[w] |= all[m].used[w];
  uint32_t id = algo::tag::kMaxComms;
  for (uint32_t i = 0; i < algo::tag::kMaxComms && id == algo::tag::kMaxComms; ++i)
    if ((used[i / 64] >> (i % 64) & 1) == 0) id = i;
  if (id == algo::tag::kMaxComms)
    throw Error(Result::InvalidUsage, "rank " + std::to_string(c.rank) + ": split: all " +
                                          std::to_string(algo::tag::kMaxComms) +
                                          " communicator ids are in use; destroy unused ones");
  std::vector<uint32_t> peers;
  std::vector<int32_t> pids;
  int newRank = -1;
  for (int m : members) {
    if (m == c.rank) newRank = static_cast<int>(peers.size());
    peers.push_back(c.peers[m]);
    if (!c.pids.empty()) pids.push_back(c.pids[m]);
  }
  auto child = std::make_shared<CommState>(c.engine, id, newRank, std::move(peers), std::move(pids),
                                           c.nodes.subset(members), c.timeout.load(), c.algos);
  child->parentId = static_cast<int>(c.id);
  {
    std::lock_guard<std::mutex> lock(c.engine->mu);
    child->start();
    // Forget destroyed children first: an expired weak_ptr pins its CommState's storage
    // (make_shared), about 1 KiB per split, for as long as this communicator lives.
    std::erase_if(c.children, [](const std::weak_ptr<CommState>& w) { return w.expired(); });
    c.children.push_back(child);
  }
  SHARC_INFO("rank " << c.rank << ": split color " << color << " -> rank " << newRank << " of "
                     << child->size << ", communicator id " << id);
  return wrap(std::move(child));
}

void CommunicatorImpl::destroy(std::chrono::milliseconds closingWait) noexcept {
  if (destroyed_) return;
  stopStreamCalls();
  CommState& c = *state_;
  // The learned choices, for the next job's SHARC_TUNER_FILE: one rank per communicator
  // (every rank holds the same).
  if (const std::string& save = core::Config::get().tunerSave; !save.empty() && c.rank == 0) {
    std::vector<core::TunerChoice> choices;
    {
      std::lock_guard<std::mutex> lock(c.engine->mu);
      choices = c.learner.choices(c.size, c.nodes.nodes());
    }
    try {
      if (!choices.empty()) saveChoices(save, choices);
      SHARC_INFO("rank " << c.rank << ": " << choices.size() << " learned choices saved to "
                         << save);
    } catch (const std::exception& e) {
      SHARC_WARN("rank " << c.rank << ": destroy: " << e.what());
    }
  }
  bool aborted;
  {
    // The watch thread sets it (a peer's abort notice) under the engine's lock.
    std::lock_guard<std::mutex> lock(c.engine->mu);
    aborted = c.aborted;
  }
  // Best-effort barrier so that no peer still needs this endpoint to finish its last
  // operation (providers may complete a sender only after the receiver acknowledges). Only
  // the last communicator on an endpoint needs it: while others live, the endpoint stays
  // open, and ranks may destroy sub-communicators in any order without waiting on each other.
  if (!aborted && c.size > 1) {
    try {
      c.internalCall = "destroy";
      Request req =
          start(CollectiveKind::Barrier, nullptr, nullptr, 0, DataType::Uint8, RedOp::Sum, 0);
      c.internalCall = "";
      waitRequest(*req.state_, std::min<std::chrono::milliseconds>(c.timeout.load(), closingWait));
    } catch (const std::exception& e) {
      c.internalCall = "";
      SHARC_INFO("rank " << c.rank << ": destroy: closing barrier failed: " << e.what());
    }
  }
  destroyed_ = true;
  std::lock_guard<std::mutex> lock(c.engine->mu);
  c.engine->failActive(&c, Result::InvalidUsage, "communicator destroyed");
  c.engine->progressLocked();
  c.close();
  // Let the cancellation complete, and the abort notices reach the peers (a notice to a peer
  // this rank never talked to waits for its connection; a process that exits first loses
  // it): at most 2 s. The state must not outlive this call inside the engine (it owns a
  // reference to the engine, so keeping it there would never free either).
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2000);
  while (!c.quiescent() && std::chrono::steady_clock::now() < until) {
    c.retryControlSends();  // closed: the engine no longer does it for this communicator
    c.engine->progressLocked();
  }
  if (std::chrono::steady_clock::now() > until - std::chrono::milliseconds(1900))
    SHARC_INFO(
        "rank " << c.rank << ": destroy: waited "
                << std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::steady_clock::now() - (until - std::chrono::milliseconds(2000)))
                       .count()
                << " ms for control messages to go out (" << c.controlState() << ")");
  if (!c.quiescent()) {
    SHARC_WARN("rank " << c.rank << ": destroy: transfers still pending; leaking their state");
    new std::shared_ptr<CommState>(state_);  // deliberately leaked: the provider may write to it
  }
}

void CommunicatorImpl::abort(const std::string& reason) noexcept {
  CommState& c = *state_;
  std::lock_guard<std::mutex> lock(c.engine->mu);
  if (destroyed_ || c.aborted) return;
  SHARC_INFO("rank " << c.rank << ": abort: " << reason);
  try {
    // This communicator and every communicator split from it, transitively: their pending
    // operations fail now and their peers hear of it.
    std::vector<CommState*> todo{&c};
    for (size_t i = 0; i < todo.size(); ++i) {
      CommState& x = *todo[i];
      if (!x.aborted) {
        x.userAborted = true;
        x.abort(
            i == 0 ? reason : "parent communicator " + std::to_string(c.id) + " aborted: " + reason,
            Result::InvalidUsage);
      }
      for (auto& w : x.children)
        if (auto child = w.lock()) todo.push_back(child.get());
    }
    if (!c.dumped) {
      c.dumped = true;
      c.engine->requestDump("abort", reason);
    }
    c.engine->progressLocked();  // lets the failures be reported now
  } catch (const std::exception& e) {
    SHARC_WARN("rank " << c.rank << ": abort: " << e.what());
  }
}

std::string CommunicatorImpl::traceJson() const {
  std::lock_guard<std::mutex> lock(state_->engine->mu);
  return state_->engine->traceJson("request", "");
}

std::string CommunicatorImpl::dumpTrace(const std::string& dir) const {
  const std::string& where = dir.empty() ? core::Config::get().traceDir : dir;
  std::lock_guard<std::mutex> lock(state_->engine->mu);
  return state_->engine->writeTrace(where, "request", "");
}

void CommunicatorImpl::setTimeout(std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0)
    throw Error(Result::InvalidArgument, "rank " + std::to_string(rank()) +
                                             ": setTimeout: the timeout must be positive, got " +
                                             std::to_string(timeout.count()) + " ms");
  state_->timeout.store(timeout);
}

Result CommunicatorImpl::failure(std::string* message) const {
  CommState& c = *state_;
  std::lock_guard<std::mutex> lock(c.engine->mu);
  if (message) *message = c.aborted ? c.abortMessage : std::string();
  return c.aborted ? c.abortCode : Result::Success;
}

}  // namespace sharc::detail

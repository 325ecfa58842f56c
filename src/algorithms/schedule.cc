#include "schedule.hpp"

#include <cstring>
#include <sstream>

#include "core/collective.hpp"
#include "core/copy.hpp"
#include "core/log.hpp"
#include "core/reduce.hpp"
#include "transport/cma.hpp"
#include "transport/shared_buffers.hpp"

namespace sharc::algo {
namespace {
bool overlapping(const void* a, const void* b, size_t n) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + n && y < x + n;
}
}  // namespace

ScratchPool::Buffer ScratchPool::acquire(size_t bytes) {
  // Best fit among the free buffers, else a new one.
  size_t best = free_.size();
  for (size_t i = 0; i < free_.size(); ++i)
    if (free_[i].size >= bytes && (best == free_.size() || free_[i].size < free_[best].size))
      best = i;
  if (best != free_.size()) {
    Buffer b = std::move(free_[best]);
    free_.erase(free_.begin() + static_cast<long>(best));
    return b;
  }
  Buffer b;
  b.data.reset(new std::byte[bytes == 0 ? 1 : bytes]);
  b.size = bytes;
  return b;
}

void ScratchPool::release(Buffer buffer) {
  constexpr size_t kMaxFree = 8;
  if (free_.size() >= kMaxFree) free_.erase(free_.begin());
  free_.push_back(std::move(buffer));
}

uint64_t Schedule::tagBaseOf(const ScheduleContext& ctx) {
  return tag::base(ctx.commId, static_cast<uint32_t>(ctx.seq),
                   tag::signature(ctx.kind, ctx.type, ctx.op));
}

Schedule::Schedule(ScheduleContext ctx)
    : ctx_(std::move(ctx)),
      tagBase_(tagBaseOf(ctx_)),
      slotRotation_(static_cast<uint32_t>((uint64_t{ctx_.count} * 0x9E3779B97F4A7C15ull) >> 40) %
                    tag::kMaxSlots) {}

Schedule::~Schedule() {
  if (ctx_.scratch)
    for (auto& b : scratch_) ctx_.scratch->release(std::move(b));
  releaseDeviceMemory();
}

std::string Schedule::describe() const {
  std::ostringstream os;
  if (ctx_.kind == CollectiveKind::PointToPoint) {
    os << "rank " << ctx_.rank << ": send/recv(" << ops_.size() << " operations, " << ctx_.count
       << " bytes)";
    return os.str();
  }
  os << "rank " << ctx_.rank << ": " << core::collectiveName(ctx_.kind) << " #" << ctx_.seq
     << " (count=" << ctx_.count << ", " << dataTypeName(ctx_.type);
  if (ctx_.kind == CollectiveKind::ReduceScatter || ctx_.kind == CollectiveKind::AllReduce)
    os << ", " << redOpName(ctx_.op);
  if (!ctx_.algorithm.empty()) os << ", " << ctx_.algorithm;
  os << ")";
  return os.str();
}

Schedule::OpId Schedule::add(Op op) {
  const OpId id = static_cast<OpId>(ops_.size());
  ops_.push_back(std::move(op));
  states_.push_back(OpState::Waiting);
  pending_.push_back(0);
  ops_.back().transfer.owner = this;
  ops_.back().transfer.index = id;
  if (ops_.back().kind == OpKind::Recv) recvOrder_.push_back(id);
  if (ops_.back().kind == OpKind::Send) ops_.back().link = linkOf(ops_.back().peer);
  const OpKind k = ops_.back().kind;
  if (k == OpKind::Check || k == OpKind::RemoteRead || k == OpKind::RemoteWrite ||
      ops_.back().ownSeq)
    ownAddressesOnly_ = false;
  return id;
}

// Each builder fills only its kind's fields (designated initialisers, declaration order).
Schedule::OpId Schedule::send(int peer, uint32_t slot, const void* buf, size_t bytes) {
  const OpId id =
      add({.kind = OpKind::Send, .peer = peer, .slot = slot, .src = buf, .size = bytes});
  markStaged(id);
  return id;
}

Schedule::OpId Schedule::recv(int peer, uint32_t slot, void* buf, size_t bytes) {
  const OpId id =
      add({.kind = OpKind::Recv, .peer = peer, .slot = slot, .dst = buf, .size = bytes});
  markStaged(id);
  return id;
}

Schedule::OpId Schedule::sendWithSeq(int peer, uint32_t seq, uint32_t slot, const void* buf,
                                     size_t bytes) {
  const OpId id = add({.kind = OpKind::Send,
                       .peer = peer,
                       .slot = slot,
                       .seq = seq,
                       .ownSeq = true,
                       .src = buf,
                       .size = bytes});
  markStaged(id);
  return id;
}

Schedule::OpId Schedule::recvWithSeq(int peer, uint32_t seq, uint32_t slot, void* buf,
                                     size_t bytes) {
  const OpId id = add({.kind = OpKind::Recv,
                       .peer = peer,
                       .slot = slot,
                       .seq = seq,
                       .ownSeq = true,
                       .dst = buf,
                       .size = bytes});
  markStaged(id);
  return id;
}

Schedule::OpId Schedule::reduce(void* dst, const void* a, const void* b, size_t count) {
  return add({.kind = OpKind::Reduce, .dst = dst, .src = a, .src2 = b, .size = count});
}

Schedule::OpId Schedule::copy(void* dst, const void* src, size_t bytes) {
  return copyRows(dst, 0, src, 0, bytes, 1);
}

Schedule::OpId Schedule::copyRows(void* dst, size_t dstPitch, const void* src, size_t srcPitch,
                                  size_t width, size_t rows) {
  return add({.kind = OpKind::Copy,
              .dst = dst,
              .src = src,
              .size = width,
              .rows = rows,
              .dstPitch = dstPitch,
              .srcPitch = srcPitch});
}

Schedule::OpId Schedule::remoteRead(int peer, const uint64_t* remoteBase, uint64_t expectedLength,
                                    uint64_t offset, void* dst, size_t bytes) {
  return add({.kind = OpKind::RemoteRead,
              .peer = peer,
              .dst = dst,
              .src = remoteBase,
              .size = bytes,
              .remoteOffset = offset,
              .expectedLength = expectedLength});
}

Schedule::OpId Schedule::remoteWrite(int peer, const uint64_t* remoteBase, uint64_t expectedLength,
                                     uint64_t offset, const void* src, size_t bytes) {
  return add({.kind = OpKind::RemoteWrite,
              .peer = peer,
              .src = src,
              .src2 = remoteBase,
              .size = bytes,
              .remoteOffset = offset,
              .expectedLength = expectedLength});
}

Schedule::OpId Schedule::check(std::function<std::string()> verify) {
  checks_.push_back(std::move(verify));
  return add({.kind = OpKind::Check, .size = checks_.size() - 1});
}

Schedule::Progress Schedule::progress() const {
  if (state_ == State::Failed) return failedAt_;
  Progress p;
  p.opsDone = done_;
  p.opsTotal = ops_.size();
  for (OpId id = 0; id < ops_.size(); ++id) {
    if (ops_[id].kind != OpKind::Recv) continue;
    p.bytesExpected += ops_[id].size;
    if (states_[id] == OpState::Done) p.bytesReceived += ops_[id].size;
  }
  if (state_ != State::Running) return p;
  for (const Op& op : ops_)
    if (op.atEndpoint && op.kind == OpKind::Recv) {
      p.waitingFor = "recv";
      p.peer = op.peer;
      return p;
    }
  for (const Op& op : ops_)
    if (op.atEndpoint && op.kind == OpKind::Send) {
      p.waitingFor = "send";
      p.peer = op.peer;
      return p;
    }
  if (!deviceWaits_.empty())
    p.waitingFor = "device";
  else if (!readyLocal_.empty())
    p.waitingFor = "local";
  return p;
}

Schedule::OpId Schedule::divide(void* data, size_t count) {
  return add({.kind = OpKind::Divide, .dst = data, .size = count});
}

std::vector<Schedule::OpInfo> Schedule::describeOps() const {
  const size_t elem = dataTypeSize(ctx_.type);
  std::vector<OpInfo> out;
  out.reserve(ops_.size());
  for (const Op& op : ops_) {
    const bool elements = op.kind == OpKind::Reduce || op.kind == OpKind::Divide;
    out.push_back({.kind = op.kind,
                   .peer = op.peer,
                   .slot = op.slot,
                   .seq = op.seq,
                   .ownSeq = op.ownSeq,
                   .bytes = op.kind == OpKind::Check ? 0
                            : elements               ? op.size * elem
                                                     : op.size * op.rows});
  }
  for (const auto& [before, op] : edges_) out[before].dependents.push_back(op);
  return out;
}

void Schedule::after(OpId op, OpId before) {
  if (started_)  // a builder's bug: dependents are indexed once, at start
    throw Error(Result::InternalError, describe() + ": a dependency added after start");
  edges_.emplace_back(before, op);
  ++pending_[op];
}

void Schedule::indexDependents() {
  depBegin_.assign(ops_.size() + 1, 0);
  for (const auto& e : edges_) ++depBegin_[e.first + 1];
  for (size_t i = 0; i < ops_.size(); ++i) depBegin_[i + 1] += depBegin_[i];
  deps_.resize(edges_.size());
  std::vector<uint32_t> at(depBegin_.begin(), depBegin_.end() - 1);
  for (const auto& [before, op] : edges_) deps_[at[before]++] = op;
  edges_ = {};
}

std::byte* Schedule::scratch(size_t bytes) {
  if (ctx_.device != nullptr && ctx_.deviceScratch != nullptr) {
    deviceScratch_.push_back(ctx_.deviceScratch->acquire(bytes));
    deviceScratchBytes_.push_back(bytes);
    return static_cast<std::byte*>(deviceScratch_.back().data());
  }
  scratch_.push_back(ctx_.scratch->acquire(bytes));
  scratchBytes_.push_back(bytes);
  return scratch_.back().data.get();
}

std::byte* Schedule::hostScratch(size_t bytes) {
  ownAddressesOnly_ = false;  // what the builder writes into it is not rebuilt by rearm()
  scratch_.push_back(ctx_.scratch->acquire(bytes));
  scratchBytes_.push_back(bytes);
  std::byte* p = scratch_.back().data.get();
  if (ctx_.device != nullptr) hostScratch_.emplace_back(p, bytes);
  return p;
}

void Schedule::complete(OpId id) {
  Op& op = ops_[id];
  states_[id] = OpState::Done;
  if (op.stage) ctx_.staging->release(std::move(op.stage));
  ++done_;
  for (uint32_t i = depBegin_[id]; i < depBegin_[id + 1]; ++i) {
    const OpId d = deps_[i];
    if (--pending_[d] == 0) queueReady(d);
  }
}

void Schedule::runLocal(Op& op) {
  switch (op.kind) {
    case OpKind::Reduce:
      core::reduce(dstOf(op), srcOf(op), src2Of(op), op.size, ctx_.type, ctx_.op);
      break;
    case OpKind::Copy:
      if (dstOf(op) == srcOf(op) || op.size == 0) break;
      for (size_t i = 0; i < op.rows; ++i) {
        std::byte* dst = dstOf(op) + i * op.dstPitch;
        const std::byte* src = srcOf(op) + i * op.srcPitch;
        // Copies of whole blocks go to the output: stream them past the cache.
        if (!overlapping(dst, src, op.size) && op.size >= core::kStreamingCopyMin)
          core::copyStreaming(dst, src, op.size);
        else
          std::memmove(dst, src, op.size);
      }
      break;
    case OpKind::Check: {
      const std::string problem = checks_[op.size]();
      if (!problem.empty()) fail(Result::InvalidUsage, describe() + ": " + problem);
      break;
    }
    case OpKind::Divide:
      if (ctx_.op == RedOp::Avg)
        core::finishAverage(dstOf(op), op.size, ctx_.type, static_cast<uint64_t>(ctx_.size));
      break;
    case OpKind::RemoteRead:
    case OpKind::RemoteWrite: {
      const bool read = op.kind == OpKind::RemoteRead;
      const auto* remote = reinterpret_cast<const uint64_t*>(read ? srcOf(op) : src2Of(op));
      const uint64_t base = remote[0], length = remote[1];
      if (length != op.expectedLength || op.remoteOffset + op.size > length) {
        fail(Result::InvalidUsage,
             describe() + ": mismatched count: peer " + std::to_string(op.peer) + "'s " +
                 (read ? "send" : "receive") + " buffer holds " + std::to_string(length) +
                 " bytes where this rank's call implies " + std::to_string(op.expectedLength) +
                 " (do all ranks pass the same count?)");
        break;
      }
      const pid_t pid = (*ctx_.pids)[op.peer];
      // A buffer in the peer's shared allocation (sharc::allocShared) is copied in user space:
      // written with streaming stores, no kernel copy reading every destination line first.
      const auto& desc = *reinterpret_cast<const transport::RemoteBuffer*>(remote);
      if (std::byte* mapped = transport::mapPeerShared(pid, desc)) {
        if (read)
          std::memcpy(dstOf(op), mapped + op.remoteOffset, op.size);
        else
          core::copyLarge(mapped + op.remoteOffset, srcOf(op), op.size, op.size);
        break;
      }
      const std::string err =
          read ? transport::cmaRead(pid, base + op.remoteOffset, dstOf(op), op.size)
               : transport::cmaWrite(pid, base + op.remoteOffset, srcOf(op), op.size);
      if (!err.empty())
        fail(Result::SystemError, describe() + ": single-copy " +
                                      (read ? "read from" : "write to") + " peer " +
                                      std::to_string(op.peer) + " failed: " + err +
                                      " (set SHARC_CMA=0 to use the fabric instead)");
      break;
    }
    default: break;
  }
}

bool Schedule::post(OpId id) {
  Op& op = ops_[id];
  if (op.race & kLost) {  // a racing receive that lost before it was posted
    complete(id);
    return true;
  }
  if (op.staged) return op.kind == OpKind::Send ? startStagedSend(id) : postStagedRecv(id);
  return postTransfer(id, srcOf(op), dstOf(op));
}

bool Schedule::postTransfer(OpId id, const void* buf, void* rbuf) {
  Op& op = ops_[id];
  const uint64_t base = op.ownSeq ? tag::base(ctx_.commId, op.seq, tag::sigOf(tagBase_)) : tagBase_;
  // A collective's slots are rotated by a hash of its count: ranks that disagree on the count
  // then match none of each other's messages and the stall probe names the mismatch, where
  // chunks of equal length could otherwise let the rank with the smaller count finish on the
  // wrong data (a 3-rank ring AllGather of 100,000 against 50,000 floats did).
  const uint32_t slot =
      op.ownSeq || op.slot >= tag::kMaxSlots ? op.slot : (op.slot + slotRotation_) % tag::kMaxSlots;
  transport::PostStatus st;
  if (op.kind == OpKind::Send) {
    const uint64_t t = tag::make(base, static_cast<uint32_t>(ctx_.rank), slot);
    st = ctx_.endpoint->postSend((*ctx_.peers)[op.peer], t, buf, op.size, op.transfer);
  } else {
    const uint64_t t = tag::make(base, static_cast<uint32_t>(op.peer), slot);
    st = ctx_.endpoint->postRecv((*ctx_.peers)[op.peer], t, tag::kSigMask, rbuf, op.size,
                                 op.transfer);
  }
  if (st == transport::PostStatus::Retry) return false;
  if (st == transport::PostStatus::Completed) {                       // injected: done already
    if (op.staged && op.kind == OpKind::Send) window_.done(op.link);  // counted when staging began
    complete(id);
    return true;
  }
  if (st == transport::PostStatus::Failed) {
    fail(Result::SystemError,
         describe() + ": could not post " + (op.kind == OpKind::Send ? "send to" : "receive from") +
             " peer " + std::to_string(op.peer) + ": " + ctx_.endpoint->lastError());
    return false;
  }
  states_[id] = OpState::Posted;
  op.atEndpoint = true;
  ++posted_;
  if (op.kind == OpKind::Recv)
    ++postedRecvs_;
  else if (!op.staged)  // a staged send counted itself when its staging began
    window_.posted(op.link);
  return true;
}

Schedule::State Schedule::advance() {
  if (state_ != State::Running) return state_;
  if (!started_) {
    start();
    seedReady();
  }
  bool progressed = true;
  while (progressed && state_ == State::Running) {
    progressed = pollDevice();
    if (state_ != State::Running) break;
    while (!stagedSends_.empty() && state_ == State::Running) {
      const OpId id = stagedSends_.front();
      if (!postTransfer(id, ops_[id].stage.data(), nullptr)) break;
      stagedSends_.pop_front();
      progressed = true;
    }
    while (!readyRecvs_.empty()) {
      while (oldestUnposted_ < recvOrder_.size() &&
             states_[recvOrder_[oldestUnposted_]] >= OpState::Posted)
        ++oldestUnposted_;
      const bool inOrder =
          oldestUnposted_ < recvOrder_.size() && readyRecvs_.top() == recvOrder_[oldestUnposted_];
      if (postedRecvs_ >= (inOrder ? recvWindow_ : recvWindow_ - inOrderRecvs(recvWindow_))) break;
      if (!post(readyRecvs_.top())) break;
      readyRecvs_.pop();
      progressed = true;
    }
    for (int c = window_.next(readySends_); c >= 0 && state_ == State::Running;
         c = window_.next(readySends_)) {
      if (!post(readySends_[c].top())) break;
      readySends_[c].pop();
      progressed = true;
    }
    while (!readyLocal_.empty() && state_ == State::Running) {
      const OpId id = readyLocal_.top();
      readyLocal_.pop();
      const OpKind k = ops_[id].kind;
      if (ctx_.device != nullptr &&
          (k == OpKind::Reduce || k == OpKind::Copy || k == OpKind::Divide)) {
        runOnDevice(id);
        progressed = true;
        continue;
      }
      runLocal(ops_[id]);
      if (state_ != State::Running) break;
      complete(id);
      progressed = true;
      // One operation on the thread at a time: a send it made ready goes out before the next.
      break;
    }
  }
  if (state_ == State::Running && done_ == ops_.size()) {
    state_ = State::Done;
    parkScratch();
  }
  if (state_ == State::Running && std::chrono::steady_clock::now() > ctx_.deadline) {
    fail(Result::Timeout, describe() + ": timed out (SHARC_TIMEOUT_MS) " + waitingOn());
  }
  return state_;
}

void Schedule::start() {
  started_ = true;
  indexDependents();
  if (ctx_.endpoint != nullptr) recvWindow_ = recvWindow(ctx_.endpoint->recvQueueSize());
  sizeSendWindow();
}

void Schedule::seedReady() {
  for (OpId id = 0; id < ops_.size(); ++id)
    if (pending_[id] == 0) queueReady(id);
  if (preparedForReuse_) snapshotArmed();
}

void Schedule::queueReady(OpId id) {
  const Op& op = ops_[id];
  states_[id] = OpState::Ready;
  if (op.kind == OpKind::Send)
    readySends_[static_cast<size_t>(op.link)].push(id);
  else if (op.kind == OpKind::Recv)
    readyRecvs_.push(id);
  else
    readyLocal_.push(id);
}

void Schedule::sizeSendWindow() {
  std::vector<bool> seen;
  size_t peers[2] = {0, 0};
  for (const Op& op : ops_) {
    if (op.kind != OpKind::Send) continue;
    const auto p = static_cast<size_t>(op.peer);
    if (p >= seen.size()) seen.resize(p + 1);
    if (!seen[p]) {
      seen[p] = true;
      ++peers[static_cast<size_t>(op.link)];
    }
  }
  window_.size(peers[0], peers[1]);
}

LinkClass Schedule::linkOf(int peer) const {
  const NodeMap* m = ctx_.nodes;
  if (m == nullptr || static_cast<size_t>(peer) >= m->nodeOf.size()) return LinkClass::Local;
  return m->nodeOf[static_cast<size_t>(peer)] == m->nodeOf[static_cast<size_t>(ctx_.rank)]
             ? LinkClass::Local
             : LinkClass::Remote;
}

std::string Schedule::waitingOn() const {
  for (const Op& op : ops_) {
    if (op.atEndpoint && op.kind == OpKind::Recv)
      return "waiting for a message from peer " + std::to_string(op.peer);
  }
  for (const Op& op : ops_) {
    if (op.atEndpoint && op.kind == OpKind::Send)
      return "waiting for a send to peer " + std::to_string(op.peer) + " to complete";
  }
  if (!deviceWaits_.empty())
    return "waiting for the " + std::string(ctx_.device->name()) + " device queue";
  return "with no message in flight";
}

void Schedule::fail(Result code, const std::string& message) {
  if (state_ == State::Failed) return;
  failedAt_ = progress();
  state_ = State::Failed;
  errorCode_ = code;
  errorMessage_ = message;
  for (Op& op : ops_)
    if (op.atEndpoint) ctx_.endpoint->cancel(op.transfer);
}

void Schedule::onTransferDone(transport::Transfer& t, size_t bytes, uint64_t tag) {
  Op& op = ops_[t.index];
  op.atEndpoint = false;
  --posted_;
  if (op.kind == OpKind::Send)
    window_.done(op.link);
  else
    --postedRecvs_;
  if (state_ != State::Running) {
    states_[t.index] = OpState::Done;
    return;
  }
  if (op.kind == OpKind::Recv) {
    const uint32_t sig = tag::sigOf(tag);
    // (A staged receive is checked here too, before its copy out of staging.)
    const uint32_t expected = tag::signature(ctx_.kind, ctx_.type, ctx_.op);
    if (sig != expected) {
      std::ostringstream os;
      os << describe() << ": mismatched call: peer " << op.peer << " called "
         << core::collectiveName(tag::sigKind(sig)) << " #" << ctx_.seq << " ("
         << dataTypeName(tag::sigType(sig));
      if (tag::sigKind(sig) == CollectiveKind::ReduceScatter ||
          tag::sigKind(sig) == CollectiveKind::AllReduce)
        os << ", " << redOpName(tag::sigOp(sig));
      os << ") while this rank expected the call above";
      fail(Result::InvalidUsage, os.str());
      return;
    }
    if (op.race != 0 && raceArrived(t.index, bytes)) return;
    if (bytes != op.size) {
      fail(Result::InvalidUsage, describe() + ": mismatched count: peer " +
                                     std::to_string(op.peer) + " sent " + std::to_string(bytes) +
                                     " bytes where " + std::to_string(op.size) +
                                     " were expected (do all ranks pass the same count?)");
      return;
    }
    if (op.staged) return finishStagedRecv(t.index);
  }
  complete(t.index);
}

void Schedule::onTransferError(transport::Transfer& t, Result code, const std::string& message) {
  Op& op = ops_[t.index];
  op.atEndpoint = false;
  --posted_;
  if (op.kind == OpKind::Send)
    window_.done(op.link);
  else
    --postedRecvs_;
  states_[t.index] = OpState::Done;
  if (state_ != State::Running) return;
  if (op.race != 0 && raceCanceled(t.index, code)) return;
  std::string what = message;
  if (code == Result::InvalidUsage)  // truncation: the peer sent more than this rank expects
    what = "mismatched count: " + message + " (do all ranks pass the same count?)";
  fail(code, describe() + ": " + (op.kind == OpKind::Send ? "send to" : "receive from") + " peer " +
                 std::to_string(op.peer) + " failed: " + what);
}

}  // namespace sharc::algo

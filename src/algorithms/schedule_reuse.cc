// Running a built schedule again (Schedule::prepareReuse, rearm): the operations and their
// dependencies stay as built; the run state is restored from its first start, and the
// regions the operations' addresses are offsets in move to the new call's buffers.
#include <cstdint>
#include <type_traits>

#include "schedule.hpp"

namespace sharc::algo {
namespace {

// Regions an operation's address may lie in: the receive buffer, the send buffer, then each
// scratch buffer in the order scratch() gave them (host scratch first, then device scratch
// on the device path).
constexpr uint8_t kRecvRegion = 0, kSendRegion = 1, kFirstScratchRegion = 2;

struct Region {
  uintptr_t at = 0;
  size_t bytes = 0;
};

// The region `p` lies in: inside one first, else at one's end (a zero-length operation
// there); `regions.size()` if none.
size_t regionOf(const std::vector<Region>& regions, const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (size_t i = 0; i < regions.size(); ++i)
    if (a >= regions[i].at && a - regions[i].at < regions[i].bytes) return i;
  for (size_t i = 0; i < regions.size(); ++i)
    if (a == regions[i].at + regions[i].bytes) return i;
  return regions.size();
}

}  // namespace

bool Schedule::prepareReuse() {
  if (preparedForReuse_) return true;
  if (!ownAddressesOnly_ || started_) return false;
  const size_t host = scratch_.size(), device = deviceScratch_.size();
  if (kFirstScratchRegion + host + device >= kNoRegion) return false;
  std::vector<Region> regions(kFirstScratchRegion + host + device);
  regions[kRecvRegion] = {reinterpret_cast<uintptr_t>(ctx_.recv), ctx_.recvBytes};
  regions[kSendRegion] = {reinterpret_cast<uintptr_t>(ctx_.send), ctx_.sendBytes};
  for (size_t i = 0; i < host; ++i)
    regions[kFirstScratchRegion + i] = {reinterpret_cast<uintptr_t>(scratch_[i].data.get()),
                                        scratchBytes_[i]};
  for (size_t i = 0; i < device; ++i)
    regions[kFirstScratchRegion + host + i] = {
        reinterpret_cast<uintptr_t>(deviceScratch_[i].data()), deviceScratchBytes_[i]};
  // Every address must lie in a region before any is turned into an offset.
  for (const Op& op : ops_)
    for (const void* p : {static_cast<const void*>(op.dst), op.src, op.src2})
      if (p != nullptr && regionOf(regions, p) == regions.size()) return false;
  regionBase_.resize(regions.size());
  for (size_t i = 0; i < regions.size(); ++i) regionBase_[i] = regions[i].at;
  const auto offset = [&](auto*& p, uint8_t& region) {
    if (p == nullptr) return;
    region = static_cast<uint8_t>(regionOf(regions, p));
    p = reinterpret_cast<std::remove_reference_t<decltype(p)>>(reinterpret_cast<uintptr_t>(p) -
                                                               regionBase_[region]);
  };
  for (Op& op : ops_) {
    offset(op.dst, op.region[0]);
    offset(op.src, op.region[1]);
    offset(op.src2, op.region[2]);
  }
  preparedForReuse_ = true;
  return true;
}

void Schedule::snapshotArmed() {
  armed_.states = states_;
  armed_.pending = pending_;
  for (OpId id = 0; id < ops_.size(); ++id) {
    if (states_[id] != OpState::Ready) continue;
    const Op& op = ops_[id];
    if (op.kind == OpKind::Send)
      armed_.sends[static_cast<size_t>(op.link)].push_back(id);
    else if (op.kind == OpKind::Recv)
      armed_.recvs.push_back(id);
    else
      armed_.local.push_back(id);
  }
}

bool Schedule::rearm(uint64_t seq, std::chrono::steady_clock::time_point deadline, const void* send,
                     const void* recv) {
  if (!preparedForReuse_) return false;
  // Done, or not run at all yet (the build benchmark rearms a schedule it never runs).
  const bool untouched = state_ == State::Running && done_ == 0 && posted_ == 0;
  if (state_ != State::Done && !untouched) return false;
  regionBase_[kRecvRegion] = reinterpret_cast<uintptr_t>(recv);
  regionBase_[kSendRegion] = reinterpret_cast<uintptr_t>(send);
  // Scratch first, all or nothing: a pool that throws leaves the schedule as it was (Done).
  std::vector<core::QueueMemory> device;
  try {
    for (const size_t bytes :
         parkedDeviceScratch_.empty() ? std::vector<size_t>{} : deviceScratchBytes_)
      device.push_back(ctx_.deviceScratch->acquire(bytes));
  } catch (...) {
    for (core::QueueMemory& m : device) ctx_.deviceScratch->release(std::move(m));
    throw;
  }
  const size_t host = scratchBytes_.size();  // (device regions come after every host one)
  for (size_t i = 0; i < parkedScratch_.size(); ++i) {
    scratch_.push_back(ctx_.scratch->acquire(scratchBytes_[i]));
    regionBase_[kFirstScratchRegion + i] = reinterpret_cast<uintptr_t>(scratch_.back().data.get());
  }
  parkedScratch_.clear();
  for (size_t i = 0; i < device.size(); ++i) {
    regionBase_[kFirstScratchRegion + host + i] = reinterpret_cast<uintptr_t>(device[i].data());
    deviceScratch_.push_back(std::move(device[i]));
  }
  parkedDeviceScratch_.clear();
  ctx_.seq = seq;
  ctx_.deadline = deadline;
  ctx_.send = send;
  ctx_.recv = recv;
  tagBase_ = tagBaseOf(ctx_);
  state_ = State::Running;
  done_ = posted_ = postedRecvs_ = 0;
  oldestUnposted_ = 0;
  stagedTransfers_ = 0;
  errorCode_ = Result::Success;
  errorMessage_.clear();
  failedAt_ = {};
  if (!started_) {  // (every operation's atEndpoint is false: nothing is posted)
    start();
    seedReady();
    return true;
  }
  states_ = armed_.states;
  pending_ = armed_.pending;
  using Heap = std::priority_queue<OpId, std::vector<OpId>, std::greater<OpId>>;
  for (size_t c = 0; c < 2; ++c) readySends_[c] = Heap(std::greater<OpId>(), armed_.sends[c]);
  readyRecvs_ = Heap(std::greater<OpId>(), armed_.recvs);
  readyLocal_ = Heap(std::greater<OpId>(), armed_.local);
  return true;
}

void Schedule::parkScratch() {
  for (ScratchPool::Buffer& b : scratch_) {
    parkedScratch_.push_back(b.data.get());
    ctx_.scratch->release(std::move(b));
  }
  scratch_.clear();
  for (core::QueueMemory& m : deviceScratch_) {  // (done: no queued operation still uses it)
    parkedDeviceScratch_.push_back(m.data());
    ctx_.deviceScratch->release(std::move(m));
  }
  deviceScratch_.clear();
}

}  // namespace sharc::algo

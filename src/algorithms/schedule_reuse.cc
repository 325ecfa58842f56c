// Running a built schedule again (Schedule::prepareReuse, rearm): the operations and their
// dependencies stay; states, counters, scratch and addresses are made new.
#include <cstdint>

#include "schedule.hpp"

namespace sharc::algo {
namespace {

// Regions an operation's address may lie in: the receive buffer, the send buffer, then each
// scratch buffer in the order scratch() gave them.
constexpr uint8_t kRecvRegion = 0, kSendRegion = 1, kFirstScratchRegion = 2;
constexpr uint8_t kNoRegion = 255;  // a null address

struct Region {
  uintptr_t at = 0;
  size_t bytes = 0;
};

// The region `p` lies in: inside one first, else at one's end (a zero-length operation
// there); kNoRegion for null, and `regions.size()` if none.
size_t regionOf(const std::vector<Region>& regions, const void* p) {
  if (p == nullptr) return kNoRegion;
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (size_t i = 0; i < regions.size(); ++i)
    if (a >= regions[i].at && a - regions[i].at < regions[i].bytes) return i;
  for (size_t i = 0; i < regions.size(); ++i)
    if (a == regions[i].at + regions[i].bytes) return i;
  return regions.size();
}

// `p` moved by its region's shift (unsigned arithmetic: shifts wrap both ways).
template <class T>
void shift(T*& p, uint8_t region, const uintptr_t* shifts) {
  if (region == kNoRegion) return;
  p = reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(p) + shifts[region]);
}

}  // namespace

bool Schedule::prepareReuse() {
  if (preparedForReuse_) return true;
  if (!ownAddressesOnly_ || ctx_.device != nullptr || state_ == State::Failed) return false;
  if (scratch_.size() + kFirstScratchRegion >= kNoRegion || !parkedScratch_.empty()) return false;
  std::vector<Region> regions(kFirstScratchRegion + scratch_.size());
  regions[kRecvRegion] = {reinterpret_cast<uintptr_t>(ctx_.recv), ctx_.recvBytes};
  regions[kSendRegion] = {reinterpret_cast<uintptr_t>(ctx_.send), ctx_.sendBytes};
  for (size_t i = 0; i < scratch_.size(); ++i)
    regions[kFirstScratchRegion + i] = {reinterpret_cast<uintptr_t>(scratch_[i].data.get()),
                                        scratchBytes_[i]};
  for (Op& op : ops_) {
    const void* addresses[3] = {op.dst, op.src, op.src2};
    for (int k = 0; k < 3; ++k) {
      const size_t r = regionOf(regions, addresses[k]);
      if (r == regions.size()) return false;  // (ops already marked are never read)
      op.region[k] = static_cast<uint8_t>(r);
    }
  }
  preparedForReuse_ = true;
  return true;
}

bool Schedule::rearm(uint64_t seq, std::chrono::steady_clock::time_point deadline,
                     const void* send, const void* recv) {
  if (!preparedForReuse_) return false;
  // Done, or not run at all yet (the build benchmark rearms a schedule it never runs).
  const bool untouched = state_ == State::Running && done_ == 0 && posted_ == 0;
  if (state_ != State::Done && !untouched) return false;
  if (!started_) start();
  std::vector<uintptr_t> shifts(kFirstScratchRegion + scratchBytes_.size(), 0);
  shifts[kRecvRegion] = reinterpret_cast<uintptr_t>(recv) - reinterpret_cast<uintptr_t>(ctx_.recv);
  shifts[kSendRegion] = reinterpret_cast<uintptr_t>(send) - reinterpret_cast<uintptr_t>(ctx_.send);
  for (size_t i = 0; i < parkedScratch_.size(); ++i) {
    scratch_.push_back(ctx_.scratch->acquire(scratchBytes_[i]));
    shifts[kFirstScratchRegion + i] = reinterpret_cast<uintptr_t>(scratch_.back().data.get()) -
                                      reinterpret_cast<uintptr_t>(parkedScratch_[i]);
  }
  parkedScratch_.clear();
  bool moved = false;
  for (const uintptr_t s : shifts) moved = moved || s != 0;
  readyLocal_.clear();
  readySends_[0] = {};
  readySends_[1] = {};
  readyRecvs_ = {};
  for (OpId id = 0; id < ops_.size(); ++id) {
    Op& op = ops_[id];  // (atEndpoint is false already: nothing is posted)
    op.pendingDeps = initialDeps_[id];
    if (moved) {
      shift(op.dst, op.region[0], shifts.data());
      shift(op.src, op.region[1], shifts.data());
      shift(op.src2, op.region[2], shifts.data());
    }
    op.state = OpState::Waiting;
    if (op.pendingDeps == 0) queueReady(id);
  }
  ctx_.seq = seq;
  ctx_.deadline = deadline;
  ctx_.send = send;
  ctx_.recv = recv;
  tagBase_ = tagBaseOf(ctx_);
  state_ = State::Running;
  done_ = posted_ = postedRecvs_ = 0;
  oldestUnposted_ = 0;
  errorCode_ = Result::Success;
  errorMessage_.clear();
  failedAt_ = {};
  return true;
}

void Schedule::parkScratch() {
  for (ScratchPool::Buffer& b : scratch_) {
    parkedScratch_.push_back(b.data.get());
    ctx_.scratch->release(std::move(b));
  }
  scratch_.clear();
}

}  // namespace sharc::algo

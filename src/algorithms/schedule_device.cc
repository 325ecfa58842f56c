// The schedule's device path (docs/gpu.md): local operations go to a device queue and finish
// when their fence does; transfers of device memory over a link without FI_HMEM are staged
// through host memory, copied in before a send and out after a receive, per message, so the
// staging of one chunk overlaps the network and the reductions of others.
#include <sharc/error.hpp>

#include "schedule.hpp"

namespace sharc::algo {

void Schedule::markStaged(OpId id) {
  if (ctx_.device == nullptr) return;
  Op& op = ops_[id];
  const std::byte* buf = op.kind == OpKind::Send ? srcOf(op) : dstOf(op);
  for (const auto& [p, n] : hostScratch_)
    if (buf >= p && buf < p + n) op.hostBuffer = true;
  const bool direct = ctx_.directLinks != nullptr &&
                      static_cast<size_t>(op.peer) < ctx_.directLinks->size() &&
                      (*ctx_.directLinks)[static_cast<size_t>(op.peer)] != 0;
  op.staged = !op.hostBuffer && !direct && op.size > 0;
}

void Schedule::runOnDevice(OpId id) {
  Op& op = ops_[id];
  core::DeviceQueue& q = *ctx_.device;
  try {
    switch (op.kind) {
      case OpKind::Reduce:
        q.reduce(dstOf(op), srcOf(op), src2Of(op), op.size, ctx_.type, ctx_.op);
        break;
      case OpKind::Copy:
        if (dstOf(op) == srcOf(op)) break;
        if (op.rows == 1)
          q.copy(dstOf(op), srcOf(op), op.size);
        else
          q.copy2d(dstOf(op), op.dstPitch, srcOf(op), op.srcPitch, op.size, op.rows);
        break;
      case OpKind::Divide:
        if (ctx_.op == RedOp::Avg)
          q.divide(dstOf(op), op.size, ctx_.type, static_cast<uint64_t>(ctx_.size));
        break;
      default: break;
    }
    states_[id] = OpState::Posted;
    deviceWaits_.push_back({q.fence(), id});
  } catch (const Error& e) {
    fail(e.code(), describe() + ": device queue (" + q.name() + "): " + e.what());
  }
}

bool Schedule::startStagedSend(OpId id) {
  Op& op = ops_[id];
  core::DeviceQueue& q = *ctx_.device;
  try {
    if (!op.stage) op.stage = ctx_.staging->acquire(op.size);
    q.copy(op.stage.data(), srcOf(op), op.size);
    deviceWaits_.push_back({q.fence(), id});
  } catch (const Error& e) {
    fail(e.code(), describe() + ": staging a send to peer " + std::to_string(op.peer) + " (" +
                       q.name() + " queue): " + e.what());
    return false;
  }
  states_[id] = OpState::Posted;
  window_.posted(op.link);  // the window bounds the staging held by sends
  ++stagedTransfers_;
  return true;
}

bool Schedule::postStagedRecv(OpId id) {
  Op& op = ops_[id];
  try {
    if (!op.stage) op.stage = ctx_.staging->acquire(op.size);
  } catch (const Error& e) {
    fail(e.code(),
         describe() + ": staging a receive from peer " + std::to_string(op.peer) + ": " + e.what());
    return false;
  }
  if (!postTransfer(id, nullptr, op.stage.data())) return false;
  ++stagedTransfers_;
  return true;
}

void Schedule::finishStagedRecv(OpId id) {
  Op& op = ops_[id];
  core::DeviceQueue& q = *ctx_.device;
  states_[id] = OpState::Posted;  // until the copy out of staging has finished
  try {
    q.copy(dstOf(op), op.stage.data(), op.size);
    deviceWaits_.push_back({q.fence(), id});
  } catch (const Error& e) {
    fail(e.code(), describe() + ": copying a receive from peer " + std::to_string(op.peer) +
                       " out of staging (" + q.name() + " queue): " + e.what());
  }
}

bool Schedule::pollDevice() {
  bool moved = false;
  while (!deviceWaits_.empty()) {
    bool finished = false;
    try {
      finished = ctx_.device->done(deviceWaits_.front().ticket);
    } catch (const Error& e) {
      // A failed queue finishes nothing more: forget what waits on it.
      deviceWaits_.clear();
      fail(e.code(), describe() + ": device queue (" + ctx_.device->name() + "): " + e.what());
      return true;
    }
    if (!finished) break;
    const OpId id = deviceWaits_.front().op;
    deviceWaits_.pop_front();
    moved = true;
    if (state_ != State::Running) continue;
    Op& op = ops_[id];
    if (op.kind == OpKind::Send) {
      op.stagedIn = true;
      stagedSends_.push_back(id);
    } else {
      complete(id);
    }
  }
  return moved;
}

bool Schedule::quiescent() {
  if (!deviceWaits_.empty()) pollDevice();
  return posted_ == 0 && deviceWaits_.empty();
}

std::vector<std::pair<const void*, size_t>> Schedule::deviceScratchRanges() const {
  std::vector<std::pair<const void*, size_t>> out;
  out.reserve(deviceScratch_.size());
  for (const auto& m : deviceScratch_) out.emplace_back(m.data(), m.bytes());
  return out;
}

void Schedule::releaseDeviceMemory() noexcept {
  if (ctx_.device == nullptr) return;  // a host schedule holds neither (markStaged)
  if (!deviceWaits_.empty()) {
    // Operations that may still write these buffers: give them up rather than reuse them.
    for (auto& m : deviceScratch_) m.leak();
    for (Op& op : ops_) op.stage.leak();
    return;
  }
  for (auto& m : deviceScratch_) ctx_.deviceScratch->release(std::move(m));
  for (Op& op : ops_)
    if (op.stage) ctx_.staging->release(std::move(op.stage));
}

}  // namespace sharc::algo

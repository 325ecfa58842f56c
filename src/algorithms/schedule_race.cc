// Racing receives: a receive from any source is one receive per peer, of which the first
// message to arrive is taken and the rest are canceled.
#include "schedule.hpp"

namespace sharc::algo {

void Schedule::race(std::vector<OpId> recvs, ArrivalFn onArrival) {
  for (OpId id : recvs) ops_[id].race = kRacing;
  raceOps_ = std::move(recvs);
  onArrival_ = std::move(onArrival);
  ownAddressesOnly_ = false;  // never rearmed: the race is decided once
}

bool Schedule::raceArrived(OpId id, size_t bytes) {
  Op& op = ops_[id];
  if (raceWinner_ != kNoOp) {  // its cancel came too late: the caller keeps the message
    onArrival_(id, bytes, false);
    complete(id);
    return true;
  }
  raceWinner_ = id;
  for (OpId other : raceOps_) {
    if (other == id) continue;
    Op& o = ops_[other];
    o.race |= kLost;
    // A cancel may report at once (shared memory), and so re-enter onTransferError.
    if (o.atEndpoint) ctx_.endpoint->cancel(o.transfer);
  }
  if (bytes != op.size) return false;  // the count mismatch fails the schedule as usual
  onArrival_(id, bytes, true);
  complete(id);
  return true;
}

bool Schedule::raceCanceled(OpId id, Result code) {
  // A loser's cancel; truncation (InvalidUsage) is no cancel: a message larger than the
  // receive arrived and is lost, which fails the schedule.
  if ((ops_[id].race & kLost) == 0 || code == Result::InvalidUsage) return false;
  complete(id);
  return true;
}

}  // namespace sharc::algo

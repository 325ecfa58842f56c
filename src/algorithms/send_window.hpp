// The send window of a schedule, split by link class so that sends on one link never wait
// behind a backlog on the other (Schedule::advance; sharc-plan's replay plays the same rule).
#pragma once

#include <cstddef>
#include <cstdint>

namespace sharc::algo {

// Messages in flight per schedule (Schedule::advance's posting rules; sharc-plan's replay and
// the tuner's window term play the same). Bounding sends bounds what receivers may have to
// buffer as unexpected messages; receives can be posted further ahead (they only help
// matching).
/// The fewest sends a schedule keeps posted at once.
inline constexpr size_t kMinPostedSends = 32;
/// The most sends a schedule keeps posted at once, whatever its peers.
inline constexpr size_t kMaxPostedSends = 1024;
/// Sends a schedule keeps posted at once, the rest waiting, oldest in schedule order first:
/// two per rank it sends to (one on each link while the next waits behind it), within [floor,
/// kMaxPostedSends]. A fixed window let a rank's own sends to many nodes hold every place while
/// its forwards waited (a hierarchical AllGather on 64 nodes ran 1.5x longer in the replay).
/// Each receiver still gets at most two of a sender's messages ahead of it. SendWindow splits
/// it by link class.
constexpr size_t sendWindow(size_t sendPeers, size_t floor = kMinPostedSends) {
  const size_t two = 2 * sendPeers;
  return two < floor ? floor : (two < kMaxPostedSends ? two : kMaxPostedSends);
}

/// The links a send can take: to a rank of the same node, or to another node.
enum class LinkClass : uint8_t { Local = 0, Remote = 1 };

/// Sends a schedule keeps posted at once: sendWindow() of all the ranks it sends to in all,
/// of which each link class keeps two places per rank it sends to on that class; the rest is
/// shared, oldest in schedule order first. With one window for both, a hierarchical
/// AllGather's forwards to node peers, built between a step's sends across nodes, held the
/// places while those sends waited (the replay: 7 % longer at 2 GiB on 8-32 p5 nodes).
class SendWindow {
 public:
  /// Sizes the window for `localPeers` and `remotePeers` distinct ranks sent to: the whole is
  /// sendWindow() of their sum. Where the two reserves would not fit, all of it is shared.
  void size(size_t localPeers, size_t remotePeers) {
    const size_t window = sendWindow(localPeers + remotePeers);
    reserve_[0] = 2 * localPeers;
    reserve_[1] = 2 * remotePeers;
    if (reserve_[0] + reserve_[1] > window) reserve_[0] = reserve_[1] = 0;
    shared_ = window - reserve_[0] - reserve_[1];
  }
  /// Whether a send on class `c` may be posted now.
  bool admits(LinkClass c) const {
    const size_t i = index(c), other = 1 - i;
    const size_t borrowed = posted_[other] > reserve_[other] ? posted_[other] - reserve_[other] : 0;
    return posted_[i] < reserve_[i] + (shared_ > borrowed ? shared_ - borrowed : 0);
  }
  void posted(LinkClass c) { ++posted_[index(c)]; }
  void done(LinkClass c) { --posted_[index(c)]; }
  /// Sends posted and not completed, both classes.
  size_t inFlight() const { return posted_[0] + posted_[1]; }

  /// Of two queues of ready sends (Local, Remote; each a min-heap of schedule positions), the
  /// one whose oldest send goes next, or -1 where neither may post now.
  template <class Queue>
  int next(const Queue (&ready)[2]) const {
    int pick = -1;
    for (int i = 0; i < 2; ++i) {
      if (ready[i].empty() || !admits(static_cast<LinkClass>(i))) continue;
      if (pick < 0 || ready[i].top() < ready[pick].top()) pick = i;
    }
    return pick;
  }

 private:
  static size_t index(LinkClass c) { return static_cast<size_t>(c); }
  size_t reserve_[2] = {0, 0};
  size_t shared_ = 0;
  size_t posted_[2] = {0, 0};
};

}  // namespace sharc::algo

// The send window of a schedule, split by link class so that sends on one link never wait
// behind a backlog on the other (Schedule::advance; sharc-plan's replay plays the same rule).
#pragma once

#include <cstddef>
#include <cstdint>

namespace sharc::algo {

/// The links a send can take: to a rank of the same node, or to another node.
enum class LinkClass : uint8_t { Local = 0, Remote = 1 };

/// Sends a schedule keeps posted at once: sendWindow() of all the ranks it sends to in all,
/// of which each link class keeps two places per rank it sends to on that class; the rest is
/// shared, oldest in schedule order first. With one window for both, a hierarchical
/// AllGather's forwards to node peers, built between a step's sends across nodes, held the
/// places while those sends waited (the replay: 7 % longer at 2 GiB on 8-32 p5 nodes).
class SendWindow {
 public:
  /// Sizes the window for `localPeers` and `remotePeers` distinct ranks sent to; `window` is
  /// the whole (sendWindow() of their sum). Where the two reserves would not fit, all of it is
  /// shared.
  void size(size_t localPeers, size_t remotePeers, size_t window) {
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

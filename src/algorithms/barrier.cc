// Barrier: dissemination, ceil(log2 n) rounds of empty messages.
#include "algorithms.hpp"
#include "patterns.hpp"

namespace sharc::algo {

void buildBarrier(Schedule& s) {
  const auto& c = s.context();
  const int n = c.size, r = c.rank;
  Schedule::OpId prev = 0;
  for (int step = 0; (1 << step) < n; ++step) {
    const auto slot = static_cast<uint32_t>(step);
    const Schedule::OpId sd = s.send(disseminationSendPeer(r, n, step), slot, nullptr, 0);
    if (step > 0) s.after(sd, prev);
    prev = s.recv(disseminationRecvPeer(r, n, step), slot, nullptr, 0);
  }
}

}  // namespace sharc::algo

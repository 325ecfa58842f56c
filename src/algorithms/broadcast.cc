// Broadcast: a binomial tree, each chunk forwarded as soon as it arrives (pipelined).
#include <vector>

#include "algorithms.hpp"
#include "patterns.hpp"

namespace sharc::algo {

void buildBroadcast(Schedule& s, const CollArgs& a) {
  const auto [n, r, elem, block, send, recv] = Frame(s, a);
  const size_t bytes = block;
  if (bytes == 0) return;
  const bool isRoot = r == a.root;
  if (isRoot) s.copy(recv, a.send, bytes);
  if (n == 1) return;
  const int parent = binomialParent(r, n, a.root);
  int children[32];
  const int nchildren = binomialChildren(r, n, a.root, children, 32);
  const size_t chunks = chunksFor(bytes, a.chunkBytes, 1);
  for (size_t ch = 0; ch < chunks; ++ch) {
    const Range p = evenBlock(bytes, static_cast<int>(chunks), static_cast<int>(ch));
    const auto slot = static_cast<uint32_t>(ch);
    Schedule::OpId arrived = 0;
    if (!isRoot) arrived = s.recv(parent, slot, recv + p.offset, p.count);
    for (int i = 0; i < nchildren; ++i) {
      // The root sends from its send buffer so the sends need not wait for the local copy.
      const void* src = isRoot ? static_cast<const std::byte*>(a.send) + p.offset : recv + p.offset;
      const Schedule::OpId sd = s.send(children[i], slot, src, p.count);
      if (!isRoot) s.after(sd, arrived);
    }
  }
}

}  // namespace sharc::algo

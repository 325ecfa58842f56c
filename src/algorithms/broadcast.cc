// Broadcast: a binomial tree, each chunk forwarded as soon as it arrives (pipelined), beside
// a check that every rank names the same root.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "algorithms.hpp"
#include "patterns.hpp"

namespace sharc::algo {
namespace {

// Ranks that disagree on the root would otherwise part ways silently: those whose tree agrees
// return success, the others wait for data that never comes. So every rank gathers every
// rank's root (Bruck's allgather: ceil(log2 n) rounds of small messages on slots of their own)
// and fails the call on a disagreement, naming who passed which root. Cost: log2(n) tiny
// messages per Broadcast, which training loops call rarely.
void addRootCheck(Schedule& s, int n, int r, int root) {
  auto* roots = reinterpret_cast<int32_t*>(s.hostScratch(sizeof(int32_t) * static_cast<size_t>(n)));
  roots[0] = root;  // roots[k] is the root rank (r + k) % n passed
  std::vector<Schedule::OpId> received;
  uint32_t round = 0;
  for (int have = 1; have < n; have *= 2, ++round) {
    const int count = std::min(have, n - have);
    const auto slot = static_cast<uint32_t>(tag::kMaxSlots - 1 - round);
    const auto bytes = sizeof(int32_t) * static_cast<size_t>(count);
    const Schedule::OpId sd = s.send((r - have + n) % n, slot, roots, bytes);
    for (Schedule::OpId prev : received) s.after(sd, prev);  // forwards what it has received
    received.push_back(s.recv((r + have) % n, slot, roots + have, bytes));
  }
  const Schedule::OpId verify = s.check([roots, n, r] {
    std::map<int32_t, std::vector<int>> byRoot;
    for (int k = 0; k < n; ++k) byRoot[roots[k]].push_back((r + k) % n);
    if (byRoot.size() == 1) return std::string();
    std::string text = "mismatched root: ";
    for (auto& [root, ranks] : byRoot) {
      std::sort(ranks.begin(), ranks.end());
      text +=
          (text.back() == ' ' ? "" : "; ") + std::string(ranks.size() == 1 ? "rank " : "ranks ");
      for (size_t i = 0; i < ranks.size(); ++i) text += (i ? "," : "") + std::to_string(ranks[i]);
      text += " passed root " + std::to_string(root);
    }
    return text + " (every rank must pass the same root)";
  });
  for (Schedule::OpId rv : received) s.after(verify, rv);
}

}  // namespace

void buildBroadcast(Schedule& s, const CollArgs& a) {
  const auto [n, r, elem, block, send, recv] = Frame(s, a);
  if (n > 1) addRootCheck(s, n, r, a.root);
  const size_t bytes = block;
  if (bytes == 0) return;
  const bool isRoot = r == a.root;
  if (isRoot) s.copy(recv, a.send, bytes);
  if (n == 1) return;
  const int parent = binomialParent(r, n, a.root);
  int children[32];
  const int nchildren = binomialChildren(r, n, a.root, children, 32);
  // The root check keeps the top 32 slots.
  const size_t chunks = std::min(chunksFor(bytes, a.chunkBytes, 1), size_t{tag::kMaxSlots - 32});
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

#include "nic_mapping.hpp"

#include <algorithm>
#include <limits>
#include <sharc/error.hpp>
#include <string>

namespace sharc::topo {
namespace {

constexpr int kSameNuma = 1000;
constexpr int kFar = 2000;

// The NICs at the smallest PCI distance from GPU `gpu`, in index order.
std::vector<int> closestNics(const HostTopology& host, int gpu) {
  std::vector<int> best;
  int bestDistance = std::numeric_limits<int>::max();
  for (size_t n = 0; n < host.nics.size(); ++n) {
    const int d = pciDistance(host.gpus[static_cast<size_t>(gpu)], host.nics[n]);
    if (d < bestDistance) {
      bestDistance = d;
      best.clear();
    }
    if (d == bestDistance) best.push_back(static_cast<int>(n));
  }
  return best;
}

const char* reasonFor(int distance) {
  if (distance < kSameNuma) return "NIC on the GPU's PCIe switch";
  if (distance == kSameNuma) return "NIC on the GPU's NUMA node";
  return "no NIC near the GPU";
}

RankPlacement placeWithGpu(const HostTopology& host, int localRank) {
  RankPlacement p;
  p.localRank = localRank;
  const int ngpus = static_cast<int>(host.gpus.size());
  p.gpu = localRank % ngpus;
  const PciDevice& gpu = host.gpus[static_cast<size_t>(p.gpu)];
  p.numaNode = gpu.numaNode;

  const std::vector<int> closest = closestNics(host, p.gpu);
  if (closest.empty()) {
    p.reason = "no NIC on this host";
  } else {
    // The GPUs that see the same closest NICs share them out evenly, in GPU order.
    int position = 0;
    int sharers = 0;
    for (int g = 0; g < ngpus; ++g) {
      if (closestNics(host, g) != closest) continue;
      if (g == p.gpu) position = sharers;
      ++sharers;
    }
    const int m = static_cast<int>(closest.size());
    if (m >= sharers) {
      // Multi-rail: a contiguous slice of the NICs (sizes differ by at most one).
      for (int i = position * m / sharers; i < (position + 1) * m / sharers; ++i)
        p.nics.push_back(closest[static_cast<size_t>(i)]);
    } else {
      p.nics.push_back(closest[static_cast<size_t>(position * m / sharers)]);
    }
    p.reason = reasonFor(pciDistance(gpu, host.nics[static_cast<size_t>(closest.front())]));
  }
  if (!p.nics.empty()) p.cpus = host.nics[static_cast<size_t>(p.nics.front())].cpus;
  if (p.cpus.empty()) p.cpus = gpu.cpus;
  if (p.cpus.empty()) {
    if (const NumaNode* node = host.numaNode(p.numaNode)) p.cpus = node->cpus;
  }
  return p;
}

RankPlacement placeWithoutGpu(const HostTopology& host, int localRank, int localRanks) {
  RankPlacement p;
  p.localRank = localRank;
  const int nnics = static_cast<int>(host.nics.size());
  const int nnuma = static_cast<int>(host.numaNodes.size());
  if (nnuma == 0) {
    if (nnics > 0) p.nics.push_back(localRank % nnics);
    p.reason = "round-robin over NICs";
    return p;
  }
  // Contiguous blocks of ranks per NUMA node, as launchers that bind by socket place them.
  const int block = static_cast<int>(static_cast<long long>(localRank) * nnuma / localRanks);
  const NumaNode& node = host.numaNodes[static_cast<size_t>(block)];
  int indexInNode = 0;
  for (int r = 0; r < localRank; ++r)
    if (static_cast<long long>(r) * nnuma / localRanks == block) ++indexInNode;
  p.numaNode = static_cast<int>(node.osIndex);
  p.cpus = node.cpus;

  std::vector<int> candidates;
  for (int n = 0; n < nnics; ++n)
    if (host.nics[static_cast<size_t>(n)].numaNode == p.numaNode) candidates.push_back(n);
  p.reason = "round-robin over the NUMA node's NICs";
  if (candidates.empty()) {
    for (int n = 0; n < nnics; ++n) candidates.push_back(n);
    p.reason = "round-robin over all NICs (none on the NUMA node)";
  }
  if (candidates.empty()) {
    p.reason = "no NIC on this host";
  } else {
    p.nics.push_back(candidates[static_cast<size_t>(indexInNode) % candidates.size()]);
  }
  return p;
}

}  // namespace

int pciDistance(const PciDevice& a, const PciDevice& b) noexcept {
  for (size_t i = 0; i < a.pciPath.size(); ++i) {
    for (size_t j = 0; j < b.pciPath.size(); ++j) {
      if (a.pciPath[i] == b.pciPath[j]) return static_cast<int>(i + j + 2);
    }
  }
  if (a.numaNode >= 0 && a.numaNode == b.numaNode) return kSameNuma;
  return kFar;
}

RankPlacement placeRank(const HostTopology& host, int localRank, int localRanks) {
  if (localRanks < 1 || localRank < 0 || localRank >= localRanks) {
    throw Error(Result::InvalidArgument, "topology: local rank " + std::to_string(localRank) +
                                             " of " + std::to_string(localRanks) +
                                             ": expected 0 <= local rank < local ranks");
  }
  if (!host.gpus.empty()) return placeWithGpu(host, localRank);
  return placeWithoutGpu(host, localRank, localRanks);
}

std::vector<RankPlacement> placeRanks(const HostTopology& host, int localRanks) {
  std::vector<RankPlacement> out;
  for (int r = 0; r < localRanks; ++r) out.push_back(placeRank(host, r, localRanks));
  return out;
}

}  // namespace sharc::topo

// Which NIC(s) each local rank should use, and where to pin its progress thread. Pure
// functions over HostTopology: no hwloc here, so the test topologies drive them directly.
#pragma once

#include <string>
#include <vector>

#include "topology.hpp"

namespace sharc::topo {

/// One local rank's placement.
struct RankPlacement {
  int localRank = 0;
  int gpu = -1;           ///< index into HostTopology::gpus, -1 without GPUs
  std::vector<int> nics;  ///< indices into HostTopology::nics (several = multi-rail); may be empty
  int numaNode = -1;      ///< os index of the NUMA node the rank is placed on, -1 unknown
  std::string cpus;       ///< where to pin the progress thread (list string); empty: do not pin
  std::string reason;     ///< how the NICs were chosen, for logs and sharc-topo
  std::vector<std::string> nicNames;  ///< OS names of `nics` (filled by the communicator)
  /// The RDMA ones among them (EFA, InfiniBand): striped over without being asked; plain
  /// Ethernet NICs only with SHARC_NICS (one may not be cabled).
  std::vector<std::string> railNames;
};

/// PCI distance between two devices: hops from each up to their nearest common bridge
/// (2 for siblings on one switch bus), else 1000 when they share a NUMA node, else 2000.
int pciDistance(const PciDevice& a, const PciDevice& b) noexcept;

/// Places local rank `localRank` of `localRanks` on this host.
///
/// With GPUs, the rank uses GPU localRank % #GPUs and the NICs closest to it in the PCI tree;
/// GPUs whose closest NICs are the same set share them out (m NICs over k GPUs: each GPU
/// gets m/k of them, or k/m GPUs share one), so a p4d's GPU pair shares its switch's NIC and
/// a p5's GPU gets its switch's 4 NICs. Without GPUs, ranks are spread in contiguous blocks
/// over the NUMA nodes and round-robin over each node's NICs (all NICs when the node has
/// none). The progress thread goes near the first NIC, else the GPU, else the NUMA node.
/// Throws sharc::Error(InvalidArgument) unless 0 <= localRank < localRanks.
RankPlacement placeRank(const HostTopology& host, int localRank, int localRanks);

/// placeRank for every local rank 0..localRanks-1.
std::vector<RankPlacement> placeRanks(const HostTopology& host, int localRanks);

}  // namespace sharc::topo

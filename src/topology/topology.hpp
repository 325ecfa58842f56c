// The host's hardware topology as plain data, discovered with hwloc (live or from XML).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.hpp"

namespace sharc::topo {

/// What a PCI device is to sharc.
enum class DeviceKind { Other, Gpu, Nic };

/// Classifies a PCI function by class code and ids: NVIDIA 3D/VGA controllers are GPUs;
/// Ethernet (0x0200) and InfiniBand (0x0207) controllers and Amazon EFA (1d0f:efa0..efa2)
/// are NICs.
DeviceKind classifyPci(uint16_t classId, uint16_t vendorId, uint16_t deviceId) noexcept;

/// A processor package (socket).
struct Package {
  unsigned osIndex = 0;
  std::string cpus;   ///< PUs as a list string, "0-23,48-71"
  std::string model;  ///< CPUModel as hwloc reports it; may be empty
};

/// A NUMA node.
struct NumaNode {
  unsigned osIndex = 0;
  std::string cpus;          ///< PUs as a list string
  uint64_t memoryBytes = 0;  ///< local memory
  int package = -1;          ///< os index of the package holding it, -1 when not inside one
};

/// A GPU or NIC on the PCI bus.
struct PciDevice {
  std::string busId;  ///< "0000:10:1c.0"
  uint16_t classId = 0;
  uint16_t vendorId = 0;
  uint16_t deviceId = 0;
  std::string name;                    ///< model ("NVIDIA A100-SXM4-40GB") or PCI device name
  std::vector<std::string> osDevices;  ///< OS names hwloc attaches: "rdmap16s27", "eth0", "cuda0"
  int numaNode = -1;                   ///< os index of the nearest NUMA node, -1 unknown
  int package = -1;                    ///< os index of the nearest package, -1 unknown
  std::string cpus;                    ///< PUs near the device, as a list string
  /// Bridges above the device, nearest first, ending with its host bridge. PCI-to-PCI
  /// bridges are named by bus id ("0000:0f:00.0"), host bridges by their bus range
  /// ("host:0000:[0f-10]").
  std::vector<std::string> pciPath;
  /// The PCIe switch: the nearest PCI-to-PCI bridge above the device that also has another
  /// GPU or NIC below it (else the topmost PCI-to-PCI bridge, else the host bridge).
  std::string switchId;
};

/// A PCIe switch and the GPUs and NICs below it (indices into HostTopology::gpus / nics).
struct PciSwitch {
  std::string id;
  std::vector<int> gpus;
  std::vector<int> nics;
};

/// What sharc needs to know about one host.
struct HostTopology {
  std::string hostName;
  std::string source;  ///< "live" or the XML file it came from
  std::vector<Package> packages;
  std::vector<NumaNode> numaNodes;
  unsigned cores = 0;
  unsigned pus = 0;
  std::vector<PciDevice> gpus;      ///< sorted by bus id (CUDA's PCI_BUS_ID order)
  std::vector<PciDevice> nics;      ///< sorted by bus id
  std::vector<PciSwitch> switches;  ///< switches with at least one GPU or NIC, by id

  /// The topology `config` asks for: the XML file SHARC_TOPO_FILE names, else the live one.
  static HostTopology load(const core::Config& config = core::Config::get());
  /// Discovers this machine's topology, I/O devices included.
  static HostTopology loadLive();
  /// Loads an hwloc XML file; throws sharc::Error(InvalidArgument) naming `origin` (e.g.
  /// "SHARC_TOPO_FILE") and the path when the file is missing or not an hwloc topology.
  static HostTopology loadXml(const std::string& path, const std::string& origin);

  /// The NUMA node with `osIndex`, nullptr when absent.
  const NumaNode* numaNode(int osIndex) const noexcept;
};

/// Binds the calling thread to the PUs of `cpus` (a list string) that exist on this machine.
/// Returns false, after a warning, when binding is impossible; an empty list does nothing.
bool bindCurrentThreadNear(const std::string& cpus);

}  // namespace sharc::topo

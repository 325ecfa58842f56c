#include "topology.hpp"

#include <hwloc.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <sharc/error.hpp>

#include "core/log.hpp"

namespace sharc::topo {
namespace {

struct TopologyDeleter {
  void operator()(hwloc_topology* t) const noexcept { hwloc_topology_destroy(t); }
};
using TopologyPtr = std::unique_ptr<hwloc_topology, TopologyDeleter>;

struct BitmapDeleter {
  void operator()(hwloc_bitmap_s* b) const noexcept { hwloc_bitmap_free(b); }
};
using BitmapPtr = std::unique_ptr<hwloc_bitmap_s, BitmapDeleter>;

TopologyPtr newTopology() {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) {
    throw Error(Result::UnhandledSystemError,
                std::string("hwloc_topology_init failed: ") + std::strerror(errno));
  }
  return TopologyPtr(raw);
}

std::string listString(hwloc_const_bitmap_t set) {
  if (set == nullptr || hwloc_bitmap_iszero(set)) return "";
  char* text = nullptr;
  if (hwloc_bitmap_list_asprintf(&text, set) < 0 || text == nullptr) return "";
  std::string out(text);
  std::free(text);
  return out;
}

std::string info(hwloc_obj_t obj, const char* name) {
  const char* v = obj != nullptr ? hwloc_obj_get_info_by_name(obj, name) : nullptr;
  return v != nullptr ? v : "";
}

std::string hex(unsigned value, int width) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%0*x", width, value);
  return buf;
}

std::string busIdOf(const hwloc_obj_attr_u::hwloc_pcidev_attr_s& pci) {
  return hex(pci.domain, 4) + ":" + hex(pci.bus, 2) + ":" + hex(pci.dev, 2) + "." +
         hex(pci.func, 1);
}

// Host bridges have no bus id of their own: name them by the buses they lead to.
std::string bridgeId(hwloc_obj_t bridge) {
  const auto& b = bridge->attr->bridge;
  if (b.upstream_type == HWLOC_OBJ_BRIDGE_PCI) return busIdOf(b.upstream.pci);
  if (b.downstream_type == HWLOC_OBJ_BRIDGE_PCI) {
    return "host:" + hex(b.downstream.pci.domain, 4) + ":[" +
           hex(b.downstream.pci.secondary_bus, 2) + "-" + hex(b.downstream.pci.subordinate_bus, 2) +
           "]";
  }
  return "host:" + std::to_string(bridge->gp_index);
}

bool isPciToPci(const std::string& bridge) {
  return bridge.rfind("host:", 0) != 0;
}

int packageOf(hwloc_topology_t topo, hwloc_obj_t obj) {
  if (obj == nullptr) return -1;
  if (obj->type == HWLOC_OBJ_PACKAGE) return static_cast<int>(obj->os_index);
  hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_PACKAGE, obj);
  return pkg != nullptr ? static_cast<int>(pkg->os_index) : -1;
}

// Fills in everything about one PCI function except its switch.
PciDevice describe(hwloc_topology_t topo, hwloc_obj_t pci) {
  PciDevice d;
  const auto& a = pci->attr->pcidev;
  d.busId = busIdOf(a);
  d.classId = a.class_id;
  d.vendorId = a.vendor_id;
  d.deviceId = a.device_id;
  std::string model;
  for (hwloc_obj_t child = pci->io_first_child; child != nullptr; child = child->next_sibling) {
    if (child->type != HWLOC_OBJ_OS_DEVICE || child->name == nullptr) continue;
    d.osDevices.emplace_back(child->name);
    if (model.empty()) model = info(child, "GPUModel");
  }
  d.name = !model.empty() ? model : info(pci, "PCIDevice");
  if (d.name.empty()) d.name = "PCI " + hex(a.vendor_id, 4) + ":" + hex(a.device_id, 4);

  // I/O objects hang below the CPU-side object (package, NUMA group, machine) they are near.
  hwloc_obj_t near = hwloc_get_non_io_ancestor_obj(topo, pci);
  if (near != nullptr) {
    d.cpus = listString(near->cpuset);
    if (near->nodeset != nullptr && hwloc_bitmap_weight(near->nodeset) == 1) {
      d.numaNode = hwloc_bitmap_first(near->nodeset);
    }
    d.package = packageOf(topo, near);
  }
  for (hwloc_obj_t up = pci->parent; up != nullptr && up->type == HWLOC_OBJ_BRIDGE;
       up = up->parent) {
    d.pciPath.push_back(bridgeId(up));
  }
  return d;
}

// Devices some OS driver identifies although their class code is unusual (AMD GPUs are
// 0x0380, some NICs 0x0280).
DeviceKind kindFromOsDevices(hwloc_obj_t pci) {
  for (hwloc_obj_t child = pci->io_first_child; child != nullptr; child = child->next_sibling) {
    if (child->type != HWLOC_OBJ_OS_DEVICE) continue;
    switch (child->attr->osdev.type) {
      case HWLOC_OBJ_OSDEV_GPU:
      case HWLOC_OBJ_OSDEV_COPROC: return DeviceKind::Gpu;
      case HWLOC_OBJ_OSDEV_NETWORK:
      case HWLOC_OBJ_OSDEV_OPENFABRICS: return DeviceKind::Nic;
      default: break;
    }
  }
  return DeviceKind::Other;
}

void assignSwitches(HostTopology& host) {
  std::vector<PciDevice*> all;
  for (auto& d : host.gpus) all.push_back(&d);
  for (auto& d : host.nics) all.push_back(&d);
  // How many GPUs and NICs each bridge has below it.
  std::map<std::string, int> below;
  for (const PciDevice* d : all)
    for (const std::string& b : d->pciPath) ++below[b];
  for (PciDevice* d : all) {
    d->switchId.clear();
    for (const std::string& b : d->pciPath) {
      if (isPciToPci(b) && below[b] > 1) {
        d->switchId = b;
        break;
      }
    }
    if (!d->switchId.empty()) continue;
    for (auto it = d->pciPath.rbegin(); it != d->pciPath.rend(); ++it) {
      if (isPciToPci(*it)) {
        d->switchId = *it;
        break;
      }
    }
    if (d->switchId.empty()) d->switchId = d->pciPath.empty() ? "none" : d->pciPath.back();
  }
  std::map<std::string, PciSwitch> switches;
  for (size_t i = 0; i < host.gpus.size(); ++i) {
    auto& s = switches[host.gpus[i].switchId];
    s.id = host.gpus[i].switchId;
    s.gpus.push_back(static_cast<int>(i));
  }
  for (size_t i = 0; i < host.nics.size(); ++i) {
    auto& s = switches[host.nics[i].switchId];
    s.id = host.nics[i].switchId;
    s.nics.push_back(static_cast<int>(i));
  }
  host.switches.clear();
  for (auto& [id, s] : switches) host.switches.push_back(std::move(s));
}

HostTopology extract(hwloc_topology_t topo, const std::string& source) {
  HostTopology host;
  host.source = source;
  hwloc_obj_t root = hwloc_get_root_obj(topo);
  host.hostName = info(root, "HostName");
  if (host.hostName.empty() && source == "live") {
    char name[256] = {};
    if (gethostname(name, sizeof name - 1) == 0) host.hostName = name;
  }
  const int npkg = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
  for (int i = 0; i < npkg; ++i) {
    hwloc_obj_t obj = hwloc_get_obj_by_type(topo, HWLOC_OBJ_PACKAGE, static_cast<unsigned>(i));
    host.packages.push_back({obj->os_index, listString(obj->cpuset), info(obj, "CPUModel")});
  }
  const int nnuma = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < nnuma; ++i) {
    hwloc_obj_t obj = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    host.numaNodes.push_back({obj->os_index, listString(obj->cpuset),
                              obj->attr != nullptr ? obj->attr->numanode.local_memory : 0,
                              packageOf(topo, obj)});
  }
  host.cores = static_cast<unsigned>(std::max(0, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE)));
  host.pus = static_cast<unsigned>(std::max(0, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU)));

  for (hwloc_obj_t pci = hwloc_get_next_pcidev(topo, nullptr); pci != nullptr;
       pci = hwloc_get_next_pcidev(topo, pci)) {
    const auto& a = pci->attr->pcidev;
    DeviceKind kind = classifyPci(a.class_id, a.vendor_id, a.device_id);
    if (kind == DeviceKind::Other) kind = kindFromOsDevices(pci);
    if (kind == DeviceKind::Gpu) host.gpus.push_back(describe(topo, pci));
    if (kind == DeviceKind::Nic) host.nics.push_back(describe(topo, pci));
  }
  auto byBus = [](const PciDevice& x, const PciDevice& y) { return x.busId < y.busId; };
  std::sort(host.gpus.begin(), host.gpus.end(), byBus);
  std::sort(host.nics.begin(), host.nics.end(), byBus);
  assignSwitches(host);
  return host;
}

// Keeps PCI devices of the classes that matter (GPUs, NICs, storage) and the bridges above
// them, plus their OS devices: enough to see which NIC shares a switch with which GPU.
void enableIo(hwloc_topology_t topo) {
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
}

}  // namespace

DeviceKind classifyPci(uint16_t classId, uint16_t vendorId, uint16_t deviceId) noexcept {
  constexpr uint16_t kNvidia = 0x10de;
  constexpr uint16_t kAmazon = 0x1d0f;
  if (vendorId == kAmazon && deviceId >= 0xefa0 && deviceId <= 0xefa2) return DeviceKind::Nic;
  if (vendorId == kNvidia && (classId == 0x0302 || classId == 0x0300)) return DeviceKind::Gpu;
  if (classId == 0x0200 || classId == 0x0207) return DeviceKind::Nic;
  return DeviceKind::Other;
}

const NumaNode* HostTopology::numaNode(int osIndex) const noexcept {
  for (const NumaNode& n : numaNodes)
    if (static_cast<int>(n.osIndex) == osIndex) return &n;
  return nullptr;
}

HostTopology HostTopology::load(const core::Config& config) {
  if (!config.topoFile.empty()) return loadXml(config.topoFile, "SHARC_TOPO_FILE");
  return loadLive();
}

HostTopology HostTopology::loadLive() {
  TopologyPtr topo = newTopology();
  enableIo(topo.get());
  if (hwloc_topology_load(topo.get()) != 0) {
    throw Error(
        Result::UnhandledSystemError,
        std::string("hwloc could not discover this host's topology: ") + std::strerror(errno));
  }
  return extract(topo.get(), "live");
}

HostTopology HostTopology::loadXml(const std::string& path, const std::string& origin) {
  const std::string what = origin + "='" + path + "'";
  // hwloc's own message for a missing file is vague; check readability first.
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    std::fclose(f);
  } else {
    throw Error(Result::InvalidArgument, what + ": cannot read the file (" + std::strerror(errno) +
                                             "): expected an hwloc XML topology (lstopo --of xml)");
  }
  TopologyPtr topo = newTopology();
  enableIo(topo.get());
  if (hwloc_topology_set_xml(topo.get(), path.c_str()) != 0 ||
      hwloc_topology_load(topo.get()) != 0) {
    throw Error(Result::InvalidArgument,
                what + ": not a valid hwloc XML topology (expected the output of lstopo --of xml)");
  }
  if (hwloc_get_nbobjs_by_type(topo.get(), HWLOC_OBJ_PU) < 1) {
    throw Error(Result::InvalidArgument, what + ": the hwloc XML topology has no processing units");
  }
  return extract(topo.get(), path);
}

bool bindCurrentThreadNear(const std::string& cpus) {
  if (cpus.empty()) return true;
  // Binding always acts on this machine, so it uses the live topology (CPUs only), loaded
  // once per process, even when the placement came from an XML file.
  static const TopologyPtr live = []() -> TopologyPtr {
    try {
      TopologyPtr t = newTopology();
      if (hwloc_topology_load(t.get()) != 0) return nullptr;
      return t;
    } catch (const Error&) {
      return nullptr;
    }
  }();
  if (!live) {
    SHARC_WARN("topology: cannot bind the thread near CPUs " << cpus << ": hwloc failed to load");
    return false;
  }
  BitmapPtr set(hwloc_bitmap_alloc());
  if (!set || hwloc_bitmap_list_sscanf(set.get(), cpus.c_str()) != 0) {
    SHARC_WARN("topology: cannot bind the thread near CPUs '" << cpus << "': not a CPU list");
    return false;
  }
  hwloc_bitmap_and(set.get(), set.get(), hwloc_topology_get_allowed_cpuset(live.get()));
  if (hwloc_bitmap_iszero(set.get())) {
    SHARC_WARN("topology: cannot bind the thread near CPUs " << cpus
                                                             << ": none of them is usable here");
    return false;
  }
  if (hwloc_set_cpubind(live.get(), set.get(), HWLOC_CPUBIND_THREAD) != 0) {
    SHARC_WARN("topology: binding the thread to CPUs " << listString(set.get())
                                                       << " failed: " << std::strerror(errno));
    return false;
  }
  SHARC_INFO("topology: thread bound to CPUs " << listString(set.get()));
  return true;
}

}  // namespace sharc::topo

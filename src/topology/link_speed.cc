#include "link_speed.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace sharc::topo {
namespace {

// The first line of a sysfs file, "" when it cannot be read (a veth's or a down link's
// speed file fails to read with EINVAL).
std::string firstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  return line;
}

}  // namespace

double nicMbits(const std::string& name, const std::string& sysRoot) {
  if (name.empty() || name.find('/') != std::string::npos) return 0;
  // Ethernet: Mbit/s, -1 (or unreadable) when unknown. Only a device on a bus says a real
  // rate: a virtual interface (veth, bridge, tun: no `device` link) reports a made-up one
  // (a veth always 10000).
  const std::string net = sysRoot + "/class/net/" + name;
  const std::string eth =
      std::filesystem::exists(net + "/device") ? firstLine(net + "/speed") : std::string();
  if (!eth.empty()) {
    char* end = nullptr;
    const double v = std::strtod(eth.c_str(), &end);
    if (end != eth.c_str() && v > 0) return v;
  }
  // RDMA devices: "100 Gb/sec (4X EDR)".
  const std::string rate = firstLine(sysRoot + "/class/infiniband/" + name + "/ports/1/rate");
  std::istringstream s(rate);
  double gbits = 0;
  std::string unit;
  if (s >> gbits >> unit && gbits > 0 && unit.rfind("Gb/sec", 0) == 0) return gbits * 1000;
  return 0;
}

FabricLink fabricLink(const std::vector<std::string>& nics, double overrideMbits,
                      const std::string& sysRoot) {
  FabricLink link;
  link.nics = nics;
  if (nics.empty()) return link;
  if (overrideMbits > 0) {
    link.mbits = overrideMbits * static_cast<double>(nics.size());
    link.firstMbits = overrideMbits;
    link.source = "SHARC_NIC_MBITS";
    return link;
  }
  for (const std::string& nic : nics) {
    const double v = nicMbits(nic, sysRoot);
    if (v <= 0) return FabricLink{0, 0, nics, ""};  // one unknown rail: the sum is unknown
    if (link.mbits == 0) link.firstMbits = v;
    link.mbits += v;
  }
  link.source = "sysfs";
  return link;
}

}  // namespace sharc::topo

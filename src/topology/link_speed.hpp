// What a host says about the speed of its fabric links: the line rate of each NIC sharc uses
// (sysfs), summed over rails, for the tuner's default fabric bandwidth.
#pragma once

#include <string>
#include <vector>

namespace sharc::topo {

/// Line rate of one NIC in Mbit/s as the kernel reports it: /sys/class/net/NAME/speed for
/// a device on a bus (virtual interfaces such as veth report a fixed made-up rate: unknown),
/// else port 1's rate of /sys/class/infiniband/NAME (EFA, InfiniBand:
/// "100 Gb/sec ..."). 0 when unknown (no such NIC, link down, or a driver without a speed).
/// `sysRoot` replaces "/sys" (tests).
double nicMbits(const std::string& name, const std::string& sysRoot = "/sys");

/// The fabric link of one node: the NICs sharc stripes over and their summed line rate.
struct FabricLink {
  double mbits = 0;       ///< sum over `nics` (0: unknown)
  double firstMbits = 0;  ///< the first NIC's (its first rail's) rate (0: unknown)
  std::vector<std::string> nics;
  std::string source;  ///< how the rate was found, for --explain ("sysfs", "SHARC_NIC_MBITS")
};

/// The link of the NICs `nics` (SHARC_NICS, else FI_TCP_IFACE; empty: unknown). When
/// `overrideMbits` > 0 (SHARC_NIC_MBITS: an emulated cluster's shaped rate, which a veth cannot
/// report) every NIC runs at that rate instead of what sysfs says.
FabricLink fabricLink(const std::vector<std::string>& nics, double overrideMbits,
                      const std::string& sysRoot = "/sys");

}  // namespace sharc::topo

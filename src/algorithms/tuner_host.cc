// The tuner's parameters from what the host says (NIC line rates, provider) and from
// SHARC_TUNER_FILE.
#include <algorithm>
#include <cstdio>

#include "core/config.hpp"
#include "topology/link_speed.hpp"
#include "tuner.hpp"

namespace sharc::algo {
namespace {

// Payload share of a tcp link busy both ways: each direction carries 1514-byte frames of
// 1448 payload bytes (MTU 1500, timestamps) and one 66-byte ACK per two frames of the other
// direction's data: 2*1448 / (2*1514 + 66) = 0.936 of the line rate.
constexpr double kTcpGoodput = 2 * 1448.0 / (2 * 1514.0 + 66.0);

}  // namespace

// The fabric link as the host describes it.
// tcp: kTcpGoodput of the line rate (collectives keep both directions busy) and the defaults'
// alpha (tuner.cc). Over a fast link the tcp provider is limited by the copies of its progress
// thread instead: the defaults' rate, which caps it.
// efa: the line rate as is (what a transfer reaches of it is the efficiency that the backtest
// fits per instance type) and the latency aws-ofi-nccl reports to NCCL for p4d/p5, 75 us.
LinkParams hostFabric(const core::Config& config, std::string* source, double* railShare) {
  const bool efa = config.provider == "efa";
  const std::vector<std::string> nics = !config.nics.empty() ? config.nics
                                        : !config.tcpIface.empty() && !efa
                                            ? std::vector<std::string>{config.tcpIface}
                                            : std::vector<std::string>{};
  const topo::FabricLink link = topo::fabricLink(nics, config.nicMbits);
  const LinkParams builtIn = TunerParams::defaults().fabric;
  LinkParams f = builtIn;
  if (efa) f.alphaUs = 75.0;
  std::string how = "built-in";
  double share = 1.0;
  if (link.mbits > 0) {
    const auto rate = [&](double mbits) {
      const double gbps = mbits * 1e6 / 8 / 1e9 * (efa ? 1.0 : kTcpGoodput);
      return efa ? gbps : std::min(gbps, builtIn.gbps);
    };
    f.gbps = rate(link.mbits);
    // what one rail carries of it (a message cut into fewer pieces than rails)
    if (link.nics.size() > 1 && link.firstMbits > 0)
      share = std::min(1.0, rate(link.firstMbits) / f.gbps);
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s: %zu NIC(s), %.0f Mbit/s", link.source.c_str(),
                  link.nics.size(), link.mbits);
    how = buf;
  }
  if (source) *source = how;
  if (railShare) *railShare = share;
  return f;
}

TunerParams TunerParams::fromConfig(const core::Config& config) {
  TunerParams p = defaults();
  p.fabric = hostFabric(config, &p.fabricSource, &p.fabricRailShare);
  // communicator.cc: one endpoint per NIC of SHARC_NICS, striped (transport/stripe_rule.hpp)
  p.fabricRails = std::max<int>(1, static_cast<int>(config.nics.size()));
  p.fabricHalfDuplex = config.provider != "efa";
  // fabricRankShare stays 1: the NICs summed above (SHARC_NICS, else FI_TCP_IFACE) are the
  // ones every rank of this node stripes over (communicator.cc takes SHARC_NICS for every
  // rank), so one rank can drive all of that link, and the node's ranks share it (the
  // emulated cluster: each node's 1-2 NICs, all its ranks on all of them). Where sharc places
  // each rank on its own NICs instead (efa, no SHARC_NICS), hostFabric knows no NIC and the
  // built-in link stands for the rank's.
  for (const auto& [key, value] : config.tuner) {
    if (key == "local.alpha_us")
      p.local.alphaUs = value;
    else if (key == "local.gbps")
      p.local.gbps = value;
    else if (key == "fabric.alpha_us")
      p.fabric.alphaUs = value;
    else if (key == "fabric.gbps") {
      p.fabric.gbps = value;
      p.fabricSource = "SHARC_TUNER_FILE";
    } else if (key == "copy.gbps")
      p.copyGbps = value;
    else if (key == "reduce.gbps")
      p.reduceGbps = value;
    else if (key == "step_us")
      p.stepUs = value;
    else if (key == "cores")
      p.cores = static_cast<int>(value);
    else if (key == "local.cache_gbps")
      p.localCacheGbps = value;
    else if (key == "switch_us")
      p.switchUs = value;
    else if (key == "fabric.half_duplex")
      p.fabricHalfDuplex = value != 0;
    else if (key == "cma.gbps")
      p.cmaGbps = value;
    else if (key == "gpu.copy_gbps")
      p.gpuCopyGbps = value;
    else if (key == "gpu.reduce_gbps")
      p.gpuReduceGbps = value;
    else if (key == "gpu.pcie_gbps")
      p.pcieGbps = value;
  }
  return p;
}

}  // namespace sharc::algo

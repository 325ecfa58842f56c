// sharc's model of NCCL's AllGather and ReduceScatter (nccl_backtest.hpp): NCCL's choice
// among its ring and PAT, and NCCL's busbw at a point, published or modelled.
#include <algorithm>
#include <limits>

#include "nccl_backtest.hpp"
#include "nccl_model.hpp"
#include "sharc/error.hpp"

namespace sharc::plan {

using namespace ncclmodel;

NcclChoice ncclAllGatherChoice(const std::string& instance, int nodes, size_t bytes,
                               int ranksPerNode) {
  // NCCL's time model (tuning.cc, ncclTopoGetAlgoTime): its latency formula plus the bytes
  // each node link carries, (n-1)/n of them, at NCCL's bus bandwidth of the algorithm at full
  // line rate (the rates NCCL itself assumes, not the fitted ones).
  const NcclPlatform pf = platformOf(instance);
  const Cluster profile = unfittedProfile(instance);
  const int L = ranksPerNode, n = nodes * L;
  const double s = static_cast<double>(bytes) * (n - 1) / n;
  const auto time = [&](const NcclChoice& ch, double busGBps) {
    return ncclLatencyUs(ch, pf, nodes, L, false) + s / (1e3 * busGBps);
  };
  const NcclChoice ll128{"Ring", "LL128", "ring"}, simple{"Ring", "Simple", "ring"};
  double bwLL128 = profile.fabricGBps * 0.92;
  if (pf.hopper) bwLL128 = std::min(bwLL128, kChannels * kHopperRingLL128PerCh);
  NcclChoice best = time(ll128, bwLL128) < time(simple, profile.fabricGBps) ? ll128 : simple;
  double bestUs = std::min(time(ll128, bwLL128), time(simple, profile.fabricGBps));
  // PAT: one rank per node only, Simple only, at 0.75 of the ring's bus bandwidth; its
  // latency grows with log2 N across nodes (plus NCCL's linear 2.8 us a rank) where the
  // ring's grows with N.
  if (L == 1) {
    const NcclChoice pat{"PAT", "Simple", "ring"};
    if (time(pat, kPatBandwidthShare * profile.fabricGBps) < bestUs) best = pat;
  }
  return best;
}

NcclBusbw ncclBusGBps(const Cluster& cluster, int nodes, Collective coll, size_t bytes) {
  NcclBusbw out;
  const std::vector<std::string> names = builtinClusterNames();
  if (nodes < 2 || bytes == 0 || std::find(names.begin(), names.end(), cluster.name) == names.end())
    return out;
  const Cluster profile = unfittedProfile(cluster.name);
  const int L = cluster.ranksPerNode;
  if (L == profile.ranksPerNode) {
    const double published = publishedBusGBps(cluster.name, coll, nodes, bytes);
    if (published > 0) {
      out.gbps = published;
      out.published = true;
      return out;
    }
  } else if (coll == Collective::AllReduce) {
    return out;  // NCCL's AllReduce regions are the profile's ranks per node only
  }
  const double eff = fittedEfficiency(efficiencySourceOf(cluster.name));
  out.gbps = predictNccl(cluster.name, nodes, bytes, eff, coll, L).busGBps;
  out.nccl = ncclTerms(cluster.name, nodes, bytes, eff, coll, L).choice.nccl();
  return out;
}

}  // namespace sharc::plan

#include "nccl_backtest.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>

#include "nccl_model.hpp"
#include "sharc/error.hpp"

namespace sharc::plan {

using namespace ncclmodel;

namespace {
constexpr size_t kLarge = 128 * kMiB;  // the 15 % bound from here up, 30 % below

// One step of the ring for the ranks of one node (state: the step's start and end at each
// local position; every node is alike, so position 0's sender, the previous node's last rank,
// is in the same state as this node's last one).
struct RingState {
  std::vector<double> start, end;
};
template <class Prev>
RingReplay replayRing(const RingPipe& p, int width, Prev prevOf) {
  RingReplay out;
  const int n = p.nodes * p.ranksPerNode;
  const int perLoop = p.allReduce ? 2 * (n - 1) : n - 1;
  RingState st{std::vector<double>(width, 0.0), std::vector<double>(width, 0.0)};
  RingState next = st;
  const auto isNetRecv = [&](int pos) { return pos % p.ranksPerNode == 0; };
  const auto isNetSend = [&](int pos) { return pos % p.ranksPerNode == p.ranksPerNode - 1; };
  // When position `pos` has all of the chunk `c` its predecessor sent in state `s`.
  const auto arrival = [&](const RingState& s, int pos, double c, bool whole) {
    const int q = prevOf(pos);
    if (isNetRecv(pos))
      return s.start[q] + (whole ? 1.0 : p.netUnit) * c / (p.netGBps * 1e3) + p.netUs;
    return s.start[q] + (whole ? 1.0 : p.intraUnit) * c / (p.nvlGBps * 1e3) + p.intraUs;
  };
  double remaining = p.channelBytes, c = 0;
  while (remaining > 0) {
    c = std::min(p.chunkBytes, std::ceil(remaining / n));
    remaining -= c * n;
    ++out.loops;
    for (int k = 0; k < perLoop; ++k) {
      for (int pos = 0; pos < width; ++pos) {
        const double ready = k == 0 ? 0.0 : arrival(st, pos, c, false);
        next.start[pos] = std::max(st.end[pos], ready);
        next.end[pos] =
            next.start[pos] + c / ((isNetSend(pos) ? p.netGBps : p.nvlGBps) * 1e3) + p.stepUs;
      }
      std::swap(st, next);
      out.bandwidthUs += c / (p.netGBps * 1e3);
      ++out.steps;
    }
  }
  // The last chunk received whole.
  for (int pos = 0; pos < width; ++pos)
    out.replayUs = std::max(out.replayUs, std::max(st.end[pos], arrival(st, pos, c, true)));
  return out;
}

double treeCorrection(bool simple, size_t bytes) {
  const int logSize = log2Floor(static_cast<int>(std::min<size_t>(bytes >> 6, size_t{1} << 30)));
  if ((bytes >> 6) == 0 || logSize >= 23) return 1.0;
  return simple ? kTreeCorrectionSimple[logSize] : kTreeCorrectionLL128[logSize];
}

double fit(const std::string& instance) {
  std::vector<PublishedPoint> large;
  for (const auto& p : publishedPoints())
    if (p.instance == instance && p.bytes >= kLarge) large.push_back(p);
  if (large.empty())
    throw Error(Result::InvalidArgument,
                "plan: no published point of 128 MB or more to fit '" + instance +
                    "' to (expected one of the backtest's instance types)");
  // Sum of squared log errors; unimodal in the efficiency (every rate is either fixed or
  // proportional to it), so a golden-section search finds its minimum.
  const auto cost = [&](double eff) {
    double s = 0;
    for (const auto& p : large) {
      const double e = std::log(predictNccl(instance, p.nodes, p.bytes, eff).busGBps / p.busGBps);
      s += e * e;
    }
    return s;
  };
  const double phi = (std::sqrt(5.0) - 1) / 2;
  double lo = 0.05, hi = 1.0;
  double x1 = hi - phi * (hi - lo), x2 = lo + phi * (hi - lo);
  double f1 = cost(x1), f2 = cost(x2);
  while (hi - lo > 1e-4) {
    if (f1 <= f2) {  // the minimum is in [lo, x2]
      std::tie(hi, x2, f2) = std::make_tuple(x2, x1, f1);
      x1 = hi - phi * (hi - lo);
      f1 = cost(x1);
    } else {  // in [x1, hi]
      std::tie(lo, x1, f1) = std::make_tuple(x1, x2, f2);
      x2 = lo + phi * (hi - lo);
      f2 = cost(x2);
    }
  }
  // Round to 0.001 so that the figure printed is the figure used.
  return std::round((lo + hi) / 2 * 1000) / 1000;
}

std::string jsonEscape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out;
}

}  // namespace

NcclChoice ncclChoice(const std::string& instance, int nodes, size_t bytes) {
  // p5 / p5en run NCCL with aws-ofi-nccl's region tuner: the crazyguitar runs name a tuner
  // path their image lacks, so NCCL 2.27 takes the tuner built into the net plugin (the EFA
  // installer's aws-ofi-nccl; src/plugin/tuner.cc, ncclGetNetPluginLib). Read from v1.16.3's
  // src/tuner/nccl_ofi_regions.cpp, region_init_internal_p5_p5e, AllReduce, 8 ranks a node:
  //   Tree LL128 below the line (36 MiB, 32) (112 MiB, 64) (288 MiB, 128..256);
  //   Ring LL128 above it up to ~1.3 GiB at 32 ranks, 2 GiB at 64-128 ranks;
  //   Ring Simple beyond (1.5 GiB, 32) (2.5 GiB, 64) (7.5 GiB, 160);
  //   NVLSTree Simple at 128 ranks from 2 GiB to the Ring Simple line, and at 256 ranks from
  //   288 MiB to 1 GiB + 1 MiB and from 2 GiB up.
  // On 2 nodes the plugin defers to NCCL's own model (region_get_coll_info_internal_v2/v3:
  // "Skip when two nodes or lesser"); the published 2-node busbw (up to 487 GB/s) is above any
  // ring's 400 GB/s, and NCCL's model rates NVLSTree highest there: NVLSTree above 30 MiB (the
  // plugin's own 16-rank line), Tree LL128 below.
  // NVLSTree (reduce-scatter in the NVSwitch, a tree between nodes, multicast back) moves each
  // node's share across the fabric once: the tuner's Hierarchical, NVLS a property of the
  // node's links (ncclTerms). NCCL's Tree on more than 2 nodes (a chain through the node's
  // GPUs, trees between nodes, a ring's bytes per NIC): the tuner's Ring with the Tree's
  // constants; on 2 nodes one exchange between the nodes' chains: Hierarchical again.
  const int ranks = nodes * 8;
  const double mib = static_cast<double>(bytes) / kMiB;
  if (instance == "p5.48xlarge" || instance == "p5en.48xlarge") {
    if (nodes == 2)
      return mib <= 30 ? NcclChoice{"Tree", "LL128", "hierarchical"}
                       : NcclChoice{"NVLSTree", "Simple", "hierarchical"};
    // The regions at power-of-two rank counts (vertices in MiB; the edges are straight lines
    // in (bytes, ranks)). Tree LL128 below (36, 32) (112, 64) (288, 128..256) (320, 512)
    // (512, 1024) (384, 2048+).
    const double treeEdge = ranks <= 32     ? 36
                            : ranks <= 64   ? 112
                            : ranks <= 256  ? 288
                            : ranks <= 512  ? 320
                            : ranks <= 1024 ? 512
                                            : 384;
    if (mib < treeEdge) return {"Tree", "LL128", "ring"};
    // Ring Simple above the line (1.5 GiB, 32) (2.5 GiB, 64) (7.5 GiB, 160) (9 GiB, 192),
    // extended beyond 192 ranks at its last slope.
    const double simpleEdge = ranks <= 32    ? 1536
                              : ranks <= 64  ? 2560
                              : ranks <= 160 ? 2560 + 5120.0 * (ranks - 64) / 96
                                             : 7680 + 1536.0 * (ranks - 160) / 32;
    if (ranks > 256)
      return mib < simpleEdge ? NcclChoice{"NVLSTree", "Simple", "hierarchical"}
                              : NcclChoice{"Ring", "Simple", "ring"};
    // Ring LL128 up to (1 GiB, 17)-(2 GiB, 64) (1350 MiB at 32 ranks), 2 GiB at 64-128 ranks,
    // and at 256 ranks between 1025 MiB and 2 GiB; NVLSTree the rest of 256 ranks below the
    // Ring Simple line, and 128 ranks from 2 GiB to it.
    if (ranks >= 256)
      return mib > 1025 && mib <= 2048 ? NcclChoice{"Ring", "LL128", "ring"}
             : mib < simpleEdge        ? NcclChoice{"NVLSTree", "Simple", "hierarchical"}
                                       : NcclChoice{"Ring", "Simple", "ring"};
    const double ll128Edge = ranks <= 32 ? 1024 + 1024.0 * (ranks - 17) / 47 : 2048;
    if (mib <= ll128Edge) return {"Ring", "LL128", "ring"};
    if (ranks == 128 && mib < simpleEdge) return {"NVLSTree", "Simple", "hierarchical"};
    return {"Ring", "Simple", "ring"};
  }
  // p4d / p4de: no region tuner; NCCL's own model. At 2 nodes the published busbw (57-78 GB/s)
  // exceeds any ring's ceiling (50 GB/s per node): NCCL ran its Tree there. Beyond, Ring. At
  // 128 MB and more NCCL's own model picks Simple (LL128's cap of 20 GB/s per channel on
  // Ampere and LL's quarter rate lose there).
  if (nodes == 2) return {"Tree", "Simple", "hierarchical"};
  return {"Ring", "Simple", "ring"};
}

RingReplay ringReplay(const RingPipe& p) {
  const int L = p.ranksPerNode;
  return replayRing(p, L, [L](int pos) { return (pos + L - 1) % L; });
}

RingReplay ringReplayAllRanks(const RingPipe& p) {
  const int n = p.nodes * p.ranksPerNode;
  return replayRing(p, n, [n](int pos) { return (pos + n - 1) % n; });
}

NcclTerms ncclTerms(const std::string& instance, int nodes, size_t bytes, double efficiency,
                    Collective coll, int ranksPerNode) {
  if (nodes < 2)
    throw Error(Result::InvalidArgument,
                "plan: the NCCL model covers 2 nodes or more (got " + std::to_string(nodes) + ")");
  const bool allReduce = coll == Collective::AllReduce;
  const Cluster profile = unfittedProfile(instance);
  const int L = ranksPerNode > 0 ? ranksPerNode : profile.ranksPerNode, n = nodes * L;
  if (allReduce && L != profile.ranksPerNode)
    throw Error(Result::InvalidArgument,
                "plan: the NCCL AllReduce model covers " + std::to_string(profile.ranksPerNode) +
                    " ranks per node on " + instance + " (got " + std::to_string(L) + ")");
  NcclTerms t;
  t.choice = allReduce ? ncclChoice(instance, nodes, bytes)
                       : ncclAllGatherChoice(instance, nodes, bytes, L);
  const NcclPlatform pf = platformOf(instance);
  const bool simple = t.choice.protocol == "Simple";
  const std::string& a = t.choice.algorithm;
  t.formulaUs = ncclLatencyUs(t.choice, pf, nodes, L, allReduce);
  t.latencyUs = t.formulaUs;

  // The links at the rates NCCL reaches: the fitted efficiency of the line rates, the
  // protocol's payload, and (Hopper, the NCCL of the p5 runs) the channels' caps. Latencies are
  // NCCL's (latencyUs), not the tuner's per-step ones; the reduction is fused into NCCL's copy
  // kernel and overlaps the transfers (its time model has no reduction term).
  Cluster c = profile;
  c.ranksPerNode = L;
  c.efficiency = 1.0;
  c.postedSends = 0;  // NCCL's algorithms do not queue behind sharc's window of posted sends
  // NCCL's channels cross nodes on every GPU's NICs at once (aws-ofi-nccl: one 4-rail NIC
  // per GPU, 8 channels), so its ring is not held to one rank's NICs as sharc's single ring is.
  c.fabricRankShare = 1.0;
  c.railsPerRank = 1;  // and sharc's cut into pieces is not NCCL's
  c.localAlphaUs = c.fabricAlphaUs = c.stepUs = 0;
  c.reduceGBps = std::numeric_limits<double>::infinity();
  c.localGBps = efficiency * profile.localGBps;
  double fabric = efficiency * profile.fabricGBps;
  if (a == "Ring" && !simple) fabric *= 0.92;
  if (a == "Tree") fabric *= 0.92 * (simple ? 1.0 : 120.0 / 128.0) * treeCorrection(simple, bytes);
  const int idx = nodes <= 2 ? 1 : 2;
  if (pf.hopper) {
    t.channels = kChannels;
    if (a == "Ring" && !simple) t.capBusGBps = kChannels * kHopperRingLL128PerCh;
    if (a == "Tree" && !simple) t.capBusGBps = kChannels * kHopperTreeLL128PerCh[idx];
    if (a == "NVLSTree") t.capBusGBps = kChannels * kHopperNvlsTreePerCh[idx];
    if (a == "Tree") t.capBusGBps *= treeCorrection(simple, bytes);
  }
  if (a == "PAT") fabric *= kPatBandwidthShare;  // NCCL's own rating of PAT against the ring
  if (a == "NVLSTree") {
    // NVLS: the NVSwitch reduces (multimem ld_reduce) and multicasts (multimem st), and NCCL
    // pipelines the two halves, so a GPU sends and receives each byte of the vector once over
    // NVLink instead of 2(L-1)/L times as a two-level schedule that reduces on the GPU does
    // (tuning.cc: "AllReduce pipelines two operations", intraBw x 2 x nvlsEfficiency).
    c.localGBps *= (pf.hopper ? kHopperNvlsEfficiency : 1.0) * 2.0 * (L - 1) / L;
    // NCCL 2.27.7 (the version of the p5 runs) rates NVLSTree at 5/6 of its graph's bandwidth
    // (tuning.cc: "ratio *= 5.0/6.0"; the graph's bandwidth halved beyond 2 nodes, which is the
    // two-level schedule's own (N-1)/N bytes per node): 5/6 of the fabric rate.
    fabric *= 5.0 / 6.0;
  }
  // A bus-bandwidth cap in the fabric rate of the tuner's algorithm: the ring's node link
  // carries (n-1)/n of the data per pass, as busbw counts; the two-level one (N-1)/N.
  if (t.capBusGBps > 0) {
    const double perNode = t.choice.sharc == "ring"
                               ? 1.0
                               : (static_cast<double>(nodes - 1) / nodes) / (double(n - 1) / n);
    fabric = std::min(fabric, t.capBusGBps * perNode);
  }
  c.fabricGBps = fabric;
  t.cluster = c;
  if (a == "Ring") {
    // NCCL's formula charges every step's latency in full; the ring pipelines them: a step
    // waits for its data only when the chunk before it took less time to send than the
    // latencies around the ring (ringReplay). The latency left is what the replay takes beyond
    // the network link's busy time, plus NCCL's base latency, once.
    // p5: 16 channels (kHopperRingChannels) at 1/16 of the capped rate each. p4d/p4de: 8 (no
    // public count); their 2 MiB chunks at 4-6 GB/s a channel take far longer than a step's
    // latency, so the count hardly matters.
    const int ch = pf.hopper ? kHopperRingChannels : kChannels;
    const ProtoConstants k = constantsOf("Ring", simple);
    RingPipe rp;
    rp.nodes = nodes;
    rp.ranksPerNode = L;
    rp.allReduce = allReduce;
    rp.channelBytes = static_cast<double>(bytes) / ch;
    const double simpleStep = pf.buffBytes / kNcclSteps;
    rp.chunkBytes = simple ? 4 * simpleStep : kLL128ChunkBytes;
    // LL128 posts whole steps (one per chunk) to the proxy and forwards NVLink data line by
    // line; Simple posts slices, chunk / SlicePerChunk (2) (prims_simple.h sliceSize), both ways.
    rp.netUnit = simple ? 0.5 : 1.0;
    rp.intraUnit = simple ? 0.5 : 0.0;
    rp.netGBps = fabric / ch;
    rp.nvlGBps = c.localGBps / ch;
    if (pf.hopper && !simple) rp.nvlGBps = std::min(rp.nvlGBps, kHopperRingLL128PerCh);
    rp.netUs = k.netLat + pf.pluginLatUs * (simple ? 2 : 1);
    rp.intraUs = std::max(k.nvlLat, pf.netOverheadUs * (simple ? 3 : 1));
    // Each step's fitted cost on its rank's link. Not for AllReduce's Ring Simple: its 8 GiB
    // points (4 MiB chunks) meet the published curve within 0.4 % without it, while AllGather's
    // steps of the same chunk take ~9 % longer (docs/planning.md).
    rp.stepUs = !simple ? pf.ringStepUsLL128 : allReduce ? 0.0 : pf.ringStepUsSimple;
    const RingReplay r = ringReplay(rp);
    t.latencyUs = k.baseLat + std::max(0.0, r.replayUs - r.bandwidthUs);
  }
  return t;
}

Prediction predictNccl(const std::string& instance, int nodes, size_t bytes, double efficiency,
                       Collective coll, int ranksPerNode) {
  const NcclTerms t = ncclTerms(instance, nodes, bytes, efficiency, coll, ranksPerNode);
  Prediction pr = predictCollective(t.cluster, nodes, coll, bytes, t.choice.sharc);
  pr.predictedUs += t.latencyUs;
  pr.busGBps = busBandwidthGBps(coll, bytes, pr.predictedUs, pr.ranks);
  // The ceiling of the instance as published (full line rate), not of the derated links.
  Cluster profile = unfittedProfile(instance);
  profile.ranksPerNode = t.cluster.ranksPerNode;
  pr.boundUs = lowerBoundUs(profile, nodes, coll, bytes);
  pr.boundBusGBps = busBandwidthGBps(coll, bytes, pr.boundUs, pr.ranks);
  return pr;
}

double fittedEfficiency(const std::string& instance) {
  static std::mutex mu;
  static std::map<std::string, double> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(instance);
  if (it != cache.end()) return it->second;
  const double e = fit(instance);
  cache[instance] = e;
  return e;
}

double BacktestRow::bound() const {
  return bytes >= kLarge ? 0.15 : 0.30;
}

std::vector<BacktestRow> modelRows(const std::vector<PublishedPoint>& points) {
  std::vector<BacktestRow> rows;
  for (const auto& p : points) {
    // each point with its own type's fit: the p4d points are NCCL 2.9.9's, not the profile's
    const double eff = fittedEfficiency(p.instance);
    const NcclTerms t = ncclTerms(p.instance, p.nodes, p.bytes, eff, p.coll);
    const Prediction pr = predictNccl(p.instance, p.nodes, p.bytes, eff, p.coll);
    BacktestRow r;
    r.instance = p.instance;
    r.nodes = p.nodes;
    r.bytes = p.bytes;
    r.publishedGBps = p.busGBps;
    r.predictedGBps = pr.busGBps;
    r.ceilingGBps = pr.boundBusGBps;
    r.predictedUs = pr.predictedUs;
    r.efficiency = eff;
    r.latencyUs = t.latencyUs;
    r.formulaUs = t.formulaUs;
    r.capGBps = t.capBusGBps;
    r.coll = p.coll;
    r.ncclAlgorithm = t.choice.nccl();
    r.sharcAlgorithm = pr.algorithm;
    r.source = p.source;
    rows.push_back(r);
  }
  return rows;
}

std::vector<BacktestRow> runBacktest() {
  return modelRows(publishedPoints());
}

std::vector<std::string> boundViolations(const std::vector<BacktestRow>& rows) {
  std::vector<std::string> out;
  char buf[256];
  for (const auto& r : rows) {
    const char* what = nullptr;
    if (std::fabs(r.error()) > r.bound())
      what = "error beyond bound";
    else if (r.predictedGBps > r.ceilingGBps)
      what = "prediction above the physical ceiling";
    else if (r.publishedGBps > r.ceilingGBps)
      what = "published figure above the physical ceiling (profile too slow)";
    if (!what) continue;
    std::snprintf(buf, sizeof buf,
                  "%s %d nodes %zu MiB: published %.1f predicted %.1f (%+.1f %%, bound %.0f %%) "
                  "ceiling %.1f GB/s: %s",
                  r.instance.c_str(), r.nodes, r.bytes / kMiB, r.publishedGBps, r.predictedGBps,
                  100 * r.error(), 100 * r.bound(), r.ceilingGBps, what);
    out.push_back(buf);
  }
  return out;
}

std::string backtestJson(const std::vector<BacktestRow>& rows,
                         const std::vector<BacktestRow>& curve,
                         const std::vector<BacktestRow>& allGatherCurve) {
  char buf[512];
  std::map<std::string, double> effs;
  const auto array = [&](const std::vector<BacktestRow>& rs) {
    std::string out = "[";
    for (size_t i = 0; i < rs.size(); ++i) {
      const auto& r = rs[i];
      effs[r.instance] = r.efficiency;
      std::snprintf(buf, sizeof buf,
                    "%s\n  {\"instance\": \"%s\", \"collective\": \"%s\", \"nodes\": %d, "
                    "\"bytes\": %zu, "
                    "\"published_gbps\": %.2f, \"predicted_gbps\": %.2f, \"ceiling_gbps\": %.2f, "
                    "\"predicted_us\": %.1f, \"nccl_latency_us\": %.1f, \"formula_us\": %.1f, "
                    "\"cap_gbps\": %.1f, "
                    "\"error\": %.4f, \"bound\": %.2f, \"nccl_algorithm\": \"%s\", "
                    "\"sharc_algorithm\": \"%s\", ",
                    i ? "," : "", r.instance.c_str(), collectiveName(r.coll), r.nodes, r.bytes,
                    r.publishedGBps, r.predictedGBps, r.ceilingGBps, r.predictedUs, r.latencyUs,
                    r.formulaUs, r.capGBps, r.error(), r.bound(), r.ncclAlgorithm.c_str(),
                    r.sharcAlgorithm.c_str());
      out += buf;
      out += "\"source\": \"" + jsonEscape(r.source) + "\"}";
    }
    return out + "\n]";
  };
  std::string s = "{\"rows\": " + array(rows) + ", \"curve\": " + array(curve) +
                  ", \"allgather_curve\": " + array(allGatherCurve) + ", \"efficiency\": {";
  bool first = true;
  for (const auto& [inst, e] : effs) {
    std::snprintf(buf, sizeof buf, "%s\"%s\": %.3f", first ? "" : ", ", inst.c_str(), e);
    s += buf;
    first = false;
  }
  s += "}}\n";
  return s;
}

std::vector<HierVsRing> hierarchicalVsRing(const Cluster& cluster, Collective c,
                                           const std::vector<int>& nodes,
                                           const std::vector<size_t>& bytes) {
  std::vector<HierVsRing> out;
  for (int n : nodes)
    for (size_t b : bytes) {
      HierVsRing h;
      h.nodes = n;
      h.bytes = b;
      h.ringUs = predictCollective(cluster, n, c, b, "ring").predictedUs;
      h.hierarchicalUs = predictCollective(cluster, n, c, b, "hierarchical").predictedUs;
      out.push_back(h);
    }
  return out;
}

}  // namespace sharc::plan

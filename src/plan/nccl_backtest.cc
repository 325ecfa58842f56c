#include "nccl_backtest.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <mutex>

#include "sharc/error.hpp"

namespace sharc::plan {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kLarge = 128 * kMiB;  // the 15 % bound from here up, 30 % below

// Sources of the published points.
constexpr const char* kCrazyguitar =
    "github.com/crazyguitar/aws-gpu-communication-benchmark data/nccl_all_reduce.csv "
    "(p5.48xlarge, nccl-tests all_reduce_perf, out-of-place busbw)";
constexpr const char* kAwsomeP5 =
    "github.com/aws-samples/awsome-distributed-training "
    "micro-benchmarks/nccl-tests/README.md (2 x p5.48xlarge)";
constexpr const char* kAwsomeP4de =
    "github.com/aws-samples/awsome-distributed-training "
    "micro-benchmarks/nccl-tests/README.md (2 x p4de.24xlarge)";
constexpr const char* kNccl527 =
    "github.com/NVIDIA/nccl/issues/527 (named p4dn.24xlarge there: p4d.24xlarge, NCCL 2.9.9, "
    "1 GiB AllReduce; the issue reports the bandwidth as slow)";

// The whole published p5 curve: nodes x 32 MiB .. 8 GiB (nccl-tests -b 32M -e 8192M -f 2,
// out-of-place busbw), crazyguitar's data/nccl_all_reduce.csv.
std::vector<PublishedPoint> buildCurve() {
  const struct {
    int nodes;
    double gbps[9];
  } rows[] = {{2, {147.32, 207.00, 305.13, 364.46, 395.99, 435.14, 445.05, 465.81, 477.71}},
              {4, {95.38, 152.41, 229.48, 273.34, 278.41, 280.30, 347.57, 354.45, 356.99}},
              {8, {86.74, 103.85, 156.33, 232.09, 272.62, 274.47, 278.15, 351.32, 355.36}},
              {16, {74.85, 92.39, 129.20, 148.11, 223.80, 269.23, 270.91, 306.15, 356.27}},
              {32, {66.34, 83.60, 115.78, 137.99, 156.83, 220.08, 269.47, 302.81, 321.10}}};
  std::vector<PublishedPoint> pts;
  for (const auto& r : rows)
    for (int i = 0; i < 9; ++i)
      pts.push_back({"p5.48xlarge", r.nodes, (32 * kMiB) << i, r.gbps[i], kCrazyguitar});
  return pts;
}

// The backtest's points: the p5 curve at {32 MiB, 128 MiB, 1 GiB, 8 GiB} (the table of the
// project's reference note, shared/reference/efa-published-busbw.md), the other published runs.
std::vector<PublishedPoint> buildPoints() {
  std::vector<PublishedPoint> pts;
  for (const auto& p : publishedCurve())
    if (p.bytes == 32 * kMiB || p.bytes == 128 * kMiB || p.bytes == 1024 * kMiB ||
        p.bytes == 8192 * kMiB)
      pts.push_back(p);
  const auto add = [&](const char* inst, int nodes, size_t bytes, double gbps, const char* src) {
    pts.push_back({inst, nodes, bytes, gbps, src});
  };
  add("p5.48xlarge", 2, 64 * kMiB, 209.19, kAwsomeP5);
  add("p5.48xlarge", 2, 16384 * kMiB, 487.09, kAwsomeP5);
  add("p4de.24xlarge", 2, 128 * kMiB, 64.31, kAwsomeP4de);
  add("p4de.24xlarge", 2, 2048 * kMiB, 78.33, kAwsomeP4de);
  add("p4d.24xlarge", 2, 1024 * kMiB, 57.17, kNccl527);
  add("p4d.24xlarge", 3, 1024 * kMiB, 31.77, kNccl527);
  add("p4d.24xlarge", 4, 1024 * kMiB, 29.61, kNccl527);
  return pts;
}

// ---- NCCL's constants, NVIDIA/nccl src/graph/tuning.cc. The p5 points ran NCCL 2.27.7 with
// aws-ofi-nccl v1.16.3 (crazyguitar's Dockerfile at a77f70d, the commit that added the data;
// it moved to 2.28.7 five days later). The latencies, the LL128 and Tree caps, the protocol
// factors, the ring plateau and the net overhead below are the same in v2.27.7-1 and
// v2.28.7-1; NVLSTree's per-channel caps and nvlsEfficiency are 2.28.7's (2.27.7 bounds
// NVLSTree by the graph's bandwidths only): NVIDIA's later figures for the same hardware.
// Latencies in us, bandwidths in GB/s per channel.
struct ProtoConstants {
  double baseLat;  // baseLatencies[algorithm][protocol]
  double nvlLat;   // hwLatencies[NVLINK][algorithm][protocol]
  double netLat;   // hwLatencies[NET][algorithm][protocol]
};
ProtoConstants constantsOf(const std::string& algorithm, bool simple) {
  if (algorithm == "Ring")
    return simple ? ProtoConstants{8.4, 3.4, 14.0} : ProtoConstants{14.0, 1.9, 4.0};
  if (algorithm == "Tree")
    return simple ? ProtoConstants{8.4, 4.0, 14.0} : ProtoConstants{14.0, 1.25, 8.5};
  return {0.0, 25.0, 14.0};  // NVLSTree (Simple only)
}
// perChMaxRingLL128Bws, perChMaxTreeLL128Bws, perChMaxNVLSTreeBws, Hopper row, index by
// nodes (1, 2, >2). nvlsEfficiency[Hopper] = 0.85. Protocol payload: Ring LL128 x 0.92, Tree
// AllReduce x 0.92 and Tree LL128 x 120/128 (tuning.cc "Various model refinements").
constexpr double kHopperRingLL128PerCh = 36.7;
constexpr double kHopperTreeLL128PerCh[3] = {36.7, 36.7, 29.0};
constexpr double kHopperNvlsTreePerCh[3] = {0.0, 57.7, 45.5};
constexpr double kHopperNvlsEfficiency = 0.85;
// treeCorrectionFactor[protocol][log2(bytes / 64)] (LL, LL128, Simple; 64 B to 256 MB): NCCL
// scales the Tree's bandwidth by it in ncclTopoGetAlgoTime.
constexpr double kTreeCorrectionLL128[23] = {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7,  .6, .6,
                                             .6,  .6,  .6,  .6,  .8,  .9, .9, .9, .9, 1.0, 1.0};
constexpr double kTreeCorrectionSimple[23] = {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5,
                                              .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9};
// Channels: aws-ofi-nccl presents p5's 32 EFA devices to NCCL as 8 four-rail NICs, one per GPU
// (src/tuner/nccl_ofi_model.cpp, P5 platform: num_rails = 4), and its model of NCCL on p5
// counts 8 channels (include/nccl_ofi_param.h, TUNER_NUM_CHANNELS default 8).
constexpr int kChannels = 8;

// Per instance type: what NCCL sees there.
struct NcclPlatform {
  bool hopper = false;         // NCCL's compute-capability row (caps, NVLS)
  double pluginLatUs = 0;      // latency the network plugin reports: aws-ofi-nccl v1.16.3
                               // src/platform-aws.cpp `.latency` (p4d/p4de/p5 75 us, p5en 35 us)
  double netOverheadUs = 1.0;  // getNetOverhead: 1.0 Intel, 2.0 AMD CPUs (p5: AMD EPYC)
};
NcclPlatform platformOf(const std::string& instance) {
  if (instance == "p5.48xlarge") return {true, 75.0, 2.0};
  if (instance == "p5en.48xlarge") return {true, 35.0, 1.0};  // Intel Xeon (Sapphire Rapids)
  return {false, 75.0, 1.0};                                  // p4d/p4de: Intel Xeon
}

int log2Floor(int x) {
  int k = 0;
  while ((2 << k) <= x) ++k;
  return k;
}

// NCCL's latency of one call (tuning.cc, ncclTopoTuneModel and ncclTopoGetAlgoTime, one
// pipelined op): interLat = NET + plugin latency (+ the plugin latency again for Simple's
// flush); Ring: base + (s - s_net) max(NVL, net overhead (x3 Simple)) + s_net interLat with
// s = 2(n-1), s_net = 2(N-1) for AllReduce (n-1, N-1 for AllGather/ReduceScatter), AllReduce
// Simple x 1.4 ("plateau effect of ring", sm80+); Tree: base + 2((L-1) NVL + log2 N interLat);
// NVLSTree: NVL + 2 log2 N interLat.
double ncclLatencyUs(const NcclChoice& ch, const NcclPlatform& pf, int nodes, int L,
                     bool allReduce) {
  const bool simple = ch.protocol == "Simple";
  const ProtoConstants k = constantsOf(ch.algorithm, simple);
  const double inter = k.netLat + pf.pluginLatUs * (simple ? 2 : 1);
  const int n = nodes * L;
  if (ch.algorithm == "Ring") {
    const double intra = std::max(k.nvlLat, pf.netOverheadUs * (simple ? 3 : 1));
    const int times = allReduce ? 2 : 1;
    const int steps = times * (n - 1), interSteps = times * (nodes - 1);
    const double lat = k.baseLat + (steps - interSteps) * intra + interSteps * inter;
    return simple && allReduce ? lat * 1.4 : lat;  // sm80 and up (every profile here)
  }
  if (ch.algorithm == "Tree")
    return k.baseLat + 2 * ((L - 1) * k.nvlLat + log2Floor(nodes) * inter);
  return k.nvlLat + 2 * log2Floor(nodes) * inter;
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
    if (f1 <= f2) {
      hi = x2;
      x2 = x1;
      f2 = f1;
      x1 = hi - phi * (hi - lo);
      f1 = cost(x1);
    } else {
      lo = x1;
      x1 = x2;
      f1 = f2;
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

const std::vector<PublishedPoint>& publishedCurve() {
  static const std::vector<PublishedPoint> pts = buildCurve();
  return pts;
}

const std::vector<PublishedPoint>& publishedPoints() {
  static const std::vector<PublishedPoint> pts = buildPoints();
  return pts;
}

NcclChoice ncclChoice(const std::string& instance, int nodes, size_t bytes) {
  // p5 / p5en run NCCL with aws-ofi-nccl's region tuner (the crazyguitar runs set
  // NCCL_TUNER_PLUGIN=libnccl-ofi-tuner.so; aws-ofi-nccl v1.16.3): src/tuner/nccl_ofi_regions.cpp,
  // region_init_internal_p5_p5e, AllReduce with 8 ranks per node, regions over (bytes, ranks):
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
  // node's share across the fabric once: the tuner's Hierarchical, with NVLS as a property of
  // the node's links (ncclTerms). NCCL's Tree on more than 2 nodes pipelines a chain through
  // the node's 8 GPUs and trees between nodes, with a ring's bytes per NIC: the tuner's Ring
  // with the Tree's constants. A tree on 2 nodes is one exchange between the two nodes' chains:
  // Hierarchical again.
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

namespace {

// NCCL's own choice for AllGather / ReduceScatter with 8 GPUs per node on several nodes: Ring
// (NVLS and CollNet need CollNet support there, PAT one GPU per node; the plugin's p5 regions
// cover AllReduce only), protocol by NCCL's time model at full rate: LL128 (cap) or Simple. LL
// (llMaxBws 19-22.5 GB/s on AMD hosts) only wins below the sizes sharc-plan tables.
NcclChoice ncclRingChoice(const std::string& instance, int nodes, size_t bytes) {
  const NcclPlatform pf = platformOf(instance);
  const Cluster profile = unfittedProfile(instance);
  const int L = profile.ranksPerNode, n = nodes * L;
  const double s = static_cast<double>(bytes) * (n - 1) / n;  // bytes through each node link
  const NcclChoice ll128{"Ring", "LL128", "ring"}, simple{"Ring", "Simple", "ring"};
  double bwLL128 = profile.fabricGBps * 0.92;
  if (pf.hopper) bwLL128 = std::min(bwLL128, kChannels * kHopperRingLL128PerCh);
  const double tLL128 = ncclLatencyUs(ll128, pf, nodes, L, false) + s / (1e3 * bwLL128);
  const double tSimple =
      ncclLatencyUs(simple, pf, nodes, L, false) + s / (1e3 * profile.fabricGBps);
  return tLL128 < tSimple ? ll128 : simple;
}

}  // namespace

NcclTerms ncclTerms(const std::string& instance, int nodes, size_t bytes, double efficiency,
                    Collective coll) {
  if (nodes < 2)
    throw Error(Result::InvalidArgument,
                "plan: the NCCL model covers 2 nodes or more (got " + std::to_string(nodes) + ")");
  NcclTerms t;
  const bool allReduce = coll == Collective::AllReduce;
  t.choice =
      allReduce ? ncclChoice(instance, nodes, bytes) : ncclRingChoice(instance, nodes, bytes);
  const NcclPlatform pf = platformOf(instance);
  const Cluster profile = unfittedProfile(instance);
  const int L = profile.ranksPerNode, n = nodes * L;
  const bool simple = t.choice.protocol == "Simple";
  const std::string& a = t.choice.algorithm;
  t.latencyUs = ncclLatencyUs(t.choice, pf, nodes, L, allReduce);

  // The links at the rates NCCL reaches: the fitted efficiency of the line rates, the
  // protocol's payload, and (Hopper, the NCCL of the p5 runs) the channels' caps. Latencies are
  // NCCL's (latencyUs), not the tuner's per-step ones; the reduction is fused into NCCL's copy
  // kernel and overlaps the transfers (its time model has no reduction term).
  Cluster c = profile;
  c.efficiency = 1.0;
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
  if (a == "NVLSTree") {
    // NVLS: the NVSwitch reduces (multimem ld_reduce) and multicasts (multimem st), and NCCL
    // pipelines the two halves, so a GPU sends and receives each byte of the vector once over
    // NVLink instead of 2(L-1)/L times as a two-level schedule that reduces on the GPU does
    // (tuning.cc: "AllReduce pipelines two operations", intraBw x 2 x nvlsEfficiency).
    c.localGBps *= (pf.hopper ? kHopperNvlsEfficiency : 1.0) * 2.0 * (L - 1) / L;
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
  return t;
}

Prediction predictNccl(const std::string& instance, int nodes, size_t bytes, double efficiency,
                       Collective coll) {
  const NcclTerms t = ncclTerms(instance, nodes, bytes, efficiency, coll);
  Prediction pr = predictCollective(t.cluster, nodes, coll, bytes, t.choice.sharc);
  pr.predictedUs += t.latencyUs;
  pr.busGBps = busBandwidthGBps(coll, bytes, pr.predictedUs, pr.ranks);
  // The ceiling of the instance as published (full line rate), not of the derated links.
  const Cluster profile = unfittedProfile(instance);
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
    const double eff = fittedEfficiency(efficiencySourceOf(p.instance));
    const NcclTerms t = ncclTerms(p.instance, p.nodes, p.bytes, eff);
    const Prediction pr = predictNccl(p.instance, p.nodes, p.bytes, eff);
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
    r.capGBps = t.capBusGBps;
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
                         const std::vector<BacktestRow>& curve) {
  char buf[512];
  std::map<std::string, double> effs;
  const auto array = [&](const std::vector<BacktestRow>& rs) {
    std::string out = "[";
    for (size_t i = 0; i < rs.size(); ++i) {
      const auto& r = rs[i];
      effs[r.instance] = r.efficiency;
      std::snprintf(buf, sizeof buf,
                    "%s\n  {\"instance\": \"%s\", \"nodes\": %d, \"bytes\": %zu, "
                    "\"published_gbps\": %.2f, \"predicted_gbps\": %.2f, \"ceiling_gbps\": %.2f, "
                    "\"predicted_us\": %.1f, \"nccl_latency_us\": %.1f, \"cap_gbps\": %.1f, "
                    "\"error\": %.4f, \"bound\": %.2f, \"nccl_algorithm\": \"%s\", "
                    "\"sharc_algorithm\": \"%s\", ",
                    i ? "," : "", r.instance.c_str(), r.nodes, r.bytes, r.publishedGBps,
                    r.predictedGBps, r.ceilingGBps, r.predictedUs, r.latencyUs, r.capGBps,
                    r.error(), r.bound(), r.ncclAlgorithm.c_str(), r.sharcAlgorithm.c_str());
      out += buf;
      out += "\"source\": \"" + jsonEscape(r.source) + "\"}";
    }
    return out + "\n]";
  };
  std::string s =
      "{\"rows\": " + array(rows) + ", \"curve\": " + array(curve) + ", \"efficiency\": {";
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

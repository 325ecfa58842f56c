// NCCL's constants and latency formula as the backtest models them (nccl_backtest.hpp): one
// definition each, shared by the AllReduce model (nccl_backtest.cc) and the AllGather /
// ReduceScatter one (nccl_backtest_allgather.cc). Internal to src/plan.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>

#include "nccl_backtest.hpp"

namespace sharc::plan::ncclmodel {

constexpr size_t kMiB = size_t{1} << 20;

// ---- NCCL's constants, NVIDIA/nccl src/graph/tuning.cc. The p5 points ran NCCL 2.27.7 with
// the EFA installer 1.43.2's aws-ofi-nccl (crazyguitar's Dockerfile at a77f70d, the commit that
// added the data; its AWS_OFI_NCCL_VERSION=v1.16.3 is declared, not used). The latencies, the
// LL128 and Tree caps, the protocol factors, the ring plateau and the net overhead below are
// the same in v2.27.7-1 and v2.28.7-1; NVLSTree's 5/6 bandwidth ratio is 2.27.7's, its
// per-channel caps and nvlsEfficiency 2.28.7's (NVIDIA's later figures for the same hardware).
// Latencies in us, bandwidths in GB/s per channel.
struct ProtoConstants {
  double baseLat;  // baseLatencies[algorithm][protocol]
  double nvlLat;   // hwLatencies[NVLINK][algorithm][protocol]
  double netLat;   // hwLatencies[NET][algorithm][protocol]
};
inline ProtoConstants constantsOf(const std::string& algorithm, bool simple) {
  if (algorithm == "Ring")
    return simple ? ProtoConstants{8.4, 3.4, 14.0} : ProtoConstants{14.0, 1.9, 4.0};
  if (algorithm == "Tree")
    return simple ? ProtoConstants{8.4, 4.0, 14.0} : ProtoConstants{14.0, 1.25, 8.5};
  if (algorithm == "PAT") return {8.0, 0.0, 14.0};  // Simple only; see ncclLatencyUs
  return {0.0, 25.0, 14.0};                         // NVLSTree (Simple only)
}
// PAT (2.23+, AllGather and ReduceScatter): ncclPatEnable enables it only where nNodes ==
// nRanks (one GPU per node), SM60 and up, no network device offload; the tuner then weighs it
// for Simple only, at 0.75 of the ring's bus bandwidth (shared/reference
// efa-published-busbw.md, "NCCL's algorithms and constants").
constexpr double kPatBandwidthShare = 0.75;
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
// counts 8 channels (include/nccl_ofi_param.h, TUNER_NUM_CHANNELS default 8): the ring graph's
// channels, which NCCL's caps count (tuning.cc: graphs[a]->nChannels x perChMax...).
constexpr int kChannels = 8;
// The channels a collective runs on are comm->nChannels, more than the graph's: ncclTopoPostset
// doubles them ("nChannels*2", src/graph/connect.cc) and raises them to the NVLS channels where
// NVLS is on (connect.cc "Support maximal channel usage"; 16 on Hopper, src/transport/nvls.cc
// NVLS_NCHANNELS_SM90); enqueue.cc spreads a ring's bytes over all of them (topoGetAlgoInfo:
// nc = comm->nChannels, cut only below nc x 640 threads x 8 B for LL128). p5 (NVLS on, 8 graph
// channels): 16. p4d/p4de: no public count; their rings are bandwidth-bound at these sizes.
constexpr int kHopperRingChannels = 16;

// Per instance type: what NCCL sees there.
struct NcclPlatform {
  bool hopper = false;         // NCCL's compute-capability row (caps, NVLS)
  double pluginLatUs = 0;      // latency the network plugin reports: aws-ofi-nccl (v1.16.3)
                               // src/platform-aws.cpp `.latency` (p4d/p4de/p5 75 us, p5en 35 us)
  double netOverheadUs = 1.0;  // getNetOverhead: 1.0 Intel, 2.0 AMD CPUs (p5: AMD EPYC)
  double buffBytes = 4 << 20;  // Simple's buffer, NCCL_BUFFSIZE (NCCL's default 4 MiB; the p5
                               // runs set 8 MiB: crazyguitar's k8s/nccl_all_reduce_perf.yaml)
  // A ring step's cost beyond its chunk's transfer, per rank (LL128, Simple): the two fitted
  // constants of the ring replay (RingPipe::stepUs). Fitted on the published p5 AllGather curve
  // (least squares of the log error over its 35 points, 0.5 us grid; docs/planning.md); p5en
  // takes p5's. p4d/p4de: none published at chunk sizes where it shows, 0.
  double ringStepUsLL128 = 0;
  double ringStepUsSimple = 0;
};
constexpr double kP5RingStepUsLL128 = 3.0;
constexpr double kP5RingStepUsSimple = 19.5;
inline NcclPlatform platformOf(const std::string& instance) {
  if (instance == "p5.48xlarge")
    return {true, 75.0, 2.0, 8 << 20, kP5RingStepUsLL128, kP5RingStepUsSimple};
  if (instance == "p5en.48xlarge")  // Intel Xeon (SPR)
    return {true, 35.0, 1.0, 8 << 20, kP5RingStepUsLL128, kP5RingStepUsSimple};
  return {false, 75.0, 1.0, 4 << 20};  // p4d/p4de: Intel Xeon
}

// NCCL's ring chunks (enqueue.cc calcCollChunking; device.h, init.cc, collectives.h of
// v2.27.7-1): NCCL_STEPS = 8 steps per buffer. LL128: one step per chunk, the buffer
// 120 x 640 x 8 x 8 B (DEFAULT_LL128_BUFFSIZE) so 614,400 B a step, 15/16 of it data. Simple:
// ALLREDUCE_CHUNKSTEPS = 4 steps per chunk, forwarded in slices of ALLREDUCE_SLICESTEPS = 2.
constexpr int kNcclSteps = 8;
constexpr double kLL128StepBytes = 120.0 * 640 * 8 * 8 / kNcclSteps;
constexpr double kLL128ChunkBytes = kLL128StepBytes / 16 * 15;

inline int log2Floor(int x) {
  int k = 0;
  while ((2 << k) <= x) ++k;
  return k;
}

// NCCL's latency of one call (tuning.cc, ncclTopoTuneModel and ncclTopoGetAlgoTime, one
// pipelined op): interLat = NET + plugin latency (+ the plugin latency again for Simple's
// flush); Ring: base + (s - s_net) max(NVL, net overhead (x3 Simple)) + s_net interLat with
// s = 2(n-1), s_net = 2(N-1) for AllReduce (n-1, N-1 for AllGather/ReduceScatter), AllReduce
// Simple x 1.4 ("plateau effect of ring", sm80+); Tree: base + 2((L-1) NVL + log2 N interLat);
// NVLSTree: NVL + 2 log2 N interLat; PAT (one rank per node): 8 + log2 N interLat / 3.5 +
// 2.8 n (shared/reference efa-published-busbw.md; interLat with the Simple ring's NET latency).
inline double ncclLatencyUs(const NcclChoice& ch, const NcclPlatform& pf, int nodes, int L,
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
  if (ch.algorithm == "PAT") return k.baseLat + log2Floor(nodes) * inter / 3.5 + 2.8 * n;
  return k.nvlLat + 2 * log2Floor(nodes) * inter;
}

}  // namespace sharc::plan::ncclmodel

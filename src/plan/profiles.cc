// The built-in instance profiles of include/sharc/plan.hpp: published figures (each with its
// source below) and the efficiency fitted to published NCCL runs (nccl_backtest.cc: the share
// of the NIC and NVLink line rates that sharc's model of NCCL needs to match them).
// Rates are 1e9 bytes/s in one direction.
//
// Sources:
//  [p5]    aws.amazon.com/ec2/instance-types/p5/ : p5.48xlarge, 8 NVIDIA H100 80 GB HBM3,
//          3,200 Gbps EFAv2, 900 GB/s NVSwitch GPU-to-GPU; 32 EFA devices
//          (docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html, "EFA
//          configuration for P5": 32 network cards).
//  [p5en]  same page: p5en.48xlarge, 8 NVIDIA H200 141 GB HBM3e, 3,200 Gbps EFAv3, 900 GB/s
//          NVSwitch; 16 EFA devices of 200 Gb/s (torchx named_resources_aws.py
//          aws_p5en_48xlarge: EFA_DEVICE 16).
//  [p4d]   aws.amazon.com/blogs/compute/amazon-ec2-p4d-instances-deep-dive/ : 8 A100 40 GB,
//          NVSwitch, 400 Gbps EFA (4 x 100 Gb/s); p4de.24xlarge the same with A100 80 GB.
//  [H100]  NVIDIA H100 Tensor Core GPU datasheet, SXM5: HBM3 3.35 TB/s, NVLink 900 GB/s
//          (18 NVLink4 links, 450 GB/s each way).
//  [H200]  NVIDIA H200 datasheet: 141 GB HBM3e, 4.8 TB/s, NVLink 900 GB/s; MLCommons
//          inference v4.1 H200-SXM-141GBx8 system description: "18x 4th Gen NVLink, 900GB/s".
//  [A100]  NVIDIA A100 datasheet: 40 GB HBM2 1,555 GB/s; 80 GB HBM2e 2,039 GB/s; NVLink3
//          600 GB/s (12 links, 300 GB/s each way).
//  [NCCL]  NVIDIA/nccl src/graph/tuning.cc (2.30), hwLat per hop of a ring, LL / LL128 /
//          Simple: NVLink 0.6 / 1.9 / 3.4 us, network 2.7 / 4.0 / 14.0 us.
//  [PCIe]  the GPUs' PCIe links (the staged data path): A100 PCIe Gen4 x16, H100 and H200
//          PCIe Gen5 x16 (the datasheets above); effective rates in
//          src/algorithms/cost_model.hpp (kPcieGen4x16GBps, kPcieGen5x16GBps).
//  [ofi]   aws/aws-ofi-nccl v1.16.3 src/platform-aws.cpp: EFA latency the plugin reports to
//          NCCL (75 us p4d/p5, 35 us p5en), which NCCL's tuning.cc adds per network hop.
//
// Copy and reduce rates follow from the HBM bandwidth: a copy reads and writes every byte
// (HBM / 2), a two-input reduction reads two bytes and writes one per input byte (HBM / 3).
#include <algorithm>

#include "algorithms/cost_model.hpp"
#include "nccl_backtest.hpp"
#include "sharc/error.hpp"

namespace sharc::plan {
namespace {

constexpr double kGbitToGBps = 1.0 / 8.0;

// Latencies of the tuner's steps for sharc's own algorithms on these nodes (alpha-beta per
// step, cost_model.hpp "One step"): a pipelined GPU step costs far less than a network round
// trip, so NCCL's per-hop LL128 constants [NCCL] (NVLink 1.9 us, network 4.0 us), without the
// plugin's 75 us [ofi], which is a ranking bias NCCL adds per node hop (the backtest's model of
// NCCL adds it where NCCL does: nccl_backtest.cc). The step overhead (flag polling between
// chunks of a GPU kernel's loop) is an assumption, not a published figure: 0.5 us. The
// backtest does not test these three (its model of NCCL replaces them with NCCL's latency
// formula), so the latency-bound columns of docs/planning.md "Where sharc's hierarchical
// algorithms should beat NCCL" rest on them.
constexpr double kNvlinkAlphaUs = 1.9;
constexpr double kEfaAlphaUs = 4.0;
constexpr double kGpuStepUs = 0.5;

Cluster gpuNode(const std::string& name, const std::string& source, double memoryGB,
                double nvlinkGBps, int nics, double gbitPerNic, double hbmGBps, double pcieGBps) {
  Cluster c;
  c.name = name;
  c.source = source;
  c.ranksPerNode = 8;
  c.memoryBytes = memoryGB * 1e9;
  c.localAlphaUs = kNvlinkAlphaUs;
  c.localGBps = nvlinkGBps;
  c.fabricAlphaUs = kEfaAlphaUs;
  c.fabricGBps = nics * gbitPerNic * kGbitToGBps;
  c.rails = nics;
  c.copyGBps = hbmGBps / 2;
  c.reduceGBps = hbmGBps / 3;
  c.stepUs = kGpuStepUs;
  c.efficiency = 1.0;
  c.pcieGBps = pcieGBps;
  return c;
}

}  // namespace

Cluster unfittedProfile(const std::string& name) {
  // p5.48xlarge [p5][H100]: 32 x 100 Gb/s = 400 GB/s per node; 450 GB/s NVLink per GPU.
  if (name == "p5.48xlarge")
    return gpuNode(name, "AWS EC2 P5 page; NVIDIA H100 SXM5 datasheet", 80, 450, 32, 100, 3350,
                   algo::model::kPcieGen5x16GBps);
  // p5en.48xlarge [p5en][H200]: 16 x 200 Gb/s = 400 GB/s per node.
  if (name == "p5en.48xlarge")
    return gpuNode(name, "AWS EC2 P5 page (p5en); NVIDIA H200 datasheet", 141, 450, 16, 200, 4800,
                   algo::model::kPcieGen5x16GBps);
  // p4d.24xlarge [p4d][A100]: 4 x 100 Gb/s = 50 GB/s per node; 300 GB/s NVLink per GPU.
  if (name == "p4d.24xlarge")
    return gpuNode(name, "AWS P4d deep dive (compute blog); NVIDIA A100 40GB datasheet", 40, 300, 4,
                   100, 1555, algo::model::kPcieGen4x16GBps);
  // p4de.24xlarge: p4d with A100 80 GB HBM2e [A100] (backtest only: the 2 x p4de point).
  if (name == "p4de.24xlarge")
    return gpuNode(name, "AWS P4de (p4d with A100 80GB); NVIDIA A100 80GB datasheet", 80, 300, 4,
                   100, 2039, algo::model::kPcieGen4x16GBps);
  std::string valid;
  for (const auto& n : builtinClusterNames()) valid += (valid.empty() ? "" : ", ") + n;
  throw Error(Result::InvalidArgument, "plan: unknown instance profile '" + name +
                                           "' (expected one of " + valid +
                                           ", or p4de.24xlarge for the backtest)");
}

std::string efficiencySourceOf(const std::string& instance) {
  // No public multi-node nccl-tests on p5en was found: same NCCL, NVSwitch and 3,200 Gb/s per
  // node as p5, so it takes p5's efficiency (docs/planning.md "Against published NCCL runs").
  if (instance == "p5en.48xlarge") return "p5.48xlarge";
  // p4d's only points are one 2021 report (NCCL 2.9.9) that calls itself slow; p4de has the
  // same A100s, NVSwitch and 4 x 100 Gb EFA, measured with a current NCCL: p4d takes its fit.
  if (instance == "p4d.24xlarge") return "p4de.24xlarge";
  return instance;
}

std::vector<std::string> builtinClusterNames() {
  return {"p4d.24xlarge", "p5.48xlarge", "p5en.48xlarge"};
}

Cluster builtinCluster(const std::string& name) {
  const auto names = builtinClusterNames();
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    std::string valid;
    for (const auto& n : names) valid += (valid.empty() ? "" : ", ") + n;
    throw Error(Result::InvalidArgument,
                "plan: unknown cluster profile '" + name + "' (expected one of " + valid + ")");
  }
  Cluster c = unfittedProfile(name);
  c.efficiency = fittedEfficiency(efficiencySourceOf(name));
  return c;
}

}  // namespace sharc::plan

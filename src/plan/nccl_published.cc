// The published NCCL runs the backtest compares with (nccl_backtest.hpp), with their sources.
#include "nccl_backtest.hpp"

namespace sharc::plan {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

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

// The AllGather curve of the same runs (crazyguitar's data/nccl_all_gather.csv: nodes x 32 MiB
// .. 2 GiB, nccl-tests all_gather_perf -b 32M -e 2048M -f 2, out-of-place busbw).
constexpr const char* kCrazyguitarAG =
    "github.com/crazyguitar/aws-gpu-communication-benchmark data/nccl_all_gather.csv "
    "(p5.48xlarge, nccl-tests all_gather_perf, out-of-place busbw)";
std::vector<PublishedPoint> buildAllGatherCurve() {
  const struct {
    int nodes;
    double gbps[7];
  } rows[] = {{2, {131.30, 200.43, 234.54, 215.58, 275.52, 322.00, 328.58}},
              {4, {83.56, 138.94, 211.73, 253.36, 220.57, 288.53, 330.92}},
              {8, {46.29, 86.80, 143.66, 215.43, 261.26, 224.47, 293.71}},
              {16, {24.90, 46.99, 87.68, 144.05, 219.97, 261.88, 265.15}},
              {32, {12.38, 24.96, 45.65, 86.30, 146.38, 222.40, 262.77}}};
  std::vector<PublishedPoint> pts;
  for (const auto& r : rows)
    for (int i = 0; i < 7; ++i)
      pts.push_back({"p5.48xlarge", r.nodes, (32 * kMiB) << i, r.gbps[i], kCrazyguitarAG,
                     Collective::AllGather});
  return pts;
}

// The backtest's points: the p5 curve at {32 MiB, 128 MiB, 1 GiB, 8 GiB} (sources in
// docs/planning.md), the other published runs.
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

}  // namespace

const std::vector<PublishedPoint>& publishedCurve() {
  static const std::vector<PublishedPoint> pts = buildCurve();
  return pts;
}

const std::vector<PublishedPoint>& publishedAllGatherCurve() {
  static const std::vector<PublishedPoint> pts = buildAllGatherCurve();
  return pts;
}

const std::vector<PublishedPoint>& publishedPoints() {
  static const std::vector<PublishedPoint> pts = buildPoints();
  return pts;
}

double publishedBusGBps(const std::string& instance, Collective coll, int nodes, size_t bytes) {
  for (const auto* list : {&publishedAllGatherCurve(), &publishedCurve(), &publishedPoints()})
    for (const PublishedPoint& p : *list)
      if (p.instance == instance && p.coll == coll && p.nodes == nodes && p.bytes == bytes)
        return p.busGBps;
  return 0;
}

}  // namespace sharc::plan

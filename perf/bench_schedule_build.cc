// Microbenchmark of building one rank's schedule, which the engine does on every call: the
// two-level schedules with a Bruck across nodes (hierarchical_bruck) at p5's 8 ranks per
// node, as the replay builds them (plan::SimBuilder: the engine's builders over reserved
// memory). The figure to compare is the build's time against the call's (sharc-plan).
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>

#include "algorithms/tuner.hpp"
#include "plan/cluster_model.hpp"
#include "plan/schedule_ops.hpp"

namespace {

using sharc::plan::Collective;

// Args: collective (0 AllGather, 1 ReduceScatter), nodes, size in MiB (AllGather output,
// ReduceScatter input), chunk in KiB.
void BM_BuildHierarchicalBruck(benchmark::State& state) {
  const Collective c = state.range(0) == 0 ? Collective::AllGather : Collective::ReduceScatter;
  const sharc::algo::NodeMap map = sharc::plan::nodeMap(static_cast<int>(state.range(1)), 8);
  const size_t bytes = static_cast<size_t>(state.range(2)) << 20;
  const size_t chunk = static_cast<size_t>(state.range(3)) << 10;
  sharc::plan::SimBuilder builder(map, c, bytes, sharc::algo::Algorithm::HierarchicalBruck, chunk);
  // One build first: a job's calls come after others. (Where glibc trims the heap a build
  // has freed, the next one pays page faults again: GLIBC_TUNABLES=glibc.malloc.trim_threshold
  // set high leaves them out, docs/planning.md "Limits".)
  size_t ops = builder.build(0);
  for (auto _ : state) {
    ops = builder.build(0);
    benchmark::DoNotOptimize(ops);
  }
  state.counters["ops"] = static_cast<double>(ops);
}

BENCHMARK(BM_BuildHierarchicalBruck)
    ->ArgNames({"coll", "nodes", "MiB", "chunkKiB"})
    ->ArgsProduct({{0, 1}, {64, 256, 1024}, {256, 2048}, {256}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

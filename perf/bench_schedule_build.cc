// Microbenchmark of building one rank's schedule, which the engine does on the first call of
// each shape, and of rearming it, which it does on every later call (ScheduleCache): the
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
// ReduceScatter input), chunk in KiB: the node map and a builder of that case.
struct Case {
  explicit Case(const benchmark::State& state)
      : map(sharc::plan::nodeMap(static_cast<int>(state.range(1)), 8)),
        builder(map, state.range(0) == 0 ? Collective::AllGather : Collective::ReduceScatter,
                static_cast<size_t>(state.range(2)) << 20,
                sharc::algo::Algorithm::HierarchicalBruck,
                static_cast<size_t>(state.range(3)) << 10) {}
  const sharc::algo::NodeMap map;
  sharc::plan::SimBuilder builder;
};

void BM_BuildHierarchicalBruck(benchmark::State& state) {
  Case c(state);
  sharc::plan::SimBuilder& builder = c.builder;
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

// The same schedules rearmed (Schedule::rearm: states, dependency counts and addresses
// reset), as a call of a shape called before does instead of building. (The engine's rearm
// also takes the scratch back from the pool: one best-fit search per scratch buffer.)
void BM_RearmHierarchicalBruck(benchmark::State& state) {
  Case c(state);
  const auto schedule = c.builder.schedule(0);
  if (!schedule->prepareReuse()) {
    state.SkipWithError("the schedule cannot be rearmed");
    return;
  }
  const auto& ctx = schedule->context();
  // Two places for the call's buffers (inside the reserved memory), taken in turn, so that
  // every address moves.
  const auto* send = static_cast<const std::byte*>(ctx.send);
  const auto* recv = static_cast<const std::byte*>(ctx.recv);
  uint64_t seq = 1;
  for (auto _ : state) {
    const size_t at = seq % 2 == 0 ? 0 : 4096;
    const bool rearmed = schedule->rearm(++seq, ctx.deadline, send + at, recv + at);
    if (!rearmed) {
      state.SkipWithError("the schedule could not be rearmed");
      break;
    }
  }
  state.counters["ops"] = static_cast<double>(schedule->opCount());
}

BENCHMARK(BM_BuildHierarchicalBruck)
    ->ArgNames({"coll", "nodes", "MiB", "chunkKiB"})
    ->ArgsProduct({{0, 1}, {64, 256, 1024}, {256, 2048}, {256}})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_RearmHierarchicalBruck)
    ->ArgNames({"coll", "nodes", "MiB", "chunkKiB"})
    ->ArgsProduct({{0, 1}, {64, 256, 1024}, {256, 2048}, {256}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

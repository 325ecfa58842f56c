// What the always-on flight recorder costs per call: the stores and clock reads that
// CommunicatorImpl::start and Engine::progressLocked make for every collective (a fresh entry,
// its fields, the start time; then finish() with the end time), on a ring that is filling
// and on one that is full (the steady state of a training job). perf/flight_recorder_cost.sh
// sets this against a 1-element AllReduce measured in the same run.
#include <benchmark/benchmark.h>

#include "algorithms/algorithms.hpp"
#include "runtime/flight_recorder.hpp"

namespace {

using sharc::detail::FlightRecorder;
using sharc::detail::TraceEntry;

void recordOne(FlightRecorder& rec, uint64_t seq) {
  TraceEntry& e = rec.add();  // as CommunicatorImpl::start does
  e.seq = seq;
  e.kind = sharc::CollectiveKind::AllReduce;
  e.type = sharc::DataType::Float32;
  e.hasOp = true;
  e.op = sharc::RedOp::Sum;
  e.count = 1;
  e.algorithm = sharc::algo::algorithmName(sharc::algo::Algorithm::Ring);
  e.chunkBytes = 1 << 20;
  e.state = sharc::detail::TraceState::Started;
  e.queuedNs = e.startedNs = sharc::detail::wallClockNs();
  rec.finish(e.id, true, {});  // as Engine::progressLocked does
}

void BM_RecordCall(benchmark::State& state) {
  FlightRecorder rec(2000);
  uint64_t seq = 0;
  if (state.range(0) != 0)  // steady state: the ring is full, every entry is overwritten
    for (int i = 0; i < 2000; ++i) recordOne(rec, ++seq);
  for (auto _ : state) recordOne(rec, ++seq);
  state.SetLabel(state.range(0) != 0 ? "ring full" : "ring filling");
}
BENCHMARK(BM_RecordCall)->Arg(0)->Arg(1);

}  // namespace

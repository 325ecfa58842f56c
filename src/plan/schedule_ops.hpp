// The replay's input (schedule_sim.cc): every rank's schedule, built by the engine's own
// builders over reserved (never touched) memory, flattened into one list of operations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "algorithms/algorithms.hpp"
#include "algorithms/node_map.hpp"
#include "algorithms/schedule.hpp"
#include "sharc/plan.hpp"

namespace sharc::plan {

constexpr size_t kSimElem = 4;  // the replay's element: float32

/// Every rank's operations, flattened: global id = base[rank] + the schedule's OpId.
struct SimOps {
  std::vector<uint32_t> base;  ///< per rank, plus the end
  std::vector<algo::Schedule::OpKind> kind;
  std::vector<int32_t> peer;
  std::vector<uint32_t> slot;
  std::vector<double> bytes;
  std::vector<uint32_t> pending;   ///< unfinished dependencies
  std::vector<uint32_t> depBegin;  ///< dependents of g: deps[depBegin[g] .. depBegin[g + 1])
  std::vector<uint32_t> deps;
};

/// Elements per rank of a call of `bytes` (AllGather output, ReduceScatter input, AllReduce
/// vector) on n ranks.
size_t simCountPerRank(Collective c, size_t bytes, int n);

/// Builds single ranks' schedules of one call (`a` in `chunkBytes` chunks on `map`) over
/// reserved address space that is never touched: the replay's input, and what the
/// schedule-build benchmark times (perf/bench_schedule_build.cc).
class SimBuilder {
 public:
  SimBuilder(const algo::NodeMap& map, Collective c, size_t bytes, algo::Algorithm a,
             size_t chunkBytes);
  ~SimBuilder();
  SimBuilder(const SimBuilder&) = delete;
  SimBuilder& operator=(const SimBuilder&) = delete;
  /// Builds rank `rank`'s schedule as the engine does; fills `ops` (if given) with its
  /// operations. Returns how many there are.
  size_t build(int rank, std::vector<algo::Schedule::OpInfo>* ops = nullptr);
  /// Rank `rank`'s schedule itself, built and not started (its buffers are the reserved
  /// memory: it must never run).
  std::unique_ptr<algo::Schedule> schedule(int rank);

 private:
  class Reservation;
  const algo::NodeMap& map_;
  Collective c_;
  algo::Algorithm a_;
  std::unique_ptr<Reservation> buffers_;
  algo::ScratchPool pool_;
  algo::CollArgs args_;
  size_t sendBytes_ = 0, recvBytes_ = 0;
};

/// Builds each rank's schedule of `a` in `chunkBytes` chunks in turn, keeping only what the
/// replay needs. Throws InvalidArgument for single-copy algorithms (one host only).
SimOps buildSimOps(const algo::NodeMap& map, Collective c, size_t bytes, algo::Algorithm a,
                   size_t chunkBytes);

}  // namespace sharc::plan

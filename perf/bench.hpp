// The measurement loop: sizes x types x ops, out-of-place and in-place, optional baseline.
#pragma once

#include <cstddef>
#include <optional>
#include <sharc/communicator.hpp>

#include "options.hpp"
#include "report.hpp"

namespace sharc::perf {

/// Another implementation timed on the same calls (the MPI baseline).
class Baseline {
 public:
  virtual ~Baseline() = default;
  /// False when the implementation lacks the type or the operator.
  virtual bool supports(CollectiveKind c, DataType type, std::optional<RedOp> op,
                        size_t count) const = 0;
  /// Mean time in microseconds of one call over `iters` calls after `warmup` untimed ones,
  /// the maximum over ranks (collective over the job). `count` is per rank for all_gather
  /// and reduce_scatter, as for sharc.
  virtual double timeUs(CollectiveKind c, const void* send, void* recv, size_t count, DataType type,
                        std::optional<RedOp> op, int iters, int warmup) = 0;
};

/// Header facts for this communicator (collective: gathers every rank's pid and host).
RunInfo describeRun(Communicator& comm, const std::string& launch);

/// Runs the whole benchmark on `comm` (collective over its ranks), printing on rank 0.
/// Returns 0, or kExitCheckFailed when some result was wrong.
int runBenchmark(Communicator& comm, const Options& options, const std::string& launch,
                 Baseline* baseline);

}  // namespace sharc::perf

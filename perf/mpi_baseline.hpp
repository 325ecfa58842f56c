// --baseline mpi: the same collectives through MPI (only in SHARC_WITH_MPI builds).
#pragma once

#include <mpi.h>

#include <memory>

#include "bench.hpp"

namespace sharc::perf {

/// Times MPI_Allgather / MPI_Reduce_scatter_block / MPI_Allreduce on `comm`. Types and ops
/// MPI lacks (half, bfloat16, avg) and counts above INT_MAX are reported as unsupported.
std::unique_ptr<Baseline> makeMpiBaseline(MPI_Comm comm);

}  // namespace sharc::perf

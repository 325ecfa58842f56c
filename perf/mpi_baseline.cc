#include "mpi_baseline.hpp"

#include <climits>
#include <stdexcept>
#include <string>

namespace sharc::perf {

namespace {

std::optional<MPI_Datatype> mpiType(DataType t) {
  switch (t) {
    case DataType::Int8: return MPI_INT8_T;
    case DataType::Uint8: return MPI_UINT8_T;
    case DataType::Int32: return MPI_INT32_T;
    case DataType::Uint32: return MPI_UINT32_T;
    case DataType::Int64: return MPI_INT64_T;
    case DataType::Uint64: return MPI_UINT64_T;
    case DataType::Float32: return MPI_FLOAT;
    case DataType::Float64: return MPI_DOUBLE;
    case DataType::Float16:
    case DataType::BFloat16: return std::nullopt;
  }
  return std::nullopt;
}

std::optional<MPI_Op> mpiOp(RedOp op) {
  switch (op) {
    case RedOp::Sum: return MPI_SUM;
    case RedOp::Prod: return MPI_PROD;
    case RedOp::Max: return MPI_MAX;
    case RedOp::Min: return MPI_MIN;
    case RedOp::Avg: return std::nullopt;
  }
  return std::nullopt;
}

void checkMpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw std::runtime_error(std::string(what) +
                           " failed: " + std::string(msg, static_cast<size_t>(len)));
}

class MpiBaseline final : public Baseline {
 public:
  explicit MpiBaseline(MPI_Comm comm) : comm_(comm) {}

  bool supports(CollectiveKind c, DataType type, std::optional<RedOp> op,
                size_t count) const override {
    if (!mpiType(type) || count > static_cast<size_t>(INT_MAX)) return false;
    if (c != CollectiveKind::AllGather && (!op || !mpiOp(*op))) return false;
    return true;
  }

  double timeUs(CollectiveKind c, const void* send, void* recv, size_t count, DataType type,
                std::optional<RedOp> op, int iters, int warmup) override {
    const MPI_Datatype t = *mpiType(type);
    const MPI_Op o = c == CollectiveKind::AllGather ? MPI_OP_NULL : *mpiOp(op.value_or(RedOp::Sum));
    const int n = static_cast<int>(count);
    auto once = [&] {
      switch (c) {
        case CollectiveKind::AllGather:
          checkMpi(MPI_Allgather(send, n, t, recv, n, t, comm_), "MPI_Allgather");
          return;
        case CollectiveKind::ReduceScatter:
          checkMpi(MPI_Reduce_scatter_block(send, recv, n, t, o, comm_),
                   "MPI_Reduce_scatter_block");
          return;
        case CollectiveKind::AllReduce:
          checkMpi(MPI_Allreduce(send, recv, n, t, o, comm_), "MPI_Allreduce");
          return;
        default: break;
      }
    };
    for (int i = 0; i < warmup; ++i) once();
    checkMpi(MPI_Barrier(comm_), "MPI_Barrier");
    const double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) once();
    double mine = (MPI_Wtime() - t0) * 1.0e6 / iters;
    double slowest = 0;
    checkMpi(MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm_), "MPI_Allreduce");
    return slowest;
  }

 private:
  MPI_Comm comm_;
};

}  // namespace

std::unique_ptr<Baseline> makeMpiBaseline(MPI_Comm comm) {
  return std::make_unique<MpiBaseline>(comm);
}

}  // namespace sharc::perf

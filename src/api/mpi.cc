// sharc::createFromMpi: the MPI bootstrap feeding the common communicator factory.
// Only MPI's C API is used: keep Open MPI's / MPICH's C++ bindings (libmpi_cxx) out.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <sharc/mpi.hpp>

#include "bootstrap/mpi_bootstrap.hpp"
#include "runtime/create_communicator.hpp"

namespace sharc {

std::shared_ptr<Communicator> createFromMpi(MPI_Comm comm, const CommOptions& options) {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized)
    throw Error(Result::InvalidUsage,
                "createFromMpi: MPI is not initialised (call MPI_Init before createFromMpi and "
                "MPI_Finalize only after it returns)");
  if (comm == MPI_COMM_NULL)
    throw Error(Result::InvalidArgument, "createFromMpi: comm is MPI_COMM_NULL");
  return detail::createCommunicator(bootstrap::mpiBootstrap(comm), options);
}

}  // namespace sharc

// Bootstrap over an MPI communicator (MPI_Allgather of blobs), for jobs launched by mpirun.
#pragma once

#include <mpi.h>

#include "bootstrap.hpp"

namespace sharc::bootstrap {

/// Wraps `comm` (MPI must be initialised; the communicator must outlive the returned object).
std::unique_ptr<Bootstrap> mpiBootstrap(MPI_Comm comm);

}  // namespace sharc::bootstrap

/// \file
/// Creating a sharc communicator from an MPI communicator (library sharc::sharc_mpi).
#pragma once

#include <mpi.h>

#include <sharc/communicator.hpp>

namespace sharc {

/// Collective over `comm`: exchanges fabric addresses with MPI_Allgather and returns a
/// communicator with the same ranks. MPI must be initialised; MPI is not used afterwards.
std::shared_ptr<Communicator> createFromMpi(MPI_Comm comm, const CommOptions& options = {});

}  // namespace sharc

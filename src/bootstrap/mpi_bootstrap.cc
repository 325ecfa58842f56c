// Open MPI's and MPICH's mpi.h pull in the deprecated C++ bindings (and a link dependency on
// libmpi_cxx) when compiled as C++; only the C API is used here.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include "bootstrap/mpi_bootstrap.hpp"

#include <limits>
#include <sharc/error.hpp>
#include <string>
#include <vector>

namespace sharc::bootstrap {
namespace {

std::string mpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(length));
}

class MpiBootstrap final : public Bootstrap {
 public:
  MpiBootstrap(MPI_Comm comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::vector<std::string> allGather(const std::string& blob) override {
    const std::string round = "allGather round " + std::to_string(++round_);
    if (blob.size() > kMaxBlobBytes) {
      // Every rank must still enter the collectives, or the others would hang: contribute
      // an impossible length so that all ranks fail together.
      int bad = -1;
      std::vector<int> lengths(static_cast<size_t>(size_));
      check(MPI_Allgather(&bad, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm_), round);
      throw Error(Result::InvalidArgument,
                  prefix() + round + ": blob of " + std::to_string(blob.size()) +
                      " bytes exceeds the limit of " + std::to_string(kMaxBlobBytes) + " bytes");
    }
    int myLength = static_cast<int>(blob.size());
    std::vector<int> lengths(static_cast<size_t>(size_));
    check(MPI_Allgather(&myLength, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm_), round);

    std::vector<int> displs(static_cast<size_t>(size_));
    long long total = 0;
    for (int r = 0; r < size_; ++r) {
      const int length = lengths[static_cast<size_t>(r)];
      if (length < 0 || static_cast<size_t>(length) > kMaxBlobBytes) {
        throw Error(Result::RemoteError,
                    prefix() + round + ": rank " + std::to_string(r) + " passed an oversized blob");
      }
      displs[static_cast<size_t>(r)] = static_cast<int>(total);
      total += length;
      if (total > std::numeric_limits<int>::max()) {
        throw Error(Result::InvalidUsage, prefix() + round + ": " + std::to_string(size_) +
                                              " blobs exceed MPI_Allgatherv's 2 GiB limit");
      }
    }
    std::string all(static_cast<size_t>(total), '\0');
    // MPI_Allgatherv's send buffer is const void* since MPI-3; .data() of an empty string is
    // still a valid pointer.
    check(MPI_Allgatherv(blob.data(), myLength, MPI_BYTE, all.data(), lengths.data(), displs.data(),
                         MPI_BYTE, comm_),
          round);
    std::vector<std::string> out(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) {
      out[static_cast<size_t>(r)] =
          all.substr(static_cast<size_t>(displs[static_cast<size_t>(r)]),
                     static_cast<size_t>(lengths[static_cast<size_t>(r)]));
    }
    return out;
  }

 private:
  std::string prefix() const { return "rank " + std::to_string(rank_) + ": bootstrap (MPI): "; }

  void check(int rc, const std::string& round) const {
    if (rc != MPI_SUCCESS) {
      throw Error(Result::SystemError, prefix() + round + " failed: " + mpiErrorText(rc));
    }
  }

  MPI_Comm comm_;
  int rank_;
  int size_;
  int round_ = 0;
};

}  // namespace

std::unique_ptr<Bootstrap> mpiBootstrap(MPI_Comm comm) {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) {
    throw Error(Result::InvalidUsage,
                "bootstrap (MPI): MPI is not initialised (call MPI_Init before creating a "
                "communicator from an MPI communicator)");
  }
  if (comm == MPI_COMM_NULL) {
    throw Error(Result::InvalidArgument, "bootstrap (MPI): the MPI communicator is MPI_COMM_NULL");
  }
  int rank = 0;
  int size = 0;
  if (int rc = MPI_Comm_rank(comm, &rank); rc != MPI_SUCCESS) {
    throw Error(Result::SystemError, "bootstrap (MPI): MPI_Comm_rank failed: " + mpiErrorText(rc));
  }
  if (int rc = MPI_Comm_size(comm, &size); rc != MPI_SUCCESS) {
    throw Error(Result::SystemError, "bootstrap (MPI): MPI_Comm_size failed: " + mpiErrorText(rc));
  }
  return std::make_unique<MpiBootstrap>(comm, rank, size);
}

}  // namespace sharc::bootstrap

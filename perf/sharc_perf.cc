// sharc-perf: nccl-tests style bandwidth benchmark and correctness check for sharc.
//
// Launch modes, in order of precedence:
//   -N RANKS        forks RANKS ranks on this host (rendezvous on 127.0.0.1);
//   --baseline mpi  or running under mpirun without SHARC_ROOT/MASTER_ADDR, in an MPI build:
//                   MPI_Init and createFromMpi(MPI_COMM_WORLD);
//   SHARC_ROOT / MASTER_ADDR / OMPI_COMM_WORLD_* in the environment: createFromEnvironment;
//   none of those:  a single rank in this process.
#include <sharc/communicator.hpp>

#include "bench.hpp"
#include "calibrate.hpp"
#include "launch.hpp"
#include "options.hpp"

#ifdef SHARC_PERF_WITH_MPI
#include <sharc/mpi.hpp>

#include "mpi_baseline.hpp"
#endif

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

namespace {

using namespace sharc;
using namespace sharc::perf;

bool envSet(const char* name) {
  const char* v = std::getenv(name);
  return v && *v;
}

bool underMpirun() {
  return envSet("OMPI_COMM_WORLD_SIZE") || envSet("PMI_SIZE") || envSet("PMIX_RANK");
}

bool hasRendezvousEnv() {
  return envSet("SHARC_ROOT") || envSet("MASTER_ADDR");
}

// The benchmark, or the calibration with --calibrate.
int runJob(Communicator& comm, const Options& options, const std::string& launch,
           Baseline* baseline) {
  if (!options.calibratePath.empty()) return runCalibration(comm, options);
  return runBenchmark(comm, options, launch, baseline);
}

// One rank of a job whose communicator comes from the environment (-N children included).
int runFromEnvironment(const Options& options, const std::string& launch) {
  auto comm = Communicator::createFromEnvironment();
  const int rc = runJob(*comm, options, launch, nullptr);
  comm->destroy();
  return rc;
}

int runSingle(const Options& options) {
  auto comm = Communicator::create(makeUniqueId(), 1, 0);
  const int rc = runJob(*comm, options, "single process (no -N, no launcher)", nullptr);
  comm->destroy();
  return rc;
}

#ifdef SHARC_PERF_WITH_MPI
int runUnderMpi(const Options& options) {
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
    std::fprintf(stderr, "sharc-perf: MPI_Init failed\n");
    return 1;
  }
  int rc = 1;
  try {
    auto comm = createFromMpi(MPI_COMM_WORLD);
    std::unique_ptr<Baseline> baseline;
    if (options.mpiBaseline) baseline = makeMpiBaseline(MPI_COMM_WORLD);
    rc = runJob(*comm, options, "mpi", baseline.get());
    comm->destroy();
  } catch (const std::exception& e) {
    int rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::fprintf(stderr, "sharc-perf: rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);  // never leave the other ranks waiting
  }
  MPI_Finalize();
  return rc;
}
#endif

int run(const Options& options) {
  if (options.launchRanks > 0) {
    if (options.mpiBaseline)
      throw UsageError("--baseline mpi needs the ranks started by mpirun, not -N");
    const std::string launch = "fork (-N " + std::to_string(options.launchRanks) + ")";
    return launchLocalRanks(options.launchRanks, options.timeoutSec,
                            [&](int) { return runFromEnvironment(options, launch); });
  }
#ifdef SHARC_PERF_WITH_MPI
  if (options.mpiBaseline) {
    if (!underMpirun())
      throw UsageError(
          "--baseline mpi needs the ranks started by mpirun (OMPI_COMM_WORLD_SIZE "
          "is not set)");
    return runUnderMpi(options);
  }
  if (underMpirun() && !hasRendezvousEnv()) return runUnderMpi(options);
#else
  if (options.mpiBaseline)
    throw UsageError(
        "--baseline mpi: this sharc-perf was built without MPI "
        "(configure with -DSHARC_WITH_MPI=ON)");
#endif
  if (hasRendezvousEnv() || envSet("SHARC_WORLD_SIZE") || underMpirun())
    return runFromEnvironment(options, "environment");
  return runSingle(options);
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = parseOptions(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "sharc-perf: %s\n%s", e.what(), usageText(argv[0]).c_str());
    return 2;
  }
  if (options.help) {
    std::fputs(usageText(argv[0]).c_str(), stdout);
    return 0;
  }
  try {
    return run(options);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "sharc-perf: %s\n", e.what());
    return 2;
  } catch (const sharc::Error& e) {
    std::fprintf(stderr, "sharc-perf: %s (%s)\n", e.what(), sharc::resultString(e.code()));
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sharc-perf: %s\n", e.what());
    return 1;
  }
}

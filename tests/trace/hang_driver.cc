// One rank of a job that goes wrong on purpose, for tests/trace/test_real_hangs.py: every
// rank makes `calls` AllGathers of 1,000 floats (results checked) and, at call `at`, rank
// `culprit` misbehaves as `scenario` says. Joins the job from the environment (SHARC_ROOT,
// SHARC_RANK, SHARC_WORLD_SIZE). Prints "rank R: ok" or "rank R: error after T ms: MESSAGE"
// (T: how long the failing call took) and exits 0 or 1.
//
//   normal        nobody misbehaves (the test stops or kills a rank from outside)
//   skip          the culprit skips call `at`
//   other         the culprit calls AllReduce where the others call AllGather
//   count         the culprit passes 1,001 elements instead of 1,000
//   root          a Broadcast at call `at`: the culprit passes root 1, the others root 0
//   slow          the culprit sleeps 3 s before call `at` (everything still succeeds; with
//                 HANG_DRIVER_DUMP=DIR every rank writes its flight record there at the end)
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sharc/communicator.hpp>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void usage() {
  std::fprintf(stderr, "usage: hang_driver normal|skip|other|count|root|slow CALLS AT CULPRIT\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) usage();
  const std::string scenario = argv[1];
  const int calls = std::atoi(argv[2]), at = std::atoi(argv[3]), culprit = std::atoi(argv[4]);
  int rank = -1;
  // When the last call started, and when it threw: the failing call's own time, without the
  // communicator's destructor that runs before the catch below.
  auto started = Clock::now();
  auto failedAt = started;
  try {
    auto comm = sharc::Communicator::createFromEnvironment();
    rank = comm->rank();
    const int n = comm->size();
    const bool me = rank == culprit;
    constexpr size_t kCount = 1000;
    std::vector<float> send(kCount + 1), recv((kCount + 1) * static_cast<size_t>(n));
    for (int i = 1; i <= calls; ++i) try {
        for (size_t k = 0; k < send.size(); ++k)
          send[k] = static_cast<float>(rank * 100000 + i + k);
        started = Clock::now();
        if (i == at && me && scenario == "skip") continue;
        if (i == at && me && scenario == "slow")
          std::this_thread::sleep_for(std::chrono::seconds(3));
        if (i == at && scenario == "root") {
          comm->broadcast(send.data(), recv.data(), kCount, sharc::DataType::Float32, me ? 1 : 0);
          continue;
        }
        if (i == at && me && scenario == "other") {
          comm->allReduce(send.data(), recv.data(), kCount, sharc::DataType::Float32,
                          sharc::RedOp::Sum);
          continue;
        }
        const size_t count = i == at && me && scenario == "count" ? kCount + 1 : kCount;
        comm->allGather(send.data(), recv.data(), count, sharc::DataType::Float32);
        if (scenario == "skip") continue;  // after a skipped call the data is off by one call
        for (int r = 0; r < n; ++r)
          for (size_t k = 0; k < kCount; k += 97)
            if (recv[static_cast<size_t>(r) * kCount + k] !=
                static_cast<float>(r * 100000 + i + k)) {
              std::printf("rank %d: wrong result at call %d from rank %d\n", rank, i, r);
              return 1;
            }
      } catch (...) {
        failedAt = Clock::now();
        throw;
      }
    // For a job that succeeded (a slow rank): the record on demand, as a user would ask for it.
    if (const char* dir = std::getenv("HANG_DRIVER_DUMP")) comm->dumpTrace(dir);
    std::printf("rank %d: ok\n", rank);
    comm->destroy();
    return 0;
  } catch (const std::exception& e) {
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(failedAt - started).count();
    std::printf("rank %d: error after %lld ms: %s\n", rank, static_cast<long long>(ms), e.what());
    std::fflush(stdout);
    return 1;
  }
}

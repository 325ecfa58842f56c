// The CUDA device queue, and collectives staged through it on device buffers (CUDA builds
// only; skipped where no GPU is usable). CUDA is only ever initialised in forked ranks: a
// process that forks after initialising CUDA leaves its children unable to use it.
#include <gtest/gtest.h>

#if SHARC_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <sharc/communicator.hpp>
#include <sharc/cuda.hpp>
#include <vector>

#include "core/collective.hpp"
#include "gpu/cuda_check.hpp"
#include "gpu/cuda_device_queue.hpp"
#include "gpu/cuda_resources.hpp"
#include "gpu/staged_collective.hpp"
#include "multiprocess.hpp"
#include "reference.hpp"

namespace sharc::testing {
namespace {

using gpu::StagedCall;
using Kind = CollectiveKind;
using namespace std::chrono_literals;

// Asks a forked child whether CUDA has a usable device (the parent stays uninitialised).
bool gpuUsable() {
  static const bool usable = [] {
    const pid_t pid = fork();
    if (pid == 0) _exit(cudaAvailable() ? 0 : 1);
    int status = 0;
    return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
           WEXITSTATUS(status) == 0;
  }();
  return usable;
}

#define SHARC_REQUIRE_GPU() \
  if (!gpuUsable()) GTEST_SKIP() << "no usable CUDA device"

TEST(CudaDeviceQueue, RoundTripFencesAndTimeout) {
  SHARC_REQUIRE_GPU();
  runRanks(1, [](const RankContext&) {
    gpu::CudaDeviceQueue e(0);
    gpu::DeviceGuard guard(0);
    constexpr size_t kBytes = size_t{8} << 20, kPiece = size_t{1} << 20;
    gpu::DeviceBuffer dev(kBytes);
    gpu::QueueMemory a = e.allocateStaging(kBytes), b = e.allocateStaging(kBytes);
    ASSERT_GE(a.bytes(), kBytes);
    auto* pa = static_cast<unsigned char*>(a.data());
    for (size_t i = 0; i < kBytes; ++i) pa[i] = static_cast<unsigned char>(i * 131 + 17);
    std::vector<gpu::DeviceQueue::Ticket> tickets;
    for (size_t off = 0; off < kBytes; off += kPiece) {
      e.copy(static_cast<char*>(dev.get()) + off, pa + off, kPiece);
      tickets.push_back(e.fence());
    }
    e.copy(b.data(), dev.get(), kBytes);  // runs after every copy in
    tickets.push_back(e.fence());
    for (size_t i = 1; i < tickets.size(); ++i) ASSERT_GT(tickets[i], tickets[i - 1]);
    e.wait(tickets.back(), 10s);
    for (auto t : tickets) EXPECT_TRUE(e.done(t));
    EXPECT_EQ(std::memcmp(a.data(), b.data(), kBytes), 0);

    // A host function that sleeps holds the stream: the fence after it times out, then ends.
    SHARC_CUDA_CHECK(cudaLaunchHostFunc(
        e.stream(), [](void*) { usleep(300000); }, nullptr));
    const auto t = e.fence();
    try {
      e.wait(t, 50ms);
      ADD_FAILURE() << "wait returned while the stream was held";
    } catch (const Error& err) {
      EXPECT_EQ(err.code(), Result::Timeout) << err.what();
    }
    e.wait(t, 10s);
    EXPECT_TRUE(e.done(t));
  });
}

// Every collective on device buffers, out of place and in place, in many chunks and in one.
TEST(CudaStaged, DeviceBuffersMatchReference) {
  SHARC_REQUIRE_GPU();
  RunOptions o;
  o.env["SHARC_TIMEOUT_MS"] = "60000";
  runRanks(
      2,
      [](const RankContext&) {
        auto comm = Communicator::createFromEnvironment();
        const int n = comm->size(), r = comm->rank();
        gpu::CudaDeviceQueue e(0);
        gpu::StagingPool pool(e);
        gpu::DeviceGuard guard(0);
        for (size_t chunk : {size_t{4096}, size_t{1} << 30})
          for (size_t count : {size_t{0}, size_t{1}, size_t{1001}, (size_t{1} << 18) + 3})
            for (DataType t : {DataType::Float32, DataType::BFloat16})
              for (Kind kind :
                   {Kind::AllGather, Kind::ReduceScatter, Kind::AllReduce, Kind::Broadcast})
                for (bool inPlace : {false, true}) {
                  const RedOp op = kind == Kind::ReduceScatter ? RedOp::Avg : RedOp::Sum;
                  const size_t elem = dataTypeSize(t);
                  const size_t sendCount = kind == Kind::ReduceScatter ? count * n : count;
                  const size_t recvCount = kind == Kind::AllGather ? count * n : count;
                  const size_t outer = std::max(sendCount, recvCount);
                  std::vector<unsigned char> host(sendCount * elem), out(recvCount * elem);
                  fillInput(host.data(), t, op, r, 0, sendCount);
                  gpu::DeviceBuffer a(outer * elem + 1), b(recvCount * elem + 1);
                  auto* base = static_cast<unsigned char*>(a.get());
                  void* send = base;
                  void* recv = b.get();
                  if (inPlace) {
                    recv = base;
                    if (kind == Kind::AllGather) send = base + r * count * elem;
                    if (kind == Kind::ReduceScatter) recv = base + r * count * elem;
                  }
                  SHARC_CUDA_CHECK(
                      cudaMemcpy(send, host.data(), host.size(), cudaMemcpyHostToDevice));
                  const StagedCall call{kind, send, recv, count, t, op, n - 1};
                  gpu::runStaged(*comm, pool, call, chunk, 60s);
                  SHARC_CUDA_CHECK(
                      cudaMemcpy(out.data(), recv, out.size(), cudaMemcpyDeviceToHost));
                  int bad = 0;
                  for (size_t k = 0; k < recvCount && bad < 3; ++k) {
                    const double expected =
                        kind == Kind::AllGather
                            ? inputValue(t, op, static_cast<int>(k / count), k % count)
                        : kind == Kind::Broadcast     ? inputValue(t, op, n - 1, k)
                        : kind == Kind::ReduceScatter ? expectedReduce(t, op, n, r * count + k)
                                                      : expectedReduce(t, op, n, k);
                    const double got = loadElement(out.data(), t, k);
                    if (!matches(got, expected, t, op)) {
                      ++bad;
                      ADD_FAILURE()
                          << core::collectiveName(kind) << " " << dataTypeName(t) << " count "
                          << count << (inPlace ? " in-place" : "") << " chunk " << chunk << " rank "
                          << r << ": " << describeMismatch(k, got, expected);
                    }
                  }
                }
      },
      o);
}

}  // namespace
}  // namespace sharc::testing
#endif  // SHARC_HAVE_CUDA

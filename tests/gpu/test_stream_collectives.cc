// Stream-ordered collectives on CUDA buffers, among 2 and 4 processes sharing one GPU, over
// CUDA IPC and over host staging (SHARC_CUDA_IPC=0); every element checked against the
// float64 reference. Without a GPU these skip, and the tests of what happens without CUDA
// run instead.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <sharc/communicator.hpp>
#include <sharc/cuda.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "gpu_probe.hpp"
#include "multiprocess.hpp"
#include "reference.hpp"

namespace sharc::testing {
namespace {

#define CUDA_OK(call)                                                               \
  do {                                                                              \
    const cudaError_t s_ = (call);                                                  \
    if (s_ != cudaSuccess)                                                          \
      throw std::runtime_error(std::string(#call) + ": " + cudaGetErrorString(s_)); \
  } while (0)

using Coll = CollectiveKind;  // AllGather to Broadcast
const char* name(Coll c) {
  switch (c) {
    case Coll::AllGather: return "allGather";
    case Coll::ReduceScatter: return "reduceScatter";
    case Coll::AllReduce: return "allReduce";
    case Coll::Broadcast: return "broadcast";
    default: break;
  }
  return "?";
}

// A device buffer freed at scope exit. `offset` bytes in, so that views inside an allocation
// (as tensors are) are what the collectives get.
struct DeviceArray {
  void* base = nullptr;
  char* p = nullptr;
  DeviceArray(size_t bytes, size_t offset) {
    CUDA_OK(cudaMalloc(&base, bytes + offset + 16));
    CUDA_OK(cudaMemset(base, 0xee, bytes + offset + 16));
    p = static_cast<char*>(base) + offset;
  }
  ~DeviceArray() { cudaFree(base); }
};

void sleepOnStream(cudaStream_t s, int ms) {
  auto* arg = new int(ms);
  CUDA_OK(cudaLaunchHostFunc(
      s,
      [](void* a) {
        std::unique_ptr<int> d(static_cast<int*>(a));
        std::this_thread::sleep_for(std::chrono::milliseconds(*d));
      },
      arg));
}

// Runs one stream-ordered call with inputs written on the stream (behind a delay, so a call
// that did not wait for them would read garbage) and the result read back on the stream
// without any synchronisation in between. Returns "" or a description of what was wrong.
std::string runCase(Communicator& comm, cudaStream_t s, Coll coll, DataType type, RedOp op,
                    size_t count, bool inPlace, size_t offset, int delayMs) {
  const int n = comm.size(), rank = comm.rank(), root = n - 1;
  const size_t elem = dataTypeSize(type), bytes = count * elem;
  const size_t sendElems = coll == Coll::ReduceScatter ? count * n : count;
  const size_t recvElems = coll == Coll::AllGather ? count * n : count;
  // In place, one buffer holds both: the whole n*count one for AllGather (receive) and
  // ReduceScatter (send), with the other at this rank's block.
  const size_t wholeElems = std::max(sendElems, recvElems);
  DeviceArray first(inPlace ? wholeElems * elem : sendElems * elem, offset);
  DeviceArray second(inPlace ? 0 : recvElems * elem, offset);
  char* sendPtr = first.p;
  char* recvPtr = inPlace ? first.p : second.p;
  if (inPlace && coll == Coll::AllGather) sendPtr = first.p + rank * bytes;
  if (inPlace && coll == Coll::ReduceScatter) recvPtr = first.p + rank * bytes;
  std::vector<char> hostIn(sendElems * elem + 1);
  fillInput(hostIn.data(), type, op, coll == Coll::Broadcast ? root : rank, 0, sendElems);
  if (delayMs > 0) sleepOnStream(s, delayMs);
  if (sendElems > 0)
    CUDA_OK(cudaMemcpyAsync(sendPtr, hostIn.data(), sendElems * elem, cudaMemcpyHostToDevice, s));
  switch (coll) {
    case Coll::AllGather: comm.allGather(sendPtr, recvPtr, count, type, s); break;
    case Coll::ReduceScatter: comm.reduceScatter(sendPtr, recvPtr, count, type, op, s); break;
    case Coll::AllReduce: comm.allReduce(sendPtr, recvPtr, count, type, op, s); break;
    case Coll::Broadcast: comm.broadcast(sendPtr, recvPtr, count, type, root, s); break;
    default: break;
  }
  std::vector<char> hostOut(recvElems * elem + 1);
  if (recvElems > 0)
    CUDA_OK(cudaMemcpyAsync(hostOut.data(), recvPtr, recvElems * elem, cudaMemcpyDeviceToHost, s));
  CUDA_OK(cudaStreamSynchronize(s));
  std::string err;
  if (comm.asyncError(&err) != Result::Success) return "async error: " + err;

  std::ostringstream bad;
  int wrong = 0;
  for (size_t i = 0; i < recvElems && wrong < 3; ++i) {
    double expected = 0;
    switch (coll) {
      case Coll::AllGather:
        expected = inputValue(type, op, static_cast<int>(i / count), i % count);
        break;
      case Coll::ReduceScatter: expected = expectedReduce(type, op, n, rank * count + i); break;
      case Coll::AllReduce: expected = expectedReduce(type, op, n, i); break;
      case Coll::Broadcast: expected = inputValue(type, op, root, i); break;
      default: break;
    }
    const double got = loadElement(hostOut.data(), type, i);
    if (!matches(got, expected, type,
                 coll == Coll::AllGather || coll == Coll::Broadcast ? RedOp::Sum : op)) {
      bad << describeMismatch(i, got, expected) << "; ";
      ++wrong;
    }
  }
  if (wrong == 0) return "";
  return std::string(name(coll)) + " " + dataTypeName(type) + " " + redOpName(op) + " count " +
         std::to_string(count) + (inPlace ? " in place" : "") + " offset " +
         std::to_string(offset) + " on rank " + std::to_string(rank) + ": " + bad.str();
}

// How the ranks reach each other: CUDA IPC (one host), the staging pipeline, or the engine's
// device path between two emulated nodes over libfabric shm (FI_HMEM registrations of the
// device buffers where libfabric has CUDA support, else staged per link: the test prints which).
enum class Path { Ipc, Staged, Device };
struct Layout {
  int ranks;
  Path path;
};

class StreamCollectives : public ::testing::TestWithParam<Layout> {
 protected:
  void SetUp() override {
    std::string why;
    if (!cudaDevicePresent(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  }
  using Body = void (*)(const std::shared_ptr<Communicator>&, cudaStream_t, const RankContext&);
  // Runs `body` on every rank, each with a communicator and a non-blocking stream on GPU 0.
  void onEveryRank(Body body) const {
    RunOptions o;
    o.timeout = std::chrono::seconds(240);
    switch (GetParam().path) {
      case Path::Ipc: break;
      case Path::Staged:
        o.env["SHARC_CUDA_IPC"] = "0";
        o.env["SHARC_DEVICE_PATH"] = "staged";
        break;
      case Path::Device:
        o.env["SHARC_DEVICE_PATH"] = "direct";
        o.env["SHARC_FI_PROVIDER"] = "shm";
        o.env["SHARC_SHM"] = "0";
        for (int r = 0; r < GetParam().ranks; ++r)
          o.nodeIds.push_back("node" + std::to_string(r * 2 / GetParam().ranks));
        break;
    }
    runRanks(
        GetParam().ranks,
        [body](const RankContext& ctx) {
          CUDA_OK(cudaSetDevice(0));
          auto comm = Communicator::createFromEnvironment();
          cudaStream_t s;
          CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
          body(comm, s, ctx);
          CUDA_OK(cudaStreamDestroy(s));
        },
        o);
  }
};

// Every collective, type, op and count, out of place and in place, with views at an offset.
TEST_P(StreamCollectives, EveryTypeOpAndCount) {
  onEveryRank([](const std::shared_ptr<Communicator>& comm, cudaStream_t s, const RankContext&) {
    const DataType types[] = {DataType::Float32, DataType::BFloat16, DataType::Float16,
                              DataType::Float64, DataType::Int32,    DataType::Int8,
                              DataType::Uint8,   DataType::Int64,    DataType::Uint64};
    const RedOp ops[] = {RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min, RedOp::Avg};
    const size_t counts[] = {0, 1, 1001, (1u << 18) + 3};
    std::string failures;
    int delay = 20;  // only the first calls wait behind a delay: keeps the run short
    for (bool inPlace : {false, true})
      for (size_t count : counts)
        for (DataType t : types) {
          const size_t offset = inPlace ? 0 : dataTypeSize(t);
          for (Coll c : {Coll::AllGather, Coll::Broadcast}) {
            failures += runCase(*comm, s, c, t, RedOp::Sum, count, inPlace, offset, delay);
            delay = 0;
          }
          for (RedOp op : ops)
            for (Coll c : {Coll::ReduceScatter, Coll::AllReduce})
              failures += runCase(*comm, s, c, t, op, count, inPlace, offset, 0);
        }
    if (!failures.empty()) throw std::runtime_error(failures.substr(0, 2000));
    // Which path the calls took, for gpu-check's summary (the flight record names it).
    const std::string trace = comm->traceJson();
    for (const char* path : {"device-direct", "device-mixed", "device-staged"})
      if (trace.find(std::string("\"") + path + "\"") != std::string::npos && comm->rank() == 0)
        std::printf("device path taken: %s\n", path);
  });
}

// 64 MiB per rank gathered: big enough for several staging chunks and long kernels.
TEST_P(StreamCollectives, LargeAllGatherAndReduceScatter) {
  onEveryRank([](const std::shared_ptr<Communicator>& comm, cudaStream_t s, const RankContext&) {
    const size_t count = (64u << 20) / 4 + 1;
    std::string failures =
        runCase(*comm, s, Coll::AllGather, DataType::Float32, RedOp::Sum, count, false, 0, 0);
    failures += runCase(*comm, s, Coll::ReduceScatter, DataType::BFloat16, RedOp::Sum, count / 2,
                        false, 0, 0);
    if (!failures.empty()) throw std::runtime_error(failures);
  });
}

// The call returns while its stream is still held up; later work sees the result.
TEST_P(StreamCollectives, CallerIsNotBlocked) {
  onEveryRank([](const std::shared_ptr<Communicator>& comm, cudaStream_t s, const RankContext&) {
    // The first call also creates the worker: do it once before timing.
    if (auto e = runCase(*comm, s, Coll::AllReduce, DataType::Float32, RedOp::Sum, 16, false, 0, 0);
        !e.empty())
      throw std::runtime_error(e);
    float* buf = nullptr;
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&buf), 1024 * sizeof(float)));
    sleepOnStream(s, 1000);
    const auto t0 = std::chrono::steady_clock::now();
    comm->allReduce(buf, buf, 1024, DataType::Float32, RedOp::Sum, s);
    const auto returned = std::chrono::steady_clock::now() - t0;
    if (returned > std::chrono::milliseconds(500))
      throw std::runtime_error(
          "the call blocked its caller for " +
          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(returned).count()) +
          " ms while its stream was held up for 1000 ms");
    if (cudaStreamQuery(s) != cudaErrorNotReady)
      throw std::runtime_error("the stream finished before the delay it was given");
    CUDA_OK(cudaStreamSynchronize(s));
    comm->synchronizeStreamCalls(std::chrono::seconds(30));
    cudaFree(buf);
  });
}

// Ranks that disagree on the count: an error on every rank, streams released, no hang.
TEST_P(StreamCollectives, MismatchedCallsFailOnEveryRank) {
  onEveryRank(
      [](const std::shared_ptr<Communicator>& comm, cudaStream_t s, const RankContext& ctx) {
        float* buf = nullptr;
        CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&buf), 4096 * sizeof(float) * 8));
        comm->allGather(buf, buf + 4096 * 4, ctx.rank == 0 ? 100 : 101, DataType::Float32, s);
        CUDA_OK(cudaStreamSynchronize(s));  // released even though the call failed
        std::string message;
        if (comm->asyncError(&message) == Result::Success)
          throw std::runtime_error("no error for mismatched counts");
        if (message.find("mismatched") == std::string::npos)
          throw std::runtime_error("unclear error: " + message);
        bool threw = false;
        try {
          comm->allGather(buf, buf + 4096 * 4, 1, DataType::Float32, s);
        } catch (const Error&) {
          threw = true;
        }
        if (!threw) throw std::runtime_error("a call after the failure did not throw");
        cudaFree(buf);
      });
}

INSTANTIATE_TEST_SUITE_P(OneGpu, StreamCollectives,
                         ::testing::Values(Layout{2, Path::Ipc}, Layout{4, Path::Ipc},
                                           Layout{2, Path::Staged}, Layout{4, Path::Staged},
                                           Layout{2, Path::Device}, Layout{4, Path::Device}),
                         [](const ::testing::TestParamInfo<Layout>& i) {
                           return std::to_string(i.param.ranks) + "ranks_" +
                                  (i.param.path == Path::Ipc      ? "ipc"
                                   : i.param.path == Path::Staged ? "staged"
                                                                  : "device_path_2nodes");
                         });

// Memory kinds as the driver reports them, and the host forms refusing device memory.
TEST(GpuMemory, KindsAndHostFormRefusal) {
  std::string why;
  if (!cudaDevicePresent(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  runRanks(1, [](const RankContext&) {
    CUDA_OK(cudaSetDevice(0));
    void *d = nullptr, *h = nullptr, *m = nullptr;
    CUDA_OK(cudaMalloc(&d, 4096));
    CUDA_OK(cudaHostAlloc(&h, 4096, cudaHostAllocDefault));
    CUDA_OK(cudaMallocManaged(&m, 4096));
    std::vector<char> pageable(64);
    if (memoryKind(d) != MemoryKind::Device || memoryDevice(d) != 0)
      throw std::runtime_error("cudaMalloc memory not seen as device 0");
    if (memoryKind(static_cast<char*>(d) + 100) != MemoryKind::Device)
      throw std::runtime_error("interior pointer not seen as device memory");
    if (memoryKind(h) != MemoryKind::PinnedHost) throw std::runtime_error("pinned not seen");
    if (memoryKind(m) != MemoryKind::Managed) throw std::runtime_error("managed not seen");
    if (memoryKind(pageable.data()) != MemoryKind::Host) throw std::runtime_error("host?");
    auto comm = Communicator::createFromEnvironment();
    bool refused = false;
    try {
      comm->allReduce(d, d, 16, DataType::Float32, RedOp::Sum);
    } catch (const Error& e) {
      refused = e.code() == Result::InvalidArgument &&
                std::string(e.what()).find("device memory") != std::string::npos;
    }
    if (!refused) throw std::runtime_error("host allReduce took device memory");
    cudaFree(d);
    cudaFreeHost(h);
    cudaFree(m);
  });
}

// Without a usable GPU (CI): memory is host memory, and stream-ordered calls say why they
// cannot run instead of crashing or hanging.
TEST(WithoutGpu, StreamCallsFailClearly) {
  std::string why;
  if (cudaDevicePresent(&why)) GTEST_SKIP() << "a CUDA device is present";
  runRanks(2, [](const RankContext&) {
    std::string reason;
    if (cudaAvailable(&reason)) throw std::runtime_error("cudaAvailable() without a device");
    if (reason.empty()) throw std::runtime_error("no reason given for missing CUDA");
    std::vector<float> a(16, 1.0f), b(16);
    if (memoryKind(a.data()) != MemoryKind::Host || memoryDevice(a.data()) != -1)
      throw std::runtime_error("host memory not reported as host");
    auto comm = Communicator::createFromEnvironment();
    try {
      comm->allReduce(a.data(), b.data(), 16, DataType::Float32, RedOp::Sum, nullptr);
      throw std::runtime_error("stream-ordered call ran without CUDA");
    } catch (const Error& e) {
      const std::string msg = e.what();
      if (e.code() != Result::InvalidUsage || msg.find("need CUDA") == std::string::npos ||
          msg.find("rank " + std::to_string(comm->rank())) == std::string::npos)
        throw std::runtime_error("unclear error: " + msg);
    }
    // The host forms still work on the same communicator.
    comm->allReduce(a.data(), b.data(), 16, DataType::Float32, RedOp::Sum);
    if (b[0] != 2.0f) throw std::runtime_error("host allReduce wrong after the refusal");
    if (comm->asyncError() != Result::Success) throw std::runtime_error("spurious async error");
  });
}

}  // namespace
}  // namespace sharc::testing

// Unmodified NCCL over sharc's plugin, end to end: N processes share one GPU but claim
// different hosts (NCCL_HOSTID), so NCCL connects them through its network plugin
// (NCCL_NET_PLUGIN=sharc; tools/nccl-e2e.sh sets the environment). Each collective's result
// is checked against a float64 reference computed on the host. Exits 77 without a GPU.
//
//   nccl_e2e RANK NRANKS ID_FILE
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(r));
}

// Rank r's element i: small integers, exact in float32 sums.
float value(int r, size_t i) {
  return static_cast<float>((r + 1) * 3 + static_cast<int>(i % 17));
}

ncclUniqueId shareId(int rank, const std::string& path) {
  ncclUniqueId id{};
  if (rank == 0) {
    check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    const std::string tmp = path + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(id.internal, sizeof(id.internal));
    std::rename(tmp.c_str(), path.c_str());
    return id;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    std::ifstream in(path, std::ios::binary);
    if (in.read(id.internal, sizeof(id.internal))) return id;
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("rank " + std::to_string(rank) + ": no unique id in " + path +
                               " after 60 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

struct Checker {
  int rank;
  int failures = 0;
  void expect(const std::vector<float>& got, const std::vector<double>& want, const char* what,
              size_t count) {
    size_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i)
      if (std::fabs(got[i] - want[i]) > 1e-6 * std::fabs(want[i])) ++bad;
    std::printf("nccl_e2e: rank %d %-14s %9zu floats: %s\n", rank, what, count,
                bad == 0 ? "ok" : "WRONG");
    if (bad) failures++;
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: nccl_e2e RANK NRANKS ID_FILE\n");
    return 2;
  }
  const int rank = std::atoi(argv[1]);
  const int nranks = std::atoi(argv[2]);
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    std::printf("nccl_e2e: no GPU here; skipped\n");
    return 77;
  }
  try {
    check(cudaSetDevice(rank % gpus), "cudaSetDevice");
    const ncclUniqueId id = shareId(rank, argv[3]);
    ncclComm_t comm;
    check(ncclCommInitRank(&comm, nranks, id, rank), "ncclCommInitRank");
    cudaStream_t stream;
    check(cudaStreamCreate(&stream), "cudaStreamCreate");
    Checker checker{rank};
    for (size_t count : {size_t{1}, size_t{1001}, size_t{1} << 20, size_t{1} << 24}) {
      const size_t total = count * static_cast<size_t>(nranks);
      std::vector<float> host(total);
      float *send, *recv;
      check(cudaMalloc(&send, total * sizeof(float)), "cudaMalloc");
      check(cudaMalloc(&recv, total * sizeof(float)), "cudaMalloc");
      for (size_t i = 0; i < total; ++i) host[i] = value(rank, i);
      check(cudaMemcpy(send, host.data(), total * sizeof(float), cudaMemcpyHostToDevice), "copy");

      // AllGather of `count` floats per rank.
      check(ncclAllGather(send, recv, count, ncclFloat, comm, stream), "ncclAllGather");
      check(cudaStreamSynchronize(stream), "sync");
      std::vector<float> got(total);
      check(cudaMemcpy(got.data(), recv, total * sizeof(float), cudaMemcpyDeviceToHost), "copy");
      std::vector<double> want(total);
      for (int r = 0; r < nranks; ++r)
        for (size_t i = 0; i < count; ++i) want[r * count + i] = value(r, i);
      checker.expect(got, want, "AllGather", count);

      // ReduceScatter (sum): block `rank` of every rank's `total` floats.
      check(ncclReduceScatter(send, recv, count, ncclFloat, ncclSum, comm, stream),
            "ncclReduceScatter");
      check(cudaStreamSynchronize(stream), "sync");
      got.assign(count, 0);
      check(cudaMemcpy(got.data(), recv, count * sizeof(float), cudaMemcpyDeviceToHost), "copy");
      want.assign(count, 0);
      for (int r = 0; r < nranks; ++r)
        for (size_t i = 0; i < count; ++i) want[i] += value(r, rank * count + i);
      checker.expect(got, want, "ReduceScatter", count);

      // AllReduce (sum) of `count` floats.
      check(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, stream), "ncclAllReduce");
      check(cudaStreamSynchronize(stream), "sync");
      check(cudaMemcpy(got.data(), recv, count * sizeof(float), cudaMemcpyDeviceToHost), "copy");
      for (size_t i = 0; i < count; ++i) {
        want[i] = 0;
        for (int r = 0; r < nranks; ++r) want[i] += value(r, i);
      }
      checker.expect(got, want, "AllReduce", count);

      // Send to the next rank, receive from the previous one.
      const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
      check(ncclGroupStart(), "ncclGroupStart");
      check(ncclSend(send, count, ncclFloat, next, comm, stream), "ncclSend");
      check(ncclRecv(recv, count, ncclFloat, prev, comm, stream), "ncclRecv");
      check(ncclGroupEnd(), "ncclGroupEnd");
      check(cudaStreamSynchronize(stream), "sync");
      check(cudaMemcpy(got.data(), recv, count * sizeof(float), cudaMemcpyDeviceToHost), "copy");
      for (size_t i = 0; i < count; ++i) want[i] = value(prev, i);
      checker.expect(got, want, "Send/Recv", count);

      check(cudaFree(send), "cudaFree");
      check(cudaFree(recv), "cudaFree");
    }
    check(ncclCommDestroy(comm), "ncclCommDestroy");
    check(cudaStreamDestroy(stream), "cudaStreamDestroy");
    if (checker.failures) {
      std::printf("nccl_e2e: rank %d FAILED (%d wrong results)\n", rank, checker.failures);
      return 1;
    }
    std::printf("nccl_e2e: rank %d all results correct\n", rank);
    return 0;
  } catch (const std::exception& e) {
    std::printf("nccl_e2e: rank %d FAILED: %s\n", rank, e.what());
    return 1;
  }
}

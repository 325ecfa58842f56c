// Buffers from sharc::allocShared: ranks of one host copy between them through mappings of
// each other's allocations. Results are checked against values computed here, across sizes
// that take every single-copy algorithm, and after an allocation is freed and another takes
// its place (a peer's cached mapping of the old one must not be used).
#include <gtest/gtest.h>
#include <sharc/sharc.h>

#include <cstring>
#include <fstream>
#include <set>
#include <sharc/communicator.hpp>
#include <sharc/error.hpp>
#include <sharc/memory.hpp>
#include <string>
#include <vector>

#include "multiprocess.hpp"

namespace sharc::testing {
namespace {

// Distinct allocShared memfds mapped in this process (this rank's own and its peers').
size_t mappedAllocations() {
  std::ifstream maps("/proc/self/maps");
  std::set<std::string> names;
  for (std::string line; std::getline(maps, line);)
    if (const auto at = line.find("/memfd:sharc-"); at != std::string::npos)
      names.insert(line.substr(at));
  return names.size();
}

// Value of element i of rank r's input (exact in float: small integers).
float input(int r, size_t i) {
  return static_cast<float>((r + 1) * 1000 + static_cast<int>(i % 997));
}

void checkCollectives(Communicator& comm, size_t count, const char* algo) {
  const int n = comm.size(), r = comm.rank();
  auto* send = static_cast<float*>(allocShared(count * n * sizeof(float)));
  auto* recv = static_cast<float*>(allocShared(count * n * sizeof(float)));
  for (size_t i = 0; i < count * n; ++i) send[i] = input(r, i);

  comm.allGather(send, recv, count, DataType::Float32);
  for (int q = 0; q < n; ++q)
    for (size_t i = 0; i < count; ++i)
      ASSERT_EQ(recv[q * count + i], input(q, i)) << algo << " allGather rank " << q << " i " << i;

  comm.reduceScatter(send, recv, count, DataType::Float32, RedOp::Sum);
  for (size_t i = 0; i < count; ++i) {
    double expected = 0;  // float64 reference
    for (int q = 0; q < n; ++q) expected += input(q, r * count + i);
    ASSERT_EQ(recv[i], static_cast<float>(expected)) << algo << " reduceScatter i " << i;
  }

  comm.allReduce(send, recv, count * n, DataType::Float32, RedOp::Max);
  for (size_t i = 0; i < count * n; ++i) ASSERT_EQ(recv[i], input(n - 1, i)) << algo;
  // With the single-copy algorithms forced, the peers' allocations are mapped here too (the
  // copies went through them, not through cross-memory attach).
  if (*algo != '\0') {
    EXPECT_GT(mappedAllocations(), 2u) << "only this rank's own are mapped";
  }
  freeShared(send);
  freeShared(recv);
}

TEST(SharedBuffers, CollectivesCopyThroughPeerMappings) {
  for (const char* algo :
       {"", "allgather:direct_write,reducescatter:direct_read,allreduce:direct_read"}) {
    RunOptions o;
    o.env["SHARC_FI_PROVIDER"] = "shm";
    o.env["SHARC_ALGO"] = algo;
    o.env["SHARC_TIMEOUT_MS"] = "30000";
    runRanks(
        3,
        [algo](const RankContext&) {
          auto comm = Communicator::createFromEnvironment();
          // Several rounds: allocations are freed and new ones reuse descriptors and fds.
          for (int round = 0; round < 3; ++round)
            for (size_t count : {size_t{1}, size_t{5000}, size_t{300007}})
              checkCollectives(*comm, count, algo);
        },
        o);
  }
}

TEST(SharedBuffers, FreeingAForeignPointerIsAnError) {
  int x = 0;
  EXPECT_THROW(freeShared(&x), Error);
  EXPECT_NO_THROW(freeShared(nullptr));
  void* p = nullptr;
  ASSERT_EQ(sharcMemAlloc(&p, 4096), sharcSuccess);
  EXPECT_EQ(static_cast<char*>(p)[4095], 0);
  EXPECT_EQ(sharcMemFree(p), sharcSuccess);
  EXPECT_EQ(sharcMemFree(&x), sharcInvalidArgument);
  EXPECT_EQ(sharcMemAlloc(nullptr, 16), sharcInvalidArgument);
}

}  // namespace
}  // namespace sharc::testing

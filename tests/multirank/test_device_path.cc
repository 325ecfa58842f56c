// The device path (docs/gpu.md) without a GPU: SHARC_DEVICE_PATH=host runs every collective's
// schedule with the host device queue standing in for the GPU (a worker thread that reduces,
// copies and divides asynchronously, finishing in an order of its own against the network),
// device scratch from that queue, and per link either libfabric shm's FI_HMEM registrations
// (direct) or staging through host memory (tcp, sharc's shared memory). A random-shape suite
// checks every collective, dtype and op, in place and out of place, against the float64
// reference on 2-8 ranks over 1-3 emulated nodes (two rails where tcp carries them), and that
// the flight record names the path each link layout takes. Then a cycle of aborts while
// operations are queued, which must leave no thread behind.
#include <dirent.h>
#include <gtest/gtest.h>
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <random>
#include <sharc/communicator.hpp>
#include <string>
#include <thread>
#include <vector>

#include "collective_check.hpp"
#include "multiprocess.hpp"

namespace sharc::testing {
namespace {

struct Layout {
  std::string name;
  std::vector<int> nodeOfRank;
  const char* provider;  ///< SHARC_FI_PROVIDER
  bool sharcShm;         ///< SHARC_SHM: ranks of a node exchange through sharc's shared memory
  bool twoRails;         ///< SHARC_NICS=lo,lo (tcp only)
  const char* algo;      ///< SHARC_ALGO ("" = the tuner's choice)
  const char* path;      ///< what the flight record must say
};
void PrintTo(const Layout& l, std::ostream* os) {
  *os << l.name;
}

class DevicePath : public ::testing::TestWithParam<Layout> {};

RunOptions deviceOptions(const Layout& l) {
  RunOptions o;
  o.env["SHARC_DEVICE_PATH"] = "host";
  o.env["SHARC_FI_PROVIDER"] = l.provider;
  o.env["SHARC_SHM"] = l.sharcShm ? "1" : "0";
  o.env["SHARC_CMA"] = "0";
  o.env["SHARC_CHUNK_BYTES"] = "4096";  // many chunks: the queue and the network overlap
  o.env["SHARC_TIMEOUT_MS"] = "60000";
  if (l.twoRails) o.env["SHARC_NICS"] = "lo,lo";
  if (*l.algo) o.env["SHARC_ALGO"] = l.algo;
  for (int node : l.nodeOfRank) o.nodeIds.push_back("node" + std::to_string(node));
  o.timeout = std::chrono::seconds(400);
  return o;
}

// Counts of every kind: empty, one, odd, a few chunks, many chunks (the same on every rank).
size_t randomCount(std::mt19937& rng) {
  switch (rng() % 6) {
    case 0: return 0;
    case 1: return 1;
    case 2: return 1 + 2 * (rng() % 50);
    case 3: return 1000 + rng() % 3000;
    default: return 5000 + rng() % 20000;
  }
}

TEST_P(DevicePath, RandomShapesMatchFloat64) {
  const Layout& l = GetParam();
  runRanks(
      static_cast<int>(l.nodeOfRank.size()),
      [&l](const RankContext&) {
        auto comm = Communicator::createFromEnvironment();
        std::mt19937 rng(20261205);  // the same shapes on every rank
        const int n = comm->size();
        for (int t = 0; t < kNumDataTypes; ++t) {
          const auto type = static_cast<DataType>(t);
          for (int o = 0; o < kNumRedOps; ++o) {
            const auto op = static_cast<RedOp>(o);
            for (Coll c : {Coll::ReduceScatter, Coll::AllReduce}) {
              const size_t count = randomCount(rng);
              const bool inPlace = rng() % 2 == 0;
              EXPECT_EQ(runAndCheck(*comm, c, type, op, count, inPlace), "")
                  << collName(c) << " " << dataTypeName(type) << " " << redOpName(op) << " count "
                  << count << (inPlace ? " in place" : "");
            }
          }
          for (Coll c : {Coll::AllGather, Coll::Broadcast}) {
            const size_t count = randomCount(rng);
            const bool inPlace = rng() % 2 == 0;
            const int root = static_cast<int>(rng() % static_cast<unsigned>(n));
            EXPECT_EQ(runAndCheck(*comm, c, type, RedOp::Sum, count, inPlace, root), "")
                << collName(c) << " " << dataTypeName(type) << " count " << count
                << (inPlace ? " in place" : "") << " root " << root;
          }
        }
        const std::string trace = comm->traceJson();
        EXPECT_NE(trace.find(std::string("\"") + l.path + "\""), std::string::npos)
            << "the flight record does not name the path " << l.path;
      },
      deviceOptions(l));
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, DevicePath,
    ::testing::Values(
        // libfabric shm registers the host queue's memory (FI_HMEM): every link direct.
        Layout{"r2_n1_shm_direct", {0, 0}, "shm", false, false, "", "device-direct"},
        // tcp has no FI_HMEM: every message staged through host memory.
        Layout{"r3_n1_tcp_staged_ring",
               {0, 0, 0},
               "tcp;ofi_rxm",
               false,
               false,
               "ring",
               "device-staged"},
        // sharc's shared memory within a node (staged), libfabric shm across (direct).
        Layout{
            "r4_n2_mixed_hier", {0, 0, 1, 1}, "shm", true, false, "hierarchical", "device-mixed"},
        Layout{"r5_n3_tcp_2rails_bruck",
               {0, 0, 1, 1, 2},
               "tcp;ofi_rxm",
               false,
               true,
               "bruck",
               "device-staged"},
        Layout{"r7_n3_mixed_uneven", {0, 0, 0, 1, 1, 2, 2}, "shm", true, false, "", "device-mixed"},
        // a Bruck across 3 nodes; small counts put several blocks in a piece (strided copies)
        Layout{"r6_n3_shm_hier_bruck",
               {0, 0, 1, 1, 2, 2},
               "shm",
               false,
               false,
               "hierarchical_bruck",
               "device-direct"},
        Layout{"r8_n2_tcp_2rails_hier",
               {0, 0, 0, 0, 1, 1, 1, 1},
               "tcp;ofi_rxm",
               true,
               true,
               "hierarchical",
               "device-staged"},
        Layout{"r8_n1_shm_recursive_doubling",
               {0, 0, 0, 0, 0, 0, 0, 0},
               "shm",
               false,
               false,
               "recursive_doubling",
               "device-direct"}),
    [](const auto& info) { return info.param.name; });

// Heap bytes in use (small blocks and mmapped ones): the host queue's device scratch and
// staging are heap allocations, so a leak per cycle shows here.
size_t heapInUse() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

// The names of this process's threads, sorted (sharc names its own "sharc-*").
std::vector<std::string> threadNames() {
  std::vector<std::string> names;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
      std::string name;
      std::getline(comm, name);
      names.push_back(name);
    }
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The thread names once they have held still for 100 ms (at most 5 s): a joined thread can
// stay listed in /proc/self/task for a moment after pthread_join returns, until the kernel
// has reaped it.
std::vector<std::string> settledThreadNames() {
  std::vector<std::string> names = threadNames();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (auto stillSince = std::chrono::steady_clock::now();
       std::chrono::steady_clock::now() < deadline &&
       std::chrono::steady_clock::now() - stillSince < std::chrono::milliseconds(100);) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::vector<std::string> now = threadNames();
    if (now != names) names = std::move(now), stillSince = std::chrono::steady_clock::now();
  }
  return names;
}

// Rank 0 aborts while a large AllReduce's reductions and copies are queued on the host device
// queue: every rank fails, and five such cycles leave no thread behind (the queue's worker and
// every engine thread stop with their communicator) and no scratch or staging (the heap in use
// stays within 4 MiB of what it was after the first cycle, where one cycle's scratch alone
// is 16 MiB).
TEST(DevicePathCycle, AbortWhileQueuedFailsEveryRankAndLeavesNothing) {
  Layout l{"cycle", {0, 1}, "shm", false, false, "ring", "device-direct"};
  RunOptions o = deviceOptions(l);
  o.env["SHARC_CHUNK_BYTES"] = "65536";
  o.env["SHARC_HOST_QUEUE_DELAY_US"] = "500";  // operations stay queued when the abort comes
  o.env["SHARC_DEBUG"] = "NONE";
  runRanks(
      2,
      [](const RankContext& ctx) {
        // Each cycle's communicator rendezvouses over `world`: the root server that
        // createFromEnvironment starts on rank 0 ends only once every rank has left, so it
        // would still be running on some cycles and not on others.
        auto world = Communicator::createFromEnvironment();
        std::vector<std::string> baseline;
        size_t heapBaseline = 0;
        for (int cycle = 0; cycle < 5; ++cycle) {
          SCOPED_TRACE("cycle " + std::to_string(cycle));
          auto comm = Communicator::createFromExchange(ctx.rank, ctx.size, exchangeOver(*world));
          std::vector<float> buf(size_t{8} << 20, 1.0f);  // 32 MiB: many queued reductions
          comm->allReduce(buf.data(), buf.data(), 1024, DataType::Float32, RedOp::Sum);
          if (ctx.rank == 0) {
            Request pending =
                comm->iallReduce(buf.data(), buf.data(), buf.size(), DataType::Float32, RedOp::Sum);
            std::thread aborter([&] {
              std::this_thread::sleep_for(std::chrono::milliseconds(30));
              comm->abort("device path abort test");
            });
            EXPECT_THROW(pending.wait(std::chrono::seconds(30)), Error);
            aborter.join();
          } else {
            EXPECT_THROW(
                comm->allReduce(buf.data(), buf.data(), buf.size(), DataType::Float32, RedOp::Sum),
                Error);
          }
          EXPECT_NE(comm->failure(), Result::Success);
          comm->destroy();
          comm.reset();
          if (cycle == 0) baseline = settledThreadNames(), heapBaseline = heapInUse();
          EXPECT_EQ(settledThreadNames(), baseline)
              << "threads left behind by a destroyed communicator";
          EXPECT_LT(heapInUse(), heapBaseline + (size_t{4} << 20))
              << "heap grew by " << (heapInUse() - heapBaseline) << " bytes since the first cycle";
        }
        world->destroy();
      },
      o);
}

}  // namespace
}  // namespace sharc::testing

// Collectives staged through host memory (src/gpu/staged_collective.hpp) over the host copy
// engine, which stands in for the CUDA one: the chunk plan, the engine itself, and every
// collective over real ranks checked element by element against the float64 reference.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <sharc/communicator.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "core/collective.hpp"
#include "core/config.hpp"
#include "gpu/host_device_queue.hpp"
#include "gpu/staged_collective.hpp"
#include "multiprocess.hpp"
#include "reference.hpp"

namespace sharc::testing {
namespace {

using gpu::DeviceQueue;
using gpu::HostDeviceQueue;
using gpu::StagedCall;
using gpu::StagingPool;
using Kind = CollectiveKind;
using namespace std::chrono_literals;

TEST(StagedChunkPlan, CoversEveryElementOnce) {
  for (DataType t : {DataType::Int8, DataType::BFloat16, DataType::Float32, DataType::Float64})
    for (size_t chunk : {size_t{1}, size_t{7}, size_t{256}, size_t{4096}, size_t{1} << 22})
      for (size_t count : {size_t{0}, size_t{1}, size_t{2}, size_t{63}, size_t{1001}, size_t{65537},
                           (size_t{1} << 20) + 3}) {
        const gpu::ChunkPlan p = gpu::planChunks(count, t, chunk);
        const size_t most = std::max<size_t>(1, chunk / dataTypeSize(t));
        ASSERT_EQ(p.count, count);
        ASSERT_EQ(p.chunks == 0, count == 0);
        size_t next = 0;
        for (size_t k = 0; k < p.chunks; ++k) {
          ASSERT_EQ(p.first(k), next) << "chunk " << k;
          ASSERT_GE(p.length(k), 1u);
          ASSERT_LE(p.length(k), most);
          next += p.length(k);
        }
        ASSERT_EQ(next, count) << dataTypeName(t) << " chunk " << chunk << " count " << count;
        const gpu::ChunkPlan again = gpu::planChunks(count, t, chunk);
        ASSERT_EQ(again.chunkElems, p.chunkElems);
        ASSERT_EQ(again.chunks, p.chunks);
      }
  EXPECT_THROW(gpu::planChunks(10, DataType::Float32, 0), Error);
  // Near-equal chunks: 4097 floats in 4 KiB chunks are 5 chunks, not 4 full ones and a stub.
  const gpu::ChunkPlan p = gpu::planChunks(4097, DataType::Float32, 4096);
  EXPECT_EQ(p.chunks, 5u);
  EXPECT_GE(p.length(4), 700u);
}

TEST(StagedConfig, ChunkFromEnvironment) {
  unsetenv("SHARC_GPU_STAGING_CHUNK");
  EXPECT_EQ(core::Config::load().gpuStagingChunkBytes, size_t{4} << 20);
  setenv("SHARC_GPU_STAGING_CHUNK", "64K", 1);
  EXPECT_EQ(core::Config::load().gpuStagingChunkBytes, size_t{64} << 10);
  setenv("SHARC_GPU_STAGING_CHUNK", "100", 1);
  try {
    (void)core::Config::load();
    ADD_FAILURE() << "SHARC_GPU_STAGING_CHUNK=100 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Result::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("SHARC_GPU_STAGING_CHUNK"), std::string::npos);
  }
  unsetenv("SHARC_GPU_STAGING_CHUNK");
}

TEST(HostDeviceQueue, ManyCopiesInFlightFinishInOrder) {
  HostDeviceQueue engine(std::chrono::microseconds(20));
  constexpr size_t kCopies = 600, kBytes = 1000;
  std::vector<unsigned char> src(kCopies * kBytes), dst(kCopies * kBytes, 0), chained(kBytes);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 31 + 7);
  engine.pause();
  std::vector<DeviceQueue::Ticket> tickets;
  for (size_t c = 0; c < kCopies; ++c) {
    engine.copy(&dst[c * kBytes], &src[c * kBytes], kBytes - c % 3);
    if (c % 10 == 9) tickets.push_back(engine.fence());
  }
  // A copy that reads what an earlier one wrote sees it: they run one after another.
  engine.copy(chained.data(), &dst[(kCopies - 1) * kBytes], kBytes);
  tickets.push_back(engine.fence());
  for (size_t i = 1; i < tickets.size(); ++i) ASSERT_GT(tickets[i], tickets[i - 1]);
  for (auto t : tickets) EXPECT_FALSE(engine.done(t));
  EXPECT_EQ(engine.opsRun(), 0u);
  engine.resume();
  // While they run, a finished fence implies every earlier one finished (asked latest
  // first, so that a fence seen done stays done for the ones asked after it).
  while (!engine.done(tickets.back())) {
    bool seenDone = false;
    for (size_t i = tickets.size(); i-- > 0;) {
      const bool d = engine.done(tickets[i]);
      if (seenDone) {
        ASSERT_TRUE(d) << "fence " << i << " not done after a later one";
      }
      seenDone = seenDone || d;
    }
  }
  engine.wait(tickets.back(), 10s);
  EXPECT_EQ(engine.opsRun(), kCopies + 1);
  for (size_t c = 0; c < kCopies; ++c)
    for (size_t b = 0; b < kBytes; ++b)
      ASSERT_EQ(dst[c * kBytes + b], b < kBytes - c % 3 ? src[c * kBytes + b] : 0) << c << "/" << b;
  EXPECT_EQ(std::memcmp(chained.data(), &dst[(kCopies - 1) * kBytes], kBytes), 0);
}

TEST(HostDeviceQueue, WaitTimesOutThenCompletes) {
  HostDeviceQueue engine;
  std::vector<char> a(4096, 'x'), b(4096, 0);
  engine.pause();
  engine.copy(b.data(), a.data(), a.size());
  const auto t = engine.fence();
  const auto before = std::chrono::steady_clock::now();
  try {
    engine.wait(t, 50ms);
    ADD_FAILURE() << "wait returned while the engine was paused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Result::Timeout);
  }
  EXPECT_GE(std::chrono::steady_clock::now() - before, 50ms);
  EXPECT_FALSE(engine.done(t));
  engine.resume();
  engine.wait(t, 10s);
  EXPECT_TRUE(engine.done(t));
  EXPECT_EQ(b, a);
}

TEST(HostDeviceQueue, StagingAndShutdown) {
  std::vector<int> src(100000, 3), dst(100000, 0);
  {
    HostDeviceQueue engine(std::chrono::microseconds(500));
    gpu::QueueMemory s = engine.allocateStaging(10000);
    ASSERT_TRUE(s);
    EXPECT_GE(s.bytes(), 10000u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(s.data()) % 4096, 0u);
    std::memset(s.data(), 1, s.bytes());
    EXPECT_TRUE(engine.allocateStaging(0));
    for (size_t i = 0; i < 10; ++i)
      engine.copy(&dst[i * 10000], &src[i * 10000], 10000 * sizeof(int));
  }  // the destructor runs the queued copies first
  EXPECT_EQ(dst, src);
}

// One staged collective, checked like collective_check.cc's runAndCheck.
struct Case {
  Kind kind;
  DataType type;
  RedOp op;
  size_t count;
  bool inPlace;
  size_t chunk;
  int root = 0;
};

std::string stagedCheck(Communicator& comm, StagingPool* pool, DeviceQueue& engine, const Case& c) {
  const int n = comm.size(), r = comm.rank();
  const size_t elem = dataTypeSize(c.type);
  const size_t sendCount = c.kind == Kind::ReduceScatter ? c.count * n : c.count;
  const size_t recvCount = c.kind == Kind::AllGather ? c.count * n : c.count;
  constexpr size_t kGuard = 64;
  const bool reduces = c.kind == Kind::ReduceScatter || c.kind == Kind::AllReduce;
  const RedOp fillOp = reduces ? c.op : RedOp::Sum;
  // In-place ReduceScatter's input holds the output; every other form has recv outermost.
  const bool sendOuter = c.inPlace && c.kind == Kind::ReduceScatter;
  std::vector<unsigned char> store((sendOuter ? sendCount : recvCount) * elem + 2 * kGuard, 0xA5);
  std::vector<unsigned char> sendStore(c.inPlace ? 0 : sendCount * elem + 1);
  unsigned char* outer = store.data() + kGuard;
  void* send = c.inPlace ? outer : sendStore.data();
  unsigned char* recv = outer;
  if (c.inPlace && c.kind == Kind::AllGather) send = outer + r * c.count * elem;
  if (sendOuter) recv = outer + r * c.count * elem;
  fillInput(send, c.type, fillOp, r, 0, sendCount);
  const std::vector<unsigned char> sendCopy = sendStore;

  StagedCall call{c.kind, send, recv, c.count, c.type, c.op, c.root};
  try {
    if (pool)
      gpu::runStaged(comm, *pool, call, c.chunk, 60s);
    else
      gpu::runStaged(comm, engine, call, c.chunk, 60s);
  } catch (const std::exception& e) {
    return std::string("threw: ") + e.what();
  }

  std::ostringstream errors;
  int bad = 0;
  for (size_t k = 0; k < recvCount; ++k) {
    double expected;
    if (c.kind == Kind::AllGather)
      expected = inputValue(c.type, RedOp::Sum, static_cast<int>(k / c.count), k % c.count);
    else if (c.kind == Kind::Broadcast)
      expected = inputValue(c.type, RedOp::Sum, c.root, k);
    else if (c.kind == Kind::ReduceScatter)
      expected = expectedReduce(c.type, c.op, n, r * c.count + k);
    else
      expected = expectedReduce(c.type, c.op, n, k);
    const double got = loadElement(recv, c.type, k);
    if (!matches(got, expected, c.type, c.op) && bad++ < 5)
      errors << describeMismatch(k, got, expected) << "; ";
  }
  for (size_t g = 0; g < kGuard; ++g)
    if (store[g] != 0xA5 || store[store.size() - 1 - g] != 0xA5) {
      errors << "write outside the buffers; ";
      ++bad;
      break;
    }
  if (sendStore != sendCopy) {
    errors << "sendbuff modified; ";
    ++bad;
  }
  if (bad == 0) return "";
  std::ostringstream os;
  os << "staged " << core::collectiveName(c.kind) << "(" << dataTypeName(c.type) << ", "
     << redOpName(c.op) << ", count " << c.count << (c.inPlace ? ", in-place" : "") << ", chunk "
     << c.chunk << ") on rank " << r << " of " << n << ": " << bad << " wrong: " << errors.str();
  return os.str();
}

RunOptions options() {
  RunOptions o;
  o.env["SHARC_TIMEOUT_MS"] = "60000";
  o.timeout = std::chrono::seconds(120);
  return o;
}

class Staged : public ::testing::TestWithParam<int> {};

// Every collective, type and op at counts 0, 1 and 1001, in many chunks and in one.
TEST_P(Staged, EveryCollectiveSmallCounts) {
  runRanks(
      GetParam(),
      [](const RankContext&) {
        auto comm = Communicator::createFromEnvironment();
        HostDeviceQueue engine;
        StagingPool pool(engine);
        const int last = comm->size() - 1;
        for (size_t chunk : {size_t{256}, size_t{1} << 30})
          for (size_t count : {size_t{0}, size_t{1}, size_t{1001}})
            for (DataType t :
                 {DataType::Float32, DataType::BFloat16, DataType::Int32, DataType::Float64})
              for (bool inPlace : {false, true}) {
                EXPECT_EQ(stagedCheck(*comm, &pool, engine,
                                      {Kind::AllGather, t, RedOp::Sum, count, inPlace, chunk}),
                          "");
                EXPECT_EQ(
                    stagedCheck(*comm, &pool, engine,
                                {Kind::Broadcast, t, RedOp::Sum, count, inPlace, chunk, last}),
                    "");
                for (RedOp op : {RedOp::Sum, RedOp::Max, RedOp::Avg}) {
                  EXPECT_EQ(stagedCheck(*comm, &pool, engine,
                                        {Kind::ReduceScatter, t, op, count, inPlace, chunk}),
                            "");
                  EXPECT_EQ(stagedCheck(*comm, &pool, engine,
                                        {Kind::AllReduce, t, op, count, inPlace, chunk}),
                            "");
                }
              }
        // The plan is the same on every rank.
        for (size_t count : {size_t{1001}, size_t{1} << 20}) {
          const gpu::ChunkPlan p = gpu::planChunks(count, DataType::BFloat16, 4096);
          const uint64_t mine[2] = {p.chunks, p.chunkElems};
          std::vector<uint64_t> all(2 * comm->size());
          comm->allGather(mine, all.data(), 2, DataType::Uint64);
          for (int r = 0; r < comm->size(); ++r) {
            EXPECT_EQ(all[2 * r], mine[0]);
            EXPECT_EQ(all[2 * r + 1], mine[1]);
          }
        }
      },
      options());
}

// ~1M elements in 4 KiB chunks (hundreds of them) and in one; a slow engine, one and two
// slots, and staging per call.
TEST_P(Staged, LargeCountsAndPipelineShapes) {
  runRanks(
      GetParam(),
      [](const RankContext&) {
        auto comm = Communicator::createFromEnvironment();
        HostDeviceQueue engine;
        StagingPool pool(engine);
        const size_t large = (size_t{1} << 20) / comm->size() + 3;
        for (size_t chunk : {size_t{4096}, size_t{1} << 30})
          for (bool inPlace : {false, true}) {
            const auto f32 = DataType::Float32;
            EXPECT_EQ(stagedCheck(*comm, &pool, engine,
                                  {Kind::AllGather, f32, RedOp::Sum, large, inPlace, chunk}),
                      "");
            EXPECT_EQ(stagedCheck(*comm, &pool, engine,
                                  {Kind::ReduceScatter, DataType::BFloat16, RedOp::Avg, large,
                                   inPlace, chunk}),
                      "");
            EXPECT_EQ(
                stagedCheck(*comm, &pool, engine,
                            {Kind::AllReduce, f32, RedOp::Sum, 2 * large + 1, inPlace, chunk}),
                "");
            EXPECT_EQ(stagedCheck(*comm, &pool, engine,
                                  {Kind::Broadcast, DataType::Int32, RedOp::Sum, large, inPlace,
                                   chunk, comm->size() / 2}),
                      "");
          }
        const size_t held = pool.bytesHeld();
        EXPECT_EQ(stagedCheck(*comm, &pool, engine,
                              {Kind::AllReduce, DataType::Float64, RedOp::Max, 5000, false, 4096}),
                  "");
        EXPECT_EQ(pool.bytesHeld(), held) << "the pool reallocated for a smaller call";

        HostDeviceQueue slow(std::chrono::microseconds(100));
        for (size_t slots : {1, 2}) {
          StagingPool few(slow, slots);
          for (Kind kind : {Kind::AllGather, Kind::ReduceScatter, Kind::AllReduce})
            EXPECT_EQ(stagedCheck(*comm, &few, slow,
                                  {kind, DataType::Float32, RedOp::Sum, 20000, false, 4096}),
                      "")
                << slots << " slots";
        }
        EXPECT_EQ(
            stagedCheck(*comm, nullptr, slow,
                        {Kind::ReduceScatter, DataType::Float64, RedOp::Avg, 3001, true, 4096}),
            "");
      },
      options());
}

INSTANTIATE_TEST_SUITE_P(Ranks, Staged, ::testing::Values(2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "ranks";
                         });

// Bad arguments throw before anything is sent; one rank works too.
TEST(StagedErrors, InvalidArgumentsAndOneRank) {
  runRanks(
      1,
      [](const RankContext&) {
        auto comm = Communicator::createFromEnvironment();
        HostDeviceQueue engine;
        std::vector<float> buf(100);
        const auto expectInvalid = [&](const StagedCall& call, size_t chunk) {
          try {
            gpu::runStaged(*comm, engine, call, chunk, 10s);
            ADD_FAILURE() << "accepted";
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), Result::InvalidArgument) << e.what();
          }
        };
        const auto f32 = DataType::Float32;
        expectInvalid({Kind::AllReduce, buf.data(), buf.data() + 1, 10, f32, RedOp::Sum, 0}, 4096);
        expectInvalid({Kind::AllReduce, nullptr, buf.data(), 10, f32, RedOp::Sum, 0}, 4096);
        expectInvalid({Kind::AllReduce, buf.data(), buf.data(), 10, f32, RedOp::Sum, 0}, 0);
        expectInvalid({Kind::Broadcast, buf.data(), buf.data(), 10, f32, RedOp::Sum, 1}, 4096);
        expectInvalid({Kind::AllReduce, buf.data(), buf.data(), 10, f32, static_cast<RedOp>(9), 0},
                      4096);
        for (Kind kind : {Kind::AllGather, Kind::ReduceScatter, Kind::AllReduce, Kind::Broadcast})
          for (bool inPlace : {false, true})
            EXPECT_EQ(stagedCheck(*comm, nullptr, engine,
                                  {kind, DataType::Float32, RedOp::Avg, 1001, inPlace, 256}),
                      "");
      },
      options());
}

// A rank that does not join: the staged call times out, and the slot its pending collective
// may still write is abandoned rather than freed. The peer joins late and both finish.
TEST(StagedErrors, TimeoutAbandonsPendingStaging) {
  runRanks(
      2,
      [](const RankContext& ctx) {
        auto comm = Communicator::createFromEnvironment();
        HostDeviceQueue engine;
        StagingPool pool(engine);
        std::vector<float> send(1000, 1.0f), recv(1000, 0.0f);
        const StagedCall call{
            Kind::AllReduce, send.data(), recv.data(), 1000, DataType::Float32, RedOp::Sum, 0};
        if (ctx.rank == 0) {
          try {
            gpu::runStaged(*comm, pool, call, size_t{1} << 20, 300ms);
            ADD_FAILURE() << "rank 0 finished without its peer";
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), Result::Timeout) << e.what();
          }
          EXPECT_EQ(pool.bytesHeld(), 0u) << "the pending collective's staging was freed";
        } else {
          std::this_thread::sleep_for(1500ms);
          gpu::runStaged(*comm, pool, call, size_t{1} << 20, 30s);
          EXPECT_EQ(recv, std::vector<float>(1000, 2.0f));
        }
        comm->barrier();
      },
      options());
}

}  // namespace
}  // namespace sharc::testing

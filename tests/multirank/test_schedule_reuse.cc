// Schedules rearmed for a repeated shape (ScheduleCache, Schedule::rearm): every call of a
// shape after the second runs an earlier call's schedule on new buffers, on the host and on
// the device path (over the host device queue). Results are checked against a float64
// reference on every call, the previous call's output must stay untouched, the flight record
// must show the reuse, two calls of one shape in flight at once must not share a schedule,
// and a rearmed schedule's scratch must move with the pool's.
#include <gtest/gtest.h>

#include <regex>
#include <sharc/communicator.hpp>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "multiprocess.hpp"

namespace sharc::testing {
namespace {

constexpr size_t kCount = 3001;  // float32 elements per rank: odd, several 4 KiB chunks

// Rank r's input element k on call `call`: small integers, exact in float32 when summed.
float input(int r, size_t k, int call) {
  return static_cast<float>((r + 1) * static_cast<int>(k % 13) + call);
}

// One call's buffers, with its expected output computed in float64.
struct Call {
  CollectiveKind kind;
  int n, r, id;
  std::vector<float> send, recv;
  bool inPlace;

  Call(CollectiveKind k, int size, int rank, int callId, bool inPlaceForm)
      : kind(k), n(size), r(rank), id(callId), inPlace(inPlaceForm) {
    const size_t total = kCount * static_cast<size_t>(n);
    const size_t sendCount = kind == CollectiveKind::ReduceScatter ? total : kCount;
    const size_t recvCount = kind == CollectiveKind::AllGather ? total : kCount;
    recv.assign(inPlace && kind == CollectiveKind::ReduceScatter ? total : recvCount, -1.0f);
    if (!inPlace) send.resize(sendCount);
    float* in = sendBuffer();
    for (size_t k = 0; k < sendCount; ++k) in[k] = input(r, k, id);
  }
  float* sendBuffer() {
    if (!inPlace) return send.data();
    return kind == CollectiveKind::AllGather ? recv.data() + static_cast<size_t>(r) * kCount
                                             : recv.data();
  }
  float* recvBuffer() {
    return inPlace && kind == CollectiveKind::ReduceScatter
               ? recv.data() + static_cast<size_t>(r) * kCount
               : recv.data();
  }
  Request start(Communicator& comm) {
    switch (kind) {
      case CollectiveKind::AllGather:
        return comm.iallGather(sendBuffer(), recvBuffer(), kCount, DataType::Float32);
      case CollectiveKind::ReduceScatter:
        return comm.ireduceScatter(sendBuffer(), recvBuffer(), kCount, DataType::Float32,
                                   RedOp::Sum);
      default:
        return comm.iallReduce(sendBuffer(), recvBuffer(), kCount, DataType::Float32, RedOp::Sum);
    }
  }
  // "" when the output is right, else the first wrong elements.
  std::string check() {
    const size_t outCount = kind == CollectiveKind::AllGather ? kCount * n : kCount;
    const float* out = recvBuffer();
    std::ostringstream bad;
    int wrong = 0;
    for (size_t k = 0; k < outCount; ++k) {
      double expected = 0;
      if (kind == CollectiveKind::AllGather) {
        expected = input(static_cast<int>(k / kCount), k % kCount, id);
      } else {
        const size_t at = kind == CollectiveKind::ReduceScatter ? r * kCount + k : k;
        for (int q = 0; q < n; ++q) expected += input(q, at, id);
      }
      if (static_cast<double>(out[k]) != expected && wrong++ < 3)
        bad << "element " << k << ": got " << out[k] << ", expected " << expected << "; ";
    }
    if (wrong == 0) return "";
    return core_name() + " call " + std::to_string(id) + (inPlace ? " (in place)" : "") +
           " on rank " + std::to_string(r) + ": " + std::to_string(wrong) + " wrong: " + bad.str();
  }
  std::string core_name() const {
    return kind == CollectiveKind::AllGather       ? "AllGather"
           : kind == CollectiveKind::ReduceScatter ? "ReduceScatter"
                                                   : "AllReduce";
  }
};

// How many of this process's calls of `count` elements rearmed a kept schedule, and how many
// were recorded in all.
std::pair<int, int> reusedCalls(const Communicator& comm) {
  const std::string json = comm.traceJson();
  static const std::regex re(
      R"re("internal":"","dtype":"\w+","count":(\d+),.*?"schedule_reused":(true|false))re");
  int reused = 0, calls = 0;
  for (auto it = std::sregex_iterator(json.begin(), json.end(), re); it != std::sregex_iterator();
       ++it) {
    if (std::stoul((*it)[1]) != kCount) continue;
    ++calls;
    if ((*it)[2] == "true") ++reused;
  }
  return {reused, calls};
}

struct Layout {
  std::string name;
  std::vector<int> nodeOfRank;
};
void PrintTo(const Layout& layout, std::ostream* os) {
  *os << layout.name;
}
// SHARC_ALGO, layout, and whether calls take the device path over the host device queue
// (SHARC_DEVICE_PATH=host: device scratch, and staging where a link has no FI_HMEM).
using Param = std::tuple<std::string, Layout, bool>;

class ScheduleReuse : public ::testing::TestWithParam<Param> {
 protected:
  RunOptions options(bool cache) const {
    RunOptions o;
    o.env["SHARC_FI_PROVIDER"] = "tcp;ofi_rxm";
    o.env["SHARC_ALGO"] = std::get<0>(GetParam());
    o.env["SHARC_CHUNK_BYTES"] = "4096";
    o.env["SHARC_TUNER_LEARN"] = "0";
    o.env["SHARC_TIMEOUT_MS"] = "60000";
    o.env["SHARC_SCHEDULE_CACHE"] = cache ? "1" : "0";
    if (std::get<2>(GetParam())) o.env["SHARC_DEVICE_PATH"] = "host";
    for (int node : std::get<1>(GetParam()).nodeOfRank)
      o.nodeIds.push_back("node" + std::to_string(node));
    return o;
  }
  int ranks() const { return static_cast<int>(std::get<1>(GetParam()).nodeOfRank.size()); }
};

// Per collective: out of place on four buffers, in place on three, then out of place again,
// each call on buffers of its own. Each call's output is checked, and the one before it must
// be unchanged afterwards. The first two calls of each form build (a shape is kept once it
// repeats); the others rearm: 4 of each collective's 8 calls.
TEST_P(ScheduleReuse, RepeatedShapesRearmOnNewBuffers) {
  runRanks(
      ranks(),
      [](const RankContext&) {
        auto comm = Communicator::createFromEnvironment();
        const int n = comm->size(), r = comm->rank();
        int id = 0;
        for (CollectiveKind kind : {CollectiveKind::AllGather, CollectiveKind::ReduceScatter,
                                    CollectiveKind::AllReduce}) {
          std::vector<Call> calls;
          calls.reserve(8);
          for (bool inPlace : {false, false, false, false, true, true, true, false}) {
            calls.emplace_back(kind, n, r, ++id, inPlace);
            calls.back().start(*comm).wait();
            EXPECT_EQ(calls.back().check(), "");
            if (calls.size() > 1) {
              EXPECT_EQ(calls[calls.size() - 2].check(), "");
            }
          }
        }
        EXPECT_EQ(reusedCalls(*comm), std::make_pair(12, 24));
      },
      options(true));
}

// Two calls of one shape in flight at once each get their own schedule (the second is kept);
// a third, after both finished, rearms it.
TEST_P(ScheduleReuse, CallsInFlightTogetherNeverShareASchedule) {
  runRanks(
      ranks(),
      [](const RankContext&) {
        auto comm = Communicator::createFromEnvironment();
        const int n = comm->size(), r = comm->rank();
        Call a(CollectiveKind::ReduceScatter, n, r, 1, false);
        Call b(CollectiveKind::ReduceScatter, n, r, 2, false);
        Request ra = a.start(*comm), rb = b.start(*comm);
        rb.wait();
        ra.wait();
        EXPECT_EQ(a.check(), "");
        EXPECT_EQ(b.check(), "");
        Call c(CollectiveKind::ReduceScatter, n, r, 3, false);
        c.start(*comm).wait();
        EXPECT_EQ(c.check(), "");
        EXPECT_EQ(reusedCalls(*comm), std::make_pair(1, 3));
      },
      options(true));
}

// A rearmed schedule's scratch moves where the pool hands out other memory: call t (in
// place, another shape) takes the scratch the kept schedule gave back, and stays in flight
// while a3 rearms that schedule. Were a3 still to use its old scratch, it would share t's.
TEST_P(ScheduleReuse, ScratchMovesWhenThePoolHandsOutOtherMemory) {
  runRanks(
      ranks(),
      [](const RankContext&) {
        auto comm = Communicator::createFromEnvironment();
        const int n = comm->size(), r = comm->rank();
        Call a1(CollectiveKind::ReduceScatter, n, r, 1, false);
        a1.start(*comm).wait();
        Call a2(CollectiveKind::ReduceScatter, n, r, 2, false);
        a2.start(*comm).wait();
        Call t(CollectiveKind::ReduceScatter, n, r, 3, true);
        Request rt = t.start(*comm);
        Call a3(CollectiveKind::ReduceScatter, n, r, 4, false);
        a3.start(*comm).wait();
        rt.wait();
        EXPECT_EQ(a1.check(), "");
        EXPECT_EQ(a2.check(), "");
        EXPECT_EQ(t.check(), "");
        EXPECT_EQ(a3.check(), "");
        EXPECT_EQ(reusedCalls(*comm), std::make_pair(1, 4));
      },
      options(true));
}

// SHARC_SCHEDULE_CACHE=0 builds every call.
TEST_P(ScheduleReuse, SwitchedOffBuildsEveryCall) {
  runRanks(
      ranks(),
      [](const RankContext&) {
        auto comm = Communicator::createFromEnvironment();
        for (int id = 1; id <= 3; ++id) {
          Call c(CollectiveKind::AllGather, comm->size(), comm->rank(), id, false);
          c.start(*comm).wait();
          EXPECT_EQ(c.check(), "");
        }
        EXPECT_EQ(reusedCalls(*comm), std::make_pair(0, 3));
      },
      options(false));
}

INSTANTIATE_TEST_SUITE_P(
    Algorithms, ScheduleReuse,
    ::testing::Values(Param{"ring", {"3ranks", {0, 1, 2}}, false},
                      Param{"bruck", {"5ranks", {0, 1, 2, 3, 4}}, false},
                      Param{"direct", {"3ranks", {0, 1, 2}}, false},
                      Param{"recursive_doubling", {"4ranks", {0, 1, 2, 3}}, false},
                      Param{"hierarchical", {"3plus2", {0, 0, 0, 1, 1}}, false},
                      Param{"hierarchical_bruck", {"3x2", {0, 0, 1, 1, 2, 2}}, false},
                      Param{"ring", {"3ranks", {0, 1, 2}}, true},
                      Param{"hierarchical_bruck", {"3x2", {0, 0, 1, 1, 2, 2}}, true}),
    [](const ::testing::TestParamInfo<Param>& info) {
      return std::get<0>(info.param) + "_" + std::get<1>(info.param).name +
             (std::get<2>(info.param) ? "_device_path" : "");
    });

}  // namespace
}  // namespace sharc::testing

// Communicator::abort: pending and later operations fail at once on this rank and on its peers,
// from any thread, failure() tells why the communicator failed, and cycles of create, abort
// and destroy leak no fd, thread or shared-memory segment.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <ostream>
#include <sharc/communicator.hpp>
#include <string>
#include <thread>
#include <vector>

#include "multiprocess.hpp"

namespace sharc::testing {
namespace {

using Clock = std::chrono::steady_clock;

RunOptions abortOptions() {
  RunOptions o;
  o.env["SHARC_FI_PROVIDER"] = "tcp;ofi_rxm";
  o.env["SHARC_TIMEOUT_MS"] = "20000";  // far above what any failure here may take
  o.env["SHARC_DEBUG"] = "NONE";
  o.timeout = std::chrono::seconds(60);
  return o;
}

// Rank 0 posts an all-reduce that rank 1 never joins, and aborts from another thread: the
// waiting thread gets the abort within a second, later calls fail, and rank 1 (waiting for a
// message rank 0 never sends) fails through the abort notice instead of at its timeout.
TEST(Abort, FromAnotherThreadFailsPendingAndLaterOperationsOnEveryRank) {
  runRanks(
      2,
      [](const RankContext& ctx) {
        auto comm = Communicator::createFromEnvironment();
        comm->barrier();
        EXPECT_EQ(comm->failure(), Result::Success);
        if (ctx.rank == 0) {
          std::vector<float> buf(1024, 1.0f);
          Request pending =
              comm->iallReduce(buf.data(), buf.data(), buf.size(), DataType::Float32, RedOp::Sum);
          std::thread aborter([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
            comm->abort("test abort");
          });
          const auto start = Clock::now();
          try {
            pending.wait();
            ADD_FAILURE() << "the pending all-reduce completed without its peer";
          } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("test abort"), std::string::npos) << e.what();
          }
          EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(1200));
          aborter.join();
          EXPECT_THROW(comm->barrier(), Error);
          std::string why;
          EXPECT_EQ(comm->failure(&why), Result::InvalidUsage);
          EXPECT_NE(why.find("test abort"), std::string::npos) << why;
          comm->abort("twice is harmless");
        } else {
          int32_t never = 0;
          const auto start = Clock::now();
          try {
            comm->irecv(&never, sizeof never, 0, 7).wait();
            ADD_FAILURE() << "rank 1 received a message rank 0 never sent";
          } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
          }
          EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
          std::string why;
          EXPECT_EQ(comm->failure(&why), Result::RemoteError);
          EXPECT_NE(why.find("test abort"), std::string::npos) << why;
        }
        const auto start = Clock::now();
        comm->destroy();  // no closing barrier after an abort
        EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
      },
      abortOptions());
}

// setTimeout bounds the operations started after it; a rank whose peer comes too late fails
// with Timeout, and the peer fails through the failing rank's notice.
TEST(Abort, SetTimeoutBoundsLaterOperations) {
  runRanks(
      2,
      [](const RankContext& ctx) {
        auto comm = Communicator::createFromEnvironment();
        EXPECT_THROW(comm->setTimeout(std::chrono::milliseconds(0)), Error);
        int32_t one = 1, sum = 0;
        comm->allReduce(&one, &sum, 1, DataType::Int32, RedOp::Sum);  // within the 20 s
        if (ctx.rank == 0) {
          comm->setTimeout(std::chrono::milliseconds(300));
          const auto start = Clock::now();
          try {
            comm->allReduce(&one, &sum, 1, DataType::Int32, RedOp::Sum);
            ADD_FAILURE() << "completed although rank 1 came 3 s late";
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), Result::Timeout) << e.what();
          }
          EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
          EXPECT_EQ(comm->failure(), Result::Timeout);
        } else {
          std::this_thread::sleep_for(std::chrono::seconds(3));
          EXPECT_THROW(comm->allReduce(&one, &sum, 1, DataType::Int32, RedOp::Sum), Error);
          EXPECT_EQ(comm->failure(), Result::RemoteError);
        }
      },
      abortOptions());
}

// Aborting a communicator leaves the others on the same endpoint (its parent) working.
TEST(Abort, OfASplitLeavesTheParentUsable) {
  runRanks(
      2,
      [](const RankContext&) {
        auto comm = Communicator::createFromEnvironment();
        auto child = comm->split(0, 0);
        child->abort("only the child");
        int32_t one = 1, sum = 0;
        EXPECT_THROW(child->allReduce(&one, &sum, 1, DataType::Int32, RedOp::Sum), Error);
        child->destroy();
        comm->allReduce(&one, &sum, 1, DataType::Int32, RedOp::Sum);
        EXPECT_EQ(sum, 2);
        EXPECT_EQ(comm->failure(), Result::Success);
      },
      abortOptions());
}

// Aborting a communicator reaches every communicator split from it, transitively: a call
// pending on a grandchild fails on this rank within a second, later calls on the splits fail,
// and the peers' pending calls on the splits fail through the notices, well before the timeout.
TEST(Abort, OfAParentReachesItsSplits) {
  runRanks(
      2,
      [](const RankContext& ctx) {
        auto comm = Communicator::createFromEnvironment();
        auto child = comm->split(0, ctx.rank);
        auto grandchild = child->split(0, ctx.rank);
        std::vector<float> buf(1024, 1.0f);
        const auto start = Clock::now();
        if (ctx.rank == 0) {
          Request pending = grandchild->iallReduce(buf.data(), buf.data(), buf.size(),
                                                   DataType::Float32, RedOp::Sum);
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          comm->abort("the parent");
          EXPECT_THROW(pending.wait(), Error);
          EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(1200));
          std::string why;
          EXPECT_EQ(grandchild->failure(&why), Result::InvalidUsage);
          EXPECT_NE(why.find("the parent"), std::string::npos) << why;
          EXPECT_THROW(child->barrier(), Error);
        } else {
          // Rank 1 waits on the grandchild for a message rank 0 never sends: the notice ends it.
          int32_t never = 0;
          try {
            grandchild->irecv(&never, sizeof never, 0, 7).wait();
            ADD_FAILURE() << "rank 1 received a message rank 0 never sent";
          } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("the parent"), std::string::npos) << e.what();
          }
          EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
        }
      },
      abortOptions());
}

// ---- cycles of create, collectives, abort, destroy ---------------------------------------

constexpr int kCycles = 20;
constexpr int kMaxRanks = 4;
constexpr int64_t kUnset = -1;

int64_t nowNs() {  // steady_clock is CLOCK_MONOTONIC: comparable across the ranks' processes
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// Shared by the forked ranks and the parent (an anonymous shared mapping made before the
// fork): when each cycle's abort was called, and how long each rank's failure took after it.
struct CycleRecord {
  std::atomic<int64_t> abortAt[kCycles];
  std::atomic<int64_t> abortReturned[kCycles];
  std::atomic<int> lateCompleted;  // late calls that completed before the notice (see below)
  std::atomic<int64_t> failedAfterNs[kCycles][kMaxRanks];  // this rank's collective
  std::atomic<int64_t> laterCallNs[kCycles][kMaxRanks];    // a call made after the failure
  std::atomic<int64_t> destroyNs[kCycles][kMaxRanks];
};

struct Resources {
  int fds = 0, threads = 0, shmNames = 0, shmMappings = 0;
  bool operator==(const Resources&) const = default;
  std::string str() const {
    return std::to_string(fds) + " fds, " + std::to_string(threads) + " threads, " +
           std::to_string(shmNames) + " /dev/shm names, " + std::to_string(shmMappings) +
           " /dev/shm mappings";
  }
};

void PrintTo(const Resources& r, std::ostream* os) {
  *os << r.str();
}

int countDir(const char* path, const std::function<bool(const std::string&)>& keep) {
  int n = 0;
  if (DIR* d = opendir(path)) {
    while (const dirent* e = readdir(d))
      if (e->d_name[0] != '.' && keep(e->d_name)) ++n;
    closedir(d);
  }
  return n;
}

// What this process holds: open fds, threads, the /dev/shm names sharc's transport
// ("sharc-<pid>-...") and libfabric's shm provider ("<pid>:...") made for it, and mappings of
// /dev/shm files (a segment unlinked by name but still mapped shows up only there).
Resources resources() {
  const std::string pid = std::to_string(getpid());
  Resources r;
  r.fds = countDir("/proc/self/fd", [](const std::string&) { return true; });
  r.threads = countDir("/proc/self/task", [](const std::string&) { return true; });
  r.shmNames = countDir("/dev/shm", [&](const std::string& name) {
    return name.rfind("sharc-" + pid + "-", 0) == 0 || name.rfind(pid + ":", 0) == 0;
  });
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find("/dev/shm/") != std::string::npos) ++r.shmMappings;
  return r;
}

int64_t elapsedNs(int64_t since) {
  return nowNs() - since;
}

// One cycle on a fresh communicator: collectives checked, then rank a's thread waits in an
// all-reduce that rank `late` has not joined while a's main thread aborts; every other rank
// waits in the same all-reduce. Then rank `late` calls it, everyone calls once more, destroys.
void abortCycle(Communicator& world, int cycle, CycleRecord& rec) {
  const int n = world.size(), me = world.rank();
  const int a = cycle % n, late = (a + 1) % n;
  auto comm = Communicator::createFromExchange(me, n, exchangeOver(world));
  int64_t one = me + 1, sum = 0;
  comm->allReduce(&one, &sum, 1, DataType::Int64, RedOp::Sum);
  ASSERT_EQ(sum, int64_t{n} * (n + 1) / 2);
  std::vector<int32_t> ranks(static_cast<size_t>(n), -1);
  const int32_t mine = me;
  comm->allGather(&mine, ranks.data(), 1, DataType::Int32);
  for (int r = 0; r < n; ++r) ASSERT_EQ(ranks[r], r);
  // Every rank is done with those before rank a aborts (an abort fails what a slower rank has
  // not finished yet, even when all its data had arrived).
  world.barrier();

  const std::string reason = "cycle " + std::to_string(cycle);
  std::vector<float> buf(4096, 1.0f);
  auto expectAbortError = [&](const std::function<void()>& call, const char* what) {
    try {
      call();
      ADD_FAILURE() << "rank " << me << ", " << reason << ": " << what << " completed";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
      if (me != a) {
        EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(a)), std::string::npos)
            << e.what();
      }
    }
  };
  auto allReduce = [&] {
    comm->allReduce(buf.data(), buf.data(), buf.size(), DataType::Float32, RedOp::Sum);
  };
  if (me == a) {
    std::atomic<int64_t> failedAt{0};
    std::atomic<bool> calling{false};
    std::thread waiter([&] {
      calling = true;
      expectAbortError(allReduce, "the all-reduce rank late never joined");
      failedAt = nowNs();
    });
    while (!calling) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // the waiter is in its wait
    const int64_t t0 = nowNs();
    rec.abortAt[cycle] = t0;
    comm->abort(reason);
    rec.abortReturned[cycle] = nowNs();
    waiter.join();
    rec.failedAfterNs[cycle][me] = failedAt - t0;
  } else if (me == late) {
    const auto giveUp = Clock::now() + std::chrono::seconds(20);
    while (rec.abortReturned[cycle].load() == kUnset && Clock::now() < giveUp)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_NE(rec.abortReturned[cycle].load(), kUnset) << "rank " << a << " never aborted";
    const int64_t t0 = nowNs();
    // The notice is not ordered with the data rank a sent before its abort: on 2 ranks this
    // call may find all it needs already there and complete before it sees the notice (then
    // with the right sum); otherwise it fails naming the abort.
    try {
      allReduce();
      ++rec.lateCompleted;
      EXPECT_TRUE(std::all_of(buf.begin(), buf.end(), [&](float x) { return x == n; }))
          << reason << ": the late all-reduce completed with a wrong sum";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(a)), std::string::npos)
          << e.what();
    }
    rec.failedAfterNs[cycle][me] = elapsedNs(t0);
  } else {
    expectAbortError(allReduce, "the all-reduce rank late never joined");
    rec.failedAfterNs[cycle][me] = nowNs() - rec.abortAt[cycle].load();
  }
  // Once the failure is known here, later calls fail at once.
  const int64_t t1 = nowNs();
  expectAbortError([&] { comm->barrier(); }, "a barrier after the failure");
  rec.laterCallNs[cycle][me] = elapsedNs(t1);
  const int64_t t2 = nowNs();
  comm->destroy();
  comm.reset();
  rec.destroyNs[cycle][me] = elapsedNs(t2);
  world.barrier();
}

int64_t medianOf(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct CycleParam {
  int ranks;
  const char* provider;
};

void PrintTo(const CycleParam& p, std::ostream* os) {
  *os << p.ranks << " ranks over " << p.provider;
}

class AbortCycles : public ::testing::TestWithParam<CycleParam> {};

// abort() from another thread wakes the thread waiting in a collective within 100 ms (the
// median; a single wake may take 400 ms more on a loaded machine, see below); the peers, and
// a rank that calls the collective late, fail through the notice well under their 20 s
// timeout, naming the aborting rank; later calls fail at once; and 20 cycles of create,
// collectives, abort and destroy leave as many fds, threads and /dev/shm names and mappings
// as there were (counted after a first cycle: libfabric keeps a few objects per process).
TEST_P(AbortCycles, FailFastAndLeakNothing) {
  const CycleParam param = GetParam();
  void* mem =
      mmap(nullptr, sizeof(CycleRecord), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* rec = new (mem) CycleRecord;
  rec->lateCompleted = 0;
  for (int c = 0; c < kCycles; ++c) {
    rec->abortAt[c] = rec->abortReturned[c] = kUnset;
    for (int r = 0; r < kMaxRanks; ++r)
      rec->failedAfterNs[c][r] = rec->laterCallNs[c][r] = rec->destroyNs[c][r] = kUnset;
  }
  RunOptions o = abortOptions();
  o.env["SHARC_FI_PROVIDER"] = param.provider;
  o.env["SHARC_SHM"] = "1";  // the shared-memory transport between the ranks of this host
  o.timeout = std::chrono::seconds(300);
  // The parent serves the rendezvous: no root-server thread ends in a rank mid-count.
  o.rendezvous = Rendezvous::UniqueIdFromParent;
  runRanks(
      param.ranks,
      [rec](const RankContext& ctx) {
        UniqueId id;
        std::memcpy(id.bytes.data(), ctx.uniqueId.data(), id.bytes.size());
        auto world = Communicator::create(id, ctx.size, ctx.rank);
        abortCycle(*world, 0, *rec);  // the first one leaves libfabric's per-process objects
        const Resources before = resources();
        for (int c = 1; c < kCycles; ++c) {
          abortCycle(*world, c, *rec);
          if (::testing::Test::HasFatalFailure()) return;
        }
        // A moment for the provider's own threads and fds of the last endpoint to go.
        Resources after = resources();
        for (int i = 0; i < 50 && !(after == before); ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          after = resources();
        }
        EXPECT_EQ(after, before) << "rank " << world->rank() << ": before " << before.str()
                                 << "; after " << kCycles - 1 << " cycles " << after.str();
      },
      o);

  // Bounds. The waiting thread of the aborting rank: 100 ms for the median; each single
  // wake within 500 ms, as the waiter (sleeping 50 us between polls) may wait for a core:
  // with two cores and a dozen runnable processes, CFS runs a thread within a few of its
  // 24 ms scheduling periods. The peers: the notice crosses one more process, same slack.
  std::vector<int64_t> own, peers, later;
  for (int c = 0; c < kCycles; ++c) {
    const int a = c % param.ranks;
    for (int r = 0; r < param.ranks; ++r) {
      const int64_t f = rec->failedAfterNs[c][r];
      ASSERT_NE(f, kUnset) << "cycle " << c << " rank " << r << " recorded no failure";
      (r == a ? own : peers).push_back(f);
      EXPECT_LT(f, r == a ? 500'000'000 : 2'000'000'000) << "cycle " << c << " rank " << r;
      later.push_back(rec->laterCallNs[c][r]);
      EXPECT_LT(rec->laterCallNs[c][r], 100'000'000) << "cycle " << c << " rank " << r;
      EXPECT_LT(rec->destroyNs[c][r], 1'000'000'000) << "cycle " << c << " rank " << r;
    }
  }
  EXPECT_LT(medianOf(own), 100'000'000);
  EXPECT_LT(medianOf(peers), 100'000'000);
  std::printf(
      "abort on %d ranks over %s: waiting thread woke after %.2f ms (median, max %.2f), "
      "peers failed after %.2f ms (median, max %.2f), later calls %.3f ms (median); "
      "%d late call(s) of %d completed before the notice\n",
      param.ranks, param.provider, medianOf(own) / 1e6,
      *std::max_element(own.begin(), own.end()) / 1e6, medianOf(peers) / 1e6,
      *std::max_element(peers.begin(), peers.end()) / 1e6, medianOf(later) / 1e6,
      rec->lateCompleted.load(), kCycles);
  if (param.ranks > 2) {
    EXPECT_EQ(rec->lateCompleted.load(), 0) << "a late call needs every rank's data";
  }
  munmap(mem, sizeof(CycleRecord));
}

INSTANTIATE_TEST_SUITE_P(Abort, AbortCycles,
                         ::testing::Values(CycleParam{2, "tcp;ofi_rxm"}, CycleParam{3, "shm"},
                                           CycleParam{4, "tcp;ofi_rxm"}),
                         [](const ::testing::TestParamInfo<CycleParam>& info) {
                           return std::to_string(info.param.ranks) + "ranks_" +
                                  (info.param.provider[0] == 's' ? "shm" : "tcp");
                         });

}  // namespace
}  // namespace sharc::testing

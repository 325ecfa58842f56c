// Soak test: many small and large collectives over communicators split from the world and
// destroyed along the way, every result checked against the float64/int64 reference of
// tests/harness/reference.hpp; resident memory, open fds, threads and /dev/shm mappings
// sampled per rank after a warm-up and required to stay flat.
//
//   sharc_soak --ranks 4 --small 100000 --large 1000     (launcher: starts the ranks itself)
//   sharc_soak --as-rank ...                             (one rank of a job from the environment)
//
// The launcher (tools/launcher) re-executes this program once per rank with SHARC_ROOT,
// SHARC_RANK and SHARC_WORLD_SIZE set; each rank joins with
// Communicator::createFromEnvironment().
#include <dirent.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <sharc/communicator.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "launcher.hpp"
#include "soak_check.hpp"
#include "soak_sampler.hpp"

namespace {

using sharc::Communicator;
using sharc::DataType;
using sharc::RedOp;
using sharc::soak::Call;

struct Options {
  int ranks = 4;
  long small = 100000;      // small collectives (1-1000 elements), world and splits
  long large = 1000;        // large collectives (1-8 MiB), spread evenly among the small
  long splitEvery = 1000;   // a new split (the old one destroyed) every this many small calls
  long warmup = 5000;       // small calls before the first sample
  long sampleEvery = 1000;  // small calls between samples
  long rssBoundKiB = 8192;  // allowed RSS growth after the warm-up (allocator, fabric pools)
  long heapBoundKiB = 256;  // allowed growth of malloc's bytes in use after the warm-up
  unsigned long long seed = 1;
  int deadlineS = 3600;    // the launcher kills every rank after this
  std::string samplesCsv;  // prefix of per-rank CSV files of the samples
  // The launcher makes this directory and sets SHARC_TRACE_SOCKET to it; each rank then asks
  // its own trace socket for its flight record before every sample ("" = off).
  std::string traceSocket;
  bool noTraceSocket = false;  // --no-trace-socket: leave SHARC_TRACE_SOCKET unset
  // Self-test of the checks (rank 0 only): "corrupt" a result byte, leak an "fd" or "rss"
  // (16 MiB, touched) at small call `injectAt` (the first eligible point from there).
  std::string inject;
  long injectAt = 0;
  bool asRank = false;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(
      stderr,
      "sharc_soak: %s\n"
      "usage: sharc_soak [--ranks N] [--small N] [--large N] [--split-every N]\n"
      "                  [--sample-every N] [--warmup N] [--rss-bound-kib N] [--heap-bound-kib N]\n"
      "                  [--seed N] [--deadline S]\n"
      "                  [--samples-csv PREFIX] [--inject corrupt|fd|rss --inject-at N]\n"
      "                  [--no-trace-socket]\n",
      why);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--as-rank" || a == "--no-trace-socket") {
      (a == "--as-rank" ? o.asRank : o.noTraceSocket) = true;
      continue;
    }
    if (i + 1 >= argc) usage(("missing value after " + a).c_str());
    if (a == "--samples-csv" || a == "--inject" || a == "--trace-socket") {
      (a == "--inject"         ? o.inject
       : a == "--trace-socket" ? o.traceSocket
                               : o.samplesCsv) = argv[++i];
      continue;
    }
    char* end = nullptr;
    const long long v = std::strtoll(argv[++i], &end, 10);
    if (*end != '\0' || v < 0) usage(("bad value for " + a + ": " + argv[i]).c_str());
    if (a == "--ranks")
      o.ranks = static_cast<int>(v);
    else if (a == "--small")
      o.small = v;
    else if (a == "--large")
      o.large = v;
    else if (a == "--split-every")
      o.splitEvery = v;
    else if (a == "--warmup")
      o.warmup = v;
    else if (a == "--sample-every")
      o.sampleEvery = v;
    else if (a == "--rss-bound-kib")
      o.rssBoundKiB = v;
    else if (a == "--heap-bound-kib")
      o.heapBoundKiB = v;
    else if (a == "--seed")
      o.seed = static_cast<unsigned long long>(v);
    else if (a == "--deadline")
      o.deadlineS = static_cast<int>(v);
    else if (a == "--inject-at")
      o.injectAt = v;
    else
      usage(("unknown option " + a).c_str());
  }
  if (o.ranks < 2 || o.ranks > 8) usage("--ranks must be 2..8");
  if (o.splitEvery < 1 || o.sampleEvery < 1) usage("--split-every and --sample-every must be >= 1");
  if (o.warmup >= o.small) usage("--warmup must be below --small (no sample would be taken)");
  if (!o.inject.empty() && o.inject != "corrupt" && o.inject != "fd" && o.inject != "rss")
    usage("--inject takes corrupt, fd or rss");
  return o;
}

// ---- one rank -----------------------------------------------------------------------------

const DataType kTypes[] = {
    DataType::Int8,   DataType::Uint8,   DataType::Int32,   DataType::Uint32,  DataType::Int64,
    DataType::Uint64, DataType::Float16, DataType::Float32, DataType::Float64, DataType::BFloat16};
const RedOp kOps[] = {RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min, RedOp::Avg};

// Draws the next call from the generator every rank steps identically. `bytesTarget` > 0
// makes a large call whose biggest buffer has about that many bytes.
Call drawCall(std::mt19937_64& rng, int commSize, size_t bytesTarget) {
  Call c;
  c.coll = static_cast<sharc::soak::Coll>(rng() % 5);
  if (bytesTarget > 0 && c.coll == sharc::soak::Coll::Barrier)
    c.coll = sharc::soak::Coll::AllReduce;
  c.type = kTypes[rng() % std::size(kTypes)];
  c.op = kOps[rng() % std::size(kOps)];
  c.inPlace = rng() % 4 == 0;
  c.polled = rng() % 8 == 0;
  c.root = static_cast<int>(rng() % static_cast<unsigned>(commSize));
  c.first = rng() % 100003;  // shifts the inputs: a stale result from an earlier call fails
  const size_t elem = sharc::dataTypeSize(c.type);
  if (bytesTarget > 0) {
    const bool perRank =
        c.coll == sharc::soak::Coll::AllGather || c.coll == sharc::soak::Coll::ReduceScatter;
    c.count = std::max<size_t>(1, bytesTarget / elem / (perRank ? commSize : 1));
  } else {
    c.count = 1 + rng() % 1000;
  }
  return c;
}

// The split made at rotation `k`: halves, odd/even, a random color per rank (some ranks in
// none), or a nested split of halves. Every rank draws the same colors from the shared
// generator. Returns the communicator to use and keeps its parent alive in `parent`.
std::shared_ptr<Communicator> makeSplit(Communicator& world, long k, std::mt19937_64& rng,
                                        std::shared_ptr<Communicator>& parent, std::string& name) {
  const int n = world.size(), r = world.rank();
  std::vector<int> colors(static_cast<size_t>(n));
  for (int& c : colors) c = static_cast<int>(rng() % 3) - 1;  // -1 (none), 0, 1
  const int key = static_cast<int>(rng() % 2) ? r : n - r;    // sometimes reversed order
  parent.reset();
  switch (k % 4) {
    case 0: name = "halves"; return world.split(r < n / 2 ? 0 : 1, key);
    case 1: name = "odd/even"; return world.split(r % 2, key);
    case 2: name = "random colors"; return world.split(colors[static_cast<size_t>(r)], key);
    default: {
      name = "nested (odd/even of halves)";
      parent = world.split(r < n / 2 ? 0 : 1, r);
      return parent->split(parent->rank() % 2, key);
    }
  }
}

void releaseSplit(std::shared_ptr<Communicator>& sub, std::shared_ptr<Communicator>& parent,
                  long k) {
  // Alternate an explicit destroy() with the destructor alone: both paths must free all.
  if (k % 2 == 0) {
    if (sub) sub->destroy();
    if (parent) parent->destroy();
  }
  sub.reset();
  parent.reset();
}

// The flight record through the API and, when on, through this rank's trace socket (served
// by the engine's watch thread): both must answer, and neither may leave anything behind.
void queryTrace(const Communicator& world, const std::string& socketDir) {
  const std::string json = world.traceJson();
  const std::string who = "rank " + std::to_string(world.rank()) + ": ";
  if (json.empty() || json.front() != '{' || json.find("\"seq\"") == std::string::npos)
    throw std::runtime_error(who + "traceJson() returned no record: " + json.substr(0, 200));
  if (socketDir.empty()) return;
  const std::string suffix = "-rank" + std::to_string(world.rank()) + ".sock";
  std::string path;
  if (DIR* d = opendir(socketDir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.size() > suffix.size() &&
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
        path = socketDir + "/" + name;
    }
    closedir(d);
  }
  if (path.empty())
    throw std::runtime_error(who + "no trace socket *" + suffix + " in " + socketDir);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  timeval tv{30, 0};  // the watch thread answers within a tick or a second of a busy engine
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string got;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    char buf[65536];
    for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) got.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  if (got.empty() || got.front() != '{')
    throw std::runtime_error(who + "no flight record from the trace socket " + path);
}

// Leaks on purpose what --inject names (rank 0, once): the checks must then fail.
unsigned char* volatile leaked = nullptr;
struct Injector {
  const Options& o;
  int rank;
  bool done = false;
  bool due(long i, const char* what) {
    return !done && rank == 0 && o.inject == what && i >= o.injectAt;
  }
  void leakAtSample(long i) {
    if (due(i, "fd")) {
      done = true;
      if (dup(1) < 0) throw std::runtime_error("dup failed");
    } else if (due(i, "rss")) {
      done = true;
      auto* leak = new unsigned char[16 << 20];
      std::memset(leak, 1, 16 << 20);
      leaked = leak;  // escapes: the optimizer may not drop the allocation
    }
  }
};

int runRankIn(Communicator* world, std::shared_ptr<Communicator>& sub,
              std::shared_ptr<Communicator>& parent, const Options& o);

int runRank(const Options& o) {
  auto world = Communicator::createFromEnvironment();
  std::shared_ptr<Communicator> sub, parent;  // alive until the abort below
  try {
    return runRankIn(world.get(), sub, parent, o);
  } catch (const std::exception& e) {
    // Aborting the world aborts its splits too: the other ranks fail at once instead of
    // waiting for this one until their timeout, and no closing barrier waits here.
    world->abort(e.what());
    throw;
  }
}

int runRankIn(Communicator* world, std::shared_ptr<Communicator>& sub,
              std::shared_ptr<Communicator>& parent, const Options& o) {
  const int rank = world->rank();
  Injector injector{o, rank};
  std::mt19937_64 rng(o.seed);  // identical on every rank: the plan of calls is shared
  sharc::soak::Buffers buffers;
  sharc::soak::Sampler sampler;
  std::string subName = "none";
  const long largeEvery = o.large > 0 ? std::max<long>(1, o.small / o.large) : 0;
  long largeDone = 0, splits = 0, skipped = 0;
  const auto start = std::chrono::steady_clock::now();

  for (long i = 0; i < o.small; ++i) {
    const bool rotate = i % o.splitEvery == 0;
    if (rotate) releaseSplit(sub, parent, splits);
    // Sampled between the old split's release and the new one's creation when they coincide.
    if (i >= o.warmup && i % o.sampleEvery == 0) {
      injector.leakAtSample(i);
      queryTrace(*world, o.traceSocket);
      sampler.sample(i);
    }
    if (rotate) sub = makeSplit(*world, splits++, rng, parent, subName);
    const bool onSplit = rng() % 2 == 0;
    Communicator* comm = onSplit ? sub.get() : world;
    const int size = onSplit ? (sub ? sub->size() : 0) : world->size();
    Call call = drawCall(rng, std::max(size, 1), 0);
    if (comm == world && call.coll != sharc::soak::Coll::Barrier && injector.due(i, "corrupt")) {
      injector.done = true;
      call.corrupt = true;
    }
    if (comm) {
      sharc::soak::runAndCheck(*comm, call, buffers, i, onSplit ? subName : "world");
    } else {
      ++skipped;  // this rank is in no group of the random split
    }
    if (largeEvery > 0 && i % largeEvery == largeEvery - 1 && largeDone < o.large) {
      const size_t bytes = (1 + rng() % 8) << 20;  // 1-8 MiB
      Call big = drawCall(rng, world->size(), bytes);
      sharc::soak::runAndCheck(*world, big, buffers, i, "world (large)");
      ++largeDone;
    }
  }
  releaseSplit(sub, parent, splits);
  sampler.sample(o.small);
  world->barrier();
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string verdict = sampler.verdict(o.rssBoundKiB, o.heapBoundKiB);
  if (!o.samplesCsv.empty())
    sampler.writeCsv(o.samplesCsv + ".rank" + std::to_string(rank) + ".csv");
  std::printf(
      "soak rank %d (%s): %ld small (%ld skipped: in no group), %ld large, %ld splits "
      "in %.1f s; %s%s\n",
      rank, world->provider().c_str(), o.small - skipped, skipped, largeDone, splits, secs,
      sampler.summary().c_str(), verdict.empty() ? "" : (" FAIL: " + verdict).c_str());
  std::fflush(stdout);
  return verdict.empty() ? 0 : 1;
}

// ---- the launcher -------------------------------------------------------------------------

int launch(const Options& o, char** argv) {
  // Defaults for a loopback job; the caller's environment wins.
  setenv("SHARC_FI_PROVIDER", "tcp;ofi_rxm", 0);
  setenv("FI_TCP_IFACE", "lo", 0);
  setenv("SHARC_SOCKET_IFNAME", "lo", 0);
  setenv("SHARC_TIMEOUT_MS", "60000", 0);
  std::vector<std::string> args;
  for (char** a = argv; *a; ++a) args.emplace_back(*a);
  args.emplace_back("--as-rank");
  std::string socketDir;
  if (!o.noTraceSocket) {
    char tmpl[] = "/tmp/sharc-soak-XXXXXX";
    if (!mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
    socketDir = tmpl;
    setenv("SHARC_TRACE_SOCKET", socketDir.c_str(), 1);
    args.emplace_back("--trace-socket");
    args.emplace_back(socketDir);
  }
  // The shared launcher (tools/launcher): each rank re-executes this program. A failed rank
  // does not stop the others: each prints its own findings.
  sharc::launcher::Options lo;
  lo.timeout = std::chrono::seconds(o.deadlineS);
  lo.stopOnFailure = false;
  const sharc::launcher::Result result = sharc::launcher::run(
      o.ranks,
      [&](int) {
        std::vector<char*> cargs;
        for (auto& s : args) cargs.push_back(s.data());
        cargs.push_back(nullptr);
        execv("/proc/self/exe", cargs.data());
        std::perror("execv /proc/self/exe");
        return 127;
      },
      lo);
  int failed = 0;
  for (size_t r = 0; r < result.ranks.size(); ++r)
    if (!result.ranks[r].exitedZero()) {
      std::printf("soak: rank %zu failed (it %s)\n", r,
                  sharc::launcher::describeStatus(result.ranks[r].status).c_str());
      ++failed;
    }
  if (!socketDir.empty()) {
    if (DIR* d = opendir(socketDir.c_str())) {  // sockets left by ranks that were killed
      while (dirent* e = readdir(d))
        if (e->d_name[0] != '.') unlink((socketDir + "/" + e->d_name).c_str());
      closedir(d);
    }
    rmdir(socketDir.c_str());
  }
  if (result.timedOut)
    std::printf("soak: ranks still running after %d s: killed (a hang)\n", o.deadlineS);
  std::printf("soak: %s\n", failed ? "FAILED" : "PASSED");
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    return o.asRank ? runRank(o) : launch(o, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "soak%s: %s\n", o.asRank ? " rank" : "", e.what());
    return 1;
  }
}

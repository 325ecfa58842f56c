// sharc-create-bench: how communicator creation grows with the number of ranks. For each
// count it forks that many ranks on this host (perf/launch.hpp), each creates a communicator
// from the environment, and reports per rank the creation's wall time, what it added to the
// process (resident memory, file descriptors, threads) and its first AllReduce (connections
// that are made on first use). Rank 0 prints the median and the maximum over the ranks.
// --bootstrap measures the part that grows with the ranks alone: the rendezvous (rank 0's
// root server) and the all-gather rounds creation makes through it, without libfabric.
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sharc/communicator.hpp>
#include <sharc/error.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "core/config.hpp"
#include "launch.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// Resident set size of this process in KiB (/proc/self/statm: pages).
double residentKiB() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / 1024.0;
}

// Entries of a /proc directory (open fds, threads), less "." and "..".
double entries(const char* dir) {
  DIR* d = opendir(dir);
  if (d == nullptr) return 0;
  int n = 0;
  while (const dirent* e = readdir(d))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) ++n;
  closedir(d);
  return n - 1;  // the directory stream's own fd (fds) or nothing (tasks): close enough
}

double msSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// What one rank measured; gathered to rank 0 as doubles.
enum Field { kCreateMs, kMemKiB, kFds, kThreads, kFirstCallMs, kFields };
const char* const kNames[kFields] = {"create_ms", "rss_kib", "fds", "threads", "first_call_ms"};

void report(int nranks, const std::vector<double>& all) {
  std::printf("%6d", nranks);
  for (int f = 0; f < kFields; ++f) {
    std::vector<double> v;
    for (int r = 0; r < nranks; ++r) v.push_back(all[static_cast<size_t>(r * kFields + f)]);
    std::sort(v.begin(), v.end());
    std::printf("  %10.1f %10.1f", v[v.size() / 2], v.back());
  }
  std::printf("\n");
  std::fflush(stdout);
}

int rankBody(int nranks) {
  const double mem0 = residentKiB(), fds0 = entries("/proc/self/fd"),
               threads0 = entries("/proc/self/task");
  const auto t0 = Clock::now();
  auto comm = sharc::Communicator::createFromEnvironment();
  std::vector<double> mine(kFields);
  mine[kCreateMs] = msSince(t0);
  mine[kMemKiB] = residentKiB() - mem0;
  mine[kFds] = entries("/proc/self/fd") - fds0;
  mine[kThreads] = entries("/proc/self/task") - threads0;
  float one = 1.0f;
  const auto t1 = Clock::now();
  comm->allReduce(&one, &one, 1, sharc::DataType::Float32, sharc::RedOp::Sum);
  mine[kFirstCallMs] = msSince(t1);
  if (one != static_cast<float>(nranks)) {
    std::fprintf(stderr, "rank %d: first AllReduce gave %g, expected %d\n", comm->rank(),
                 static_cast<double>(one), nranks);
    return 1;
  }
  std::vector<double> all(static_cast<size_t>(nranks * kFields));
  comm->allGather(mine.data(), all.data(), kFields, sharc::DataType::Float64);
  if (comm->rank() == 0) report(nranks, all);
  comm->destroy();
  return 0;
}

// Whether a socket of this host still listens on `port` (the root server, until every rank
// has left): /proc/net/tcp's LISTEN (0A) entries, so that no probe connects to the server.
bool listening(uint16_t port) {
  FILE* f = std::fopen("/proc/net/tcp", "r");
  if (f == nullptr) return false;
  char line[512];
  bool found = false;
  while (!found && std::fgets(line, sizeof line, f) != nullptr) {
    unsigned localPort = 0, state = 0;
    if (std::sscanf(line, " %*d: %*[0-9A-Fa-f]:%x %*[0-9A-Fa-f]:%*x %x", &localPort, &state) == 2)
      found = localPort == port && state == 0x0A;
  }
  std::fclose(f);
  return found;
}

// The rendezvous alone: connect (rank 0 serves), then the 4 all-gather rounds creation makes,
// each of `blobBytes` per rank. Reports rank 0's join (every rank connected and the first
// round back) and the mean of the other rounds, and the per-rank resident memory they added.
int bootstrapBody(int nranks, size_t blobBytes) {
  using namespace sharc;
  const auto env = core::readLaunchEnv();
  if (!env) return 1;
  const std::chrono::milliseconds timeout{120000};
  const std::string hostPort = env->rootHost + ":" + std::to_string(env->rootPort);
  bootstrap::RootAddress root{env->rootHost, env->rootPort,
                              bootstrap::environmentToken(hostPort, env->worldSize, env->jobToken)};
  const double mem0 = residentKiB();
  const auto t0 = Clock::now();
  std::unique_ptr<bootstrap::RootServer> server;
  if (env->rank == 0) {
    server =
        bootstrap::RootServer::start(env->rootHost, env->rootPort, root.token, nranks, timeout);
    server->detach();
  }
  auto boot = bootstrap::connectToRoot(root, env->rank, nranks, timeout);
  const std::string blob(blobBytes, static_cast<char>('a' + env->rank % 26));
  boot->allGather(blob);
  const double joinMs = msSince(t0);
  constexpr int kRounds = 3;
  const auto t1 = Clock::now();
  for (int r = 0; r < kRounds; ++r) {
    const std::vector<std::string> all = boot->allGather(blob);
    if (all.size() != static_cast<size_t>(nranks) || all.back().size() != blobBytes) return 1;
  }
  const double roundMs = msSince(t1) / kRounds;
  const double memKiB = residentKiB() - mem0;
  boot.reset();  // leave: the server (in rank 0) ends once every rank has
  if (env->rank != 0) return 0;
  std::printf("%6d  %10zu  %10.1f  %10.2f  %10.0f\n", nranks, blobBytes, joinMs, roundMs, memKiB);
  std::fflush(stdout);
  // The server's thread lives in this process: it must outlast the others' last round.
  const auto deadline = Clock::now() + timeout;
  while (listening(env->rootPort) && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return 0;
}

std::vector<int> parseCounts(const char* text) {
  std::vector<int> out;
  for (const char* p = text; *p != '\0';) {
    char* end = nullptr;
    const long v = std::strtol(p, &end, 10);
    if (end == p || v < 1 || v > 4096) return {};
    out.push_back(static_cast<int>(v));
    p = *end == ',' ? end + 1 : end;
    if (*end != ',' && *end != '\0') return {};
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> counts{8, 16, 32, 64, 128};
  int repeats = 3, timeoutSec = 600;
  bool bootstrapOnly = false;
  size_t blobBytes = 128;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool hasValue = i + 1 < argc;
    if (a == "-N" && hasValue) {
      counts = parseCounts(argv[++i]);
      if (counts.empty()) {
        std::fprintf(stderr, "sharc-create-bench: -N takes rank counts 1..4096, as 8,16,32\n");
        return 2;
      }
    } else if (a == "-r" && hasValue) {
      repeats = std::atoi(argv[++i]);
    } else if (a == "--bootstrap") {
      bootstrapOnly = true;
    } else if (a == "--blob" && hasValue) {
      blobBytes = static_cast<size_t>(std::atol(argv[++i]));
    } else if (a == "-T" && hasValue) {
      timeoutSec = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: sharc-create-bench [-N 8,16,32,64,128] [-r repeats] [-T timeout_s]\n"
                   "                          [--bootstrap [--blob bytes]]\n"
                   "Forks each count of ranks on this host; prints per count the median and\n"
                   "maximum over ranks of communicator creation (ms), the resident memory\n"
                   "(KiB), fds and threads it added, and the first AllReduce (ms).\n"
                   "--bootstrap: the rendezvous alone (rank 0 serves): rank 0's join (ms),\n"
                   "one all-gather round of --blob bytes per rank (ms), memory added (KiB).\n");
      return 2;
    }
  }
  if (repeats < 1 || timeoutSec < 1 || blobBytes < 1 || blobBytes > 65536) {
    std::fprintf(stderr,
                 "sharc-create-bench: -r and -T must be at least 1, --blob 1..65536 bytes\n");
    return 2;
  }
  if (bootstrapOnly) {
    std::printf("# %4s  %10s  %10s  %10s  %10s\n", "ranks", "blob_bytes", "join_ms", "round_ms",
                "rss_kib");
  } else {
    std::printf("# %4s", "ranks");
    for (const char* name : kNames) std::printf("  %10s %10s", name, "max");
    std::printf("\n# (median and maximum over the ranks of one run; %d runs per count)\n", repeats);
  }
  std::fflush(stdout);
  for (int n : counts)
    for (int r = 0; r < repeats; ++r)
      if (sharc::perf::launchLocalRanks(n, timeoutSec, [&](int) {
            return bootstrapOnly ? bootstrapBody(n, blobBytes) : rankBody(n);
          }) != 0)
        return 1;
  return 0;
}

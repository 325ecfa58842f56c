#include "soak_sampler.hpp"

#include <dirent.h>
#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace sharc::soak {
namespace {

long openFds() {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  long n = 0;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n - 1;  // the directory stream's own fd
}

// VmRSS, RssAnon, RssShmem (KiB) and Threads from /proc/self/status.
void status(Sample& s) {
  std::ifstream in("/proc/self/status");
  std::string line;
  auto field = [&](const char* name, long& out) {
    const size_t n = std::strlen(name);
    if (line.compare(0, n, name) == 0) out = std::stol(line.substr(n));
  };
  s.rssKiB = s.anonKiB = s.shmemKiB = s.threads = -1;
  while (std::getline(in, line)) {
    field("VmRSS:", s.rssKiB);
    field("RssAnon:", s.anonKiB);
    field("RssShmem:", s.shmemKiB);
    field("Threads:", s.threads);
  }
}

void maps(long& all, long& shm) {
  std::ifstream in("/proc/self/maps");
  std::string line;
  all = shm = 0;
  while (std::getline(in, line)) {
    ++all;
    if (line.find("/dev/shm/") != std::string::npos) ++shm;
  }
}

struct Range {
  long first, last, max;
};
template <typename F>
Range range(const std::vector<Sample>& s, F field) {
  Range r{field(s.front()), field(s.back()), field(s.front())};
  for (const Sample& x : s) r.max = std::max(r.max, field(x));
  return r;
}
std::string show(const char* name, const Range& r) {
  std::ostringstream os;
  os << name << " " << r.first << " -> " << r.last << " (max " << r.max << ", " << std::showpos
     << r.last - r.first << ", max " << r.max - r.first << ")";
  return os.str();
}

}  // namespace

void Sampler::sample(long call) {
  Sample s;
  s.call = call;
  status(s);
  const struct mallinfo2 mi = mallinfo2();
  s.heapKiB = static_cast<long>((mi.uordblks + mi.hblkhd) / 1024);
  s.fds = openFds();
  maps(s.maps, s.shmMaps);
  samples_.push_back(s);
}

void Sampler::writeCsv(const std::string& path) const {
  std::ofstream out(path);
  out << "call,rss_kib,anon_kib,shmem_kib,heap_kib,fds,threads,shm_maps,maps\n";
  for (const Sample& s : samples_)
    out << s.call << ',' << s.rssKiB << ',' << s.anonKiB << ',' << s.shmemKiB << ',' << s.heapKiB
        << ',' << s.fds << ',' << s.threads << ',' << s.shmMaps << ',' << s.maps << '\n';
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::string Sampler::summary() const {
  if (samples_.empty()) return "no samples";
  std::ostringstream os;
  os << samples_.size() << " samples from call " << samples_.front().call << ": "
     << show("rss KiB", range(samples_, [](const Sample& s) { return s.rssKiB; })) << "; "
     << show("anon KiB", range(samples_, [](const Sample& s) { return s.anonKiB; })) << "; "
     << show("shmem KiB", range(samples_, [](const Sample& s) { return s.shmemKiB; })) << "; "
     << show("heap KiB", range(samples_, [](const Sample& s) { return s.heapKiB; })) << "; "
     << show("fds", range(samples_, [](const Sample& s) { return s.fds; })) << "; "
     << show("threads", range(samples_, [](const Sample& s) { return s.threads; })) << "; "
     << show("/dev/shm maps", range(samples_, [](const Sample& s) { return s.shmMaps; })) << "; "
     << show("maps", range(samples_, [](const Sample& s) { return s.maps; }));
  return os.str();
}

std::string Sampler::verdict(long rssBoundKiB, long heapBoundKiB) const {
  if (samples_.size() < 2) return "fewer than 2 samples (run more calls than the warm-up)";
  std::ostringstream os;
  const auto fds = range(samples_, [](const Sample& s) { return s.fds; });
  const auto th = range(samples_, [](const Sample& s) { return s.threads; });
  const auto shm = range(samples_, [](const Sample& s) { return s.shmMaps; });
  const auto anon = range(samples_, [](const Sample& s) { return s.anonKiB; });
  const auto heap = range(samples_, [](const Sample& s) { return s.heapKiB; });
  if (fds.max > fds.first) os << "open fds grew from " << fds.first << " to " << fds.max << "; ";
  if (th.max > th.first) os << "threads grew from " << th.first << " to " << th.max << "; ";
  if (shm.max > shm.first)
    os << "/dev/shm mappings grew from " << shm.first << " to " << shm.max << "; ";
  if (anon.last - anon.first > rssBoundKiB)
    os << "private resident memory (RssAnon) grew by " << anon.last - anon.first << " KiB (bound "
       << rssBoundKiB << " KiB); ";
  if (heap.last - heap.first > heapBoundKiB)
    os << "heap in use grew by " << heap.last - heap.first << " KiB (bound " << heapBoundKiB
       << " KiB); ";
  return os.str();
}

}  // namespace sharc::soak

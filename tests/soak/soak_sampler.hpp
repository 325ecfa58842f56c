// Samples this process's resident memory, open fds, threads and /dev/shm mappings, and
// judges their growth between the first sample (taken after the warm-up) and the others.
#pragma once

#include <string>
#include <vector>

namespace sharc::soak {

struct Sample {
  long call = 0;      ///< small calls made when sampled
  long rssKiB = 0;    ///< /proc/self/status VmRSS: all resident memory
  long anonKiB = 0;   ///< RssAnon: private memory (where leaks live; judged)
  long shmemKiB = 0;  ///< RssShmem: touched pages of shared segments (bounded by their size)
  long heapKiB = 0;   ///< malloc's bytes in use (mallinfo2: main arena and mmapped chunks)
  long fds = 0;       ///< entries of /proc/self/fd (the directory's own fd not counted)
  long threads = 0;   ///< /proc/self/status Threads
  long shmMaps = 0;   ///< /proc/self/maps lines mapping a /dev/shm file
  long maps = 0;      ///< /proc/self/maps lines
};

class Sampler {
 public:
  /// Takes a sample now.
  void sample(long call);
  /// "rss KiB 1234 -> 1240 (max 1300, +6, max +66); fds ...": first, last and max of each.
  std::string summary() const;
  /// Empty when flat: no fd, thread or /dev/shm mapping more than at the first sample, private
  /// resident memory (RssAnon) at most `rssBoundKiB` and the heap in use at most `heapBoundKiB`
  /// above it at the last sample; else why not.
  std::string verdict(long rssBoundKiB, long heapBoundKiB) const;
  /// Writes the samples as CSV
  /// (call,rss_kib,anon_kib,shmem_kib,heap_kib,fds,threads,shm_maps,maps); throws on failure.
  void writeCsv(const std::string& path) const;

 private:
  std::vector<Sample> samples_;
};

}  // namespace sharc::soak

// nccl-tests style table on stdout (rank 0 only) and the --json dump.
#pragma once

#include <cstdio>
#include <optional>
#include <sharc/types.hpp>
#include <string>
#include <vector>

#include "options.hpp"

namespace sharc::perf {

/// printf into a std::string (at most 511 characters).
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
/// nccl-tests' time column in microseconds: fewer decimals as the time grows (7 wide).
std::string timeStr(double us);

/// One timed variant (out-of-place or in-place) of one row.
struct Measure {
  double timeUs = 0;     ///< what the table shows: meanUs, or medianUs with --median
  double meanUs = 0;     ///< the slowest rank's time of -n calls / -n (nccl-tests' time)
  double medianUs = 0;   ///< the slowest rank's median time of one of the -n calls
  double algBw = 0;      ///< GB/s (1e9 bytes per second)
  double busBw = 0;      ///< GB/s
  long long wrong = -1;  ///< mismatching elements summed over ranks; -1: not checked
};

/// Timing of the same call through the MPI baseline (out-of-place).
struct BaselineMeasure {
  bool available = false;  ///< false: MPI lacks the type or op ('-' in the table)
  double timeUs = 0;
  double busBw = 0;
};

/// --baseline memcpy: a one-core memcpy of the bytes the bus bandwidth counts per rank.
struct MemcpyMeasure {
  size_t bytes = 0;   ///< bytes copied per rank: (n-1)/n x size (2(n-1)/n for all_reduce)
  double timeUs = 0;  ///< the slowest rank's median time of one copy
  double gbps = 0;    ///< bytes / timeUs (1e9 bytes per second)
};

/// --explain: the tuner's plan for the row's call.
struct PlanInfo {
  std::string algorithm;
  size_t chunkBytes = 0;
  double predictedUs = 0;
  std::string breakdown;
  std::string path;  ///< CallPlan::path
};

struct Row {
  size_t bytes = 0;  ///< total bytes as nccl-tests counts them
  size_t count = 0;  ///< elements per rank (all_gather, reduce_scatter) or in total
  DataType type = DataType::Float32;
  std::optional<RedOp> op;  ///< nullopt for all_gather ("none")
  int root = -1;
  Measure outOfPlace;
  Measure inPlace;
  std::optional<BaselineMeasure> baseline;  ///< set when --baseline mpi is on
  std::optional<MemcpyMeasure> memcpy;      ///< set when --baseline memcpy is on
  std::optional<PlanInfo> plan;             ///< set when --explain is on
};

/// Facts about the run printed in the header and the JSON.
struct RunInfo {
  int nranks = 1;
  std::string provider;
  std::string launch;                  ///< "fork (-N 4)", "environment", "mpi", "single process"
  std::vector<std::string> rankLines;  ///< "Rank  0 Pid 123 on host"
};

/// algbw and busbw from a size and a time, as nccl-tests computes them.
void computeBandwidth(CollectiveKind c, int nranks, size_t bytes, Measure& m);
double busBandwidth(CollectiveKind c, int nranks, size_t bytes, double timeUs);

class Reporter {
 public:
  /// Prints nothing unless `print`; rows are kept for the footer and the JSON either way.
  Reporter(const Options& options, bool print, std::FILE* out = stdout);
  void header(const RunInfo& info);
  void row(const Row& r);  ///< prints (and flushes) one row
  void footer();
  /// Total #wrong over all rows and both variants.
  long long totalWrong() const;
  double avgBusBw() const;
  /// Writes every row and the summary; returns false (errno set) when the file fails.
  bool writeJson(const std::string& path) const;

 private:
  const Options& options_;
  bool print_;
  std::FILE* out_;
  RunInfo info_;
  std::vector<Row> rows_;
};

}  // namespace sharc::perf

// Command-line options of sharc-gpu-perf (nccl-tests style, stream-ordered calls on CUDA
// buffers). Sizes, type and collective names are those of sharc-perf (options.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <sharc/types.hpp>
#include <string>
#include <vector>

#include "options.hpp"

namespace sharc::perf {

struct GpuOptions {
  std::vector<Collective> collectives;             ///< all_gather|reduce_scatter|all_reduce|all
  size_t minBytes = size_t{32} << 20;              ///< -b
  size_t maxBytes = size_t{32} << 20;              ///< -e
  size_t stepBytes = size_t{1} << 20;              ///< -i (used when stepFactor <= 1)
  uint64_t stepFactor = 1;                         ///< -f
  int iters = 20;                                  ///< -n
  int warmup = 5;                                  ///< -w
  bool check = false;                              ///< --check (or -c 1)
  std::vector<DataType> types{DataType::Float32};  ///< -d
  std::vector<RedOp> ops{RedOp::Sum};              ///< -o
  int launchRanks = 0;                             ///< -N: fork this many ranks (0: environment)
  int timeoutSec = 0;                              ///< -T: kill forked ranks after this (0: never)
  int device = 0;                                  ///< --device: the GPU every rank uses
  bool help = false;                               ///< -h
};

/// Parses argv (argv[0] is the program). Throws UsageError.
GpuOptions parseGpuOptions(int argc, char** argv);
/// The -h text.
std::string gpuUsageText(const char* program);
/// The sizes of the run (nccl-tests' total bytes), smallest first.
std::vector<size_t> gpuSizeSequence(const GpuOptions& o);
/// Elements per rank for all_gather/reduce_scatter, in total for all_reduce (as sharc-perf).
size_t elementCount(Collective c, size_t bytes, size_t typeSize, int nranks);
/// Bytes nccl-tests reports for `count`: the full gathered/scattered buffer.
size_t reportedBytes(Collective c, size_t count, size_t typeSize, int nranks);
/// "256MiB", "1KiB", "1000B".
std::string sizeLabel(size_t bytes);

}  // namespace sharc::perf

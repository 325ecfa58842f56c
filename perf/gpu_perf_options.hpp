// Command-line options of sharc-gpu-perf (nccl-tests style, stream-ordered calls on CUDA
// buffers). Sizes, type and collective names are those of sharc-perf (options.hpp).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "options.hpp"

namespace sharc::perf {

struct GpuOptions : CommonOptions {
  GpuOptions() { check = false; }           // --check (or -c 1) turns checking on
  std::vector<CollectiveKind> collectives;  ///< all_gather|reduce_scatter|all_reduce|all
  int device = 0;                           ///< --device: the GPU every rank uses
  /// --nodes: with -N, lay the ranks out on this many emulated nodes (SHARC_NODE_ID, ranks in
  /// contiguous blocks), so that calls cross "nodes" on the engine's device path.
  int nodes = 1;
};

/// Parses argv (argv[0] is the program). Throws UsageError.
GpuOptions parseGpuOptions(int argc, char** argv);
/// The -h text.
std::string gpuUsageText(const char* program);
/// "256MiB", "1KiB", "1000B".
std::string sizeLabel(size_t bytes);

}  // namespace sharc::perf

// sharc-net-perf's command line: the options, their defaults and the -h text; the plugin
// and provider fall back to SHARC_NCCL_PLUGIN / SHARC_FI_PROVIDER.
#pragma once

#include <cstddef>
#include <string>

namespace sharc::netperf {

/// What the command line (and, for the plugin and provider, the environment) asks for.
struct Options {
  size_t minBytes = 8, maxBytes = size_t{64} << 20, factor = 2;
  int iters = 20, warmup = 2, window = 8, reps = 5, latIters = 1000, dev = 0;
  size_t latMax = size_t{64} << 10;
  bool check = false;
  double timeout = 60, checkOverhead = -1;  // -T; --check-overhead (< 0: off)
  std::string plugin, provider;
};

/// Parses argv (argv[0] is the program): throws Failure on a bad option or value; prints the
/// -h text and exits 0 for -h / --help.
Options parseOptions(int argc, char** argv);

}  // namespace sharc::netperf

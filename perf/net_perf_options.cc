// sharc-net-perf's command line (net_perf_options.hpp).
#include "net_perf_options.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "net_perf.hpp"

#ifndef SHARC_NET_PERF_PLUGIN
#define SHARC_NET_PERF_PLUGIN "libnccl-net-sharc.so"
#endif

namespace sharc::netperf {
namespace {

const char* kUsage =
    "usage: sharc-net-perf [options]\n"
    "  -b, -e SIZE      smallest, largest message (8, 64M; K/M/G suffixes, binary)\n"
    "  -f N             size factor (2)          -n N   timed iterations of a window (20)\n"
    "  -w N             warmup iterations (2)    -W N   window: sends in flight (8, max 30)\n"
    "  --reps N         repetitions, medians reported (5)\n"
    "  -L N             ping-pong round trips per latency point (1000)\n"
    "  --lat-max SIZE   largest latency point (64K; 0: no latency)\n"
    "  -c 0|1           fill and check every received byte (0)\n"
    "  -T SEC           limit of every wait (60)\n"
    "  --check-overhead PCT  exit 1 if the median overhead at >= 1 MiB exceeds PCT\n"
    "  --plugin PATH    plugin to dlopen (SHARC_NCCL_PLUGIN, else the built one)\n"
    "  --provider NAME  libfabric provider for both sides (SHARC_FI_PROVIDER, else tcp;ofi_rxm)\n"
    "  --dev N          plugin device (0)\n";

size_t parseSize(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  const std::string suffix = end != nullptr ? end : "";
  size_t shift = 0;
  if (suffix == "K" || suffix == "KB" || suffix == "KiB")
    shift = 10;
  else if (suffix == "M" || suffix == "MB" || suffix == "MiB")
    shift = 20;
  else if (suffix == "G" || suffix == "GB" || suffix == "GiB")
    shift = 30;
  else if (!suffix.empty() && suffix != "B")
    shift = 64;
  if (errno != 0 || end == text.c_str() || shift == 64 || text[0] == '-')
    throw Failure(flag + " '" + text + "': expected a size such as 4096, 64K or 1M");
  return static_cast<size_t>(v) << shift;
}

int parseInt(const std::string& flag, const std::string& text, int lo, int hi) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || v < lo || v > hi)
    throw Failure(flag + " '" + text + "': expected an integer in [" + std::to_string(lo) + ", " +
                  std::to_string(hi) + "]");
  return static_cast<int>(v);
}

double parsePercent(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(v >= 0 && v <= 100))
    throw Failure(flag + " '" + text + "': expected a percentage in [0, 100]");
  return v;
}

}  // namespace

Options parseOptions(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) throw Failure(a + ": unknown option or missing value\n" + kUsage);
    const std::string v = argv[++i];
    if (a == "-b")
      o.minBytes = parseSize(a, v);
    else if (a == "-e")
      o.maxBytes = parseSize(a, v);
    else if (a == "-f")
      o.factor = static_cast<size_t>(parseInt(a, v, 2, 1 << 20));
    else if (a == "-n")
      o.iters = parseInt(a, v, 1, 1 << 24);
    else if (a == "-w")
      o.warmup = parseInt(a, v, 0, 1 << 24);
    else if (a == "-W")
      o.window = parseInt(a, v, 1, kMaxWindow);
    else if (a == "--reps")
      o.reps = parseInt(a, v, 1, 1000);
    else if (a == "-L")
      o.latIters = parseInt(a, v, 1, 1 << 24);
    else if (a == "--lat-max")
      o.latMax = parseSize(a, v);
    else if (a == "-c")
      o.check = parseInt(a, v, 0, 1) == 1;
    else if (a == "-T")
      o.timeout = parseInt(a, v, 1, 86400);
    else if (a == "--check-overhead")
      o.checkOverhead = parsePercent(a, v);
    else if (a == "--plugin")
      o.plugin = v;
    else if (a == "--provider")
      o.provider = v;
    else if (a == "--dev")
      o.dev = parseInt(a, v, 0, 1 << 16);
    else
      throw Failure(a + ": unknown option\n" + kUsage);
  }
  if (o.minBytes > o.maxBytes)
    throw Failure("-b " + std::to_string(o.minBytes) + " exceeds -e " + std::to_string(o.maxBytes) +
                  ", expected -b <= -e");
  if (o.maxBytes > (size_t{1} << 30))
    throw Failure("-e " + std::to_string(o.maxBytes) + ": expected at most 1G (NCCL's int sizes)");
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v != nullptr ? v : "");
  };
  if (o.plugin.empty()) o.plugin = env("SHARC_NCCL_PLUGIN");
  if (o.plugin.empty()) o.plugin = SHARC_NET_PERF_PLUGIN;
  if (o.provider.empty()) o.provider = env("SHARC_FI_PROVIDER");
  if (o.provider.empty()) o.provider = "tcp;ofi_rxm";
  return o;
}

}  // namespace sharc::netperf

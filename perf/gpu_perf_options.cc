#include "gpu_perf_options.hpp"

#include <cctype>
#include <optional>
#include <string_view>

namespace sharc::perf {

namespace {

std::optional<std::vector<CollectiveKind>> parseCollectives(std::string_view text) {
  std::string s;
  for (char ch : text)
    if (ch != '_' && ch != '-')
      s += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (s == "all")
    return std::vector{CollectiveKind::AllGather, CollectiveKind::ReduceScatter,
                       CollectiveKind::AllReduce};
  if (s == "allgather") return std::vector{CollectiveKind::AllGather};
  if (s == "reducescatter") return std::vector{CollectiveKind::ReduceScatter};
  if (s == "allreduce") return std::vector{CollectiveKind::AllReduce};
  return std::nullopt;
}

// sharc-gpu-perf's own long names (the common ones are FlagParser's).
constexpr LongFlag kLongFlags[] = {
    {"warmup", 'w'}, {"device", 'D'}, {"check", 'K'}, {"nodes", 'M'}};

}  // namespace

GpuOptions parseGpuOptions(int argc, char** argv) {
  GpuOptions o;
  FlagParser p(argc, argv,
               {.longFlags = kLongFlags, .letters = "DKM", .maxRanks = 1024, .typeLists = true});
  while (p.next()) {
    if (p.positional()) {
      auto c = parseCollectives(p.arg());
      if (!c)
        throw UsageError("unknown collective '" + std::string(p.arg()) +
                         "' (all_gather, reduce_scatter, all_reduce, all)");
      if (!o.collectives.empty()) throw UsageError("more than one collective given");
      o.collectives = *c;
      continue;
    }
    if (p.letter() == 'K' && !p.hasInlineValue()) {  // --check takes no value
      o.check = true;
      continue;
    }
    if (p.applyCommon(o)) continue;
    const std::string_view value = p.value();
    switch (p.letter()) {
      case 'K': o.check = parseIntFlag(p.flag(), value, 0, 1) != 0; break;
      case 'D': o.device = static_cast<int>(parseIntFlag(p.flag(), value, 0, 1023)); break;
      case 'M': o.nodes = static_cast<int>(parseIntFlag(p.flag(), value, 1, 1024)); break;
      default: throw p.unknown();
    }
  }
  if (o.help) return o;
  if (o.collectives.empty())
    throw UsageError("missing collective (all_gather, reduce_scatter, all_reduce or all)");
  p.finish(o);
  if (o.nodes > 1 && (o.launchRanks <= 0 || o.nodes > o.launchRanks))
    throw UsageError("--nodes " + std::to_string(o.nodes) +
                     " needs -N with at least as many ranks");
  return o;
}

// "256MiB", "1KiB", "1000B".
std::string sizeLabel(size_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (unit < 4 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return std::to_string(bytes) + kUnits[unit];
}

std::string gpuUsageText(const char* program) {
  const std::string p = program ? program : "sharc-gpu-perf";
  return "usage: " + p +
         " all_gather|reduce_scatter|all_reduce|all [options]\n"
         "Times sharc's stream-ordered collectives on CUDA device buffers; every rank uses the\n"
         "same GPU (--device) with its own non-blocking stream.\n"
         "  -N, --nranks N        fork N ranks on this host (rendezvous on 127.0.0.1); without\n"
         "                        -N, join the job the environment describes (SHARC_ROOT,\n"
         "                        SHARC_RANK, SHARC_WORLD_SIZE, or torchrun's variables)\n"
         "  -b, --minbytes SIZE   smallest message, total bytes (default 32M)\n"
         "  -e, --maxbytes SIZE   largest message, total bytes (default 32M)\n"
         "  -f, --stepfactor N    multiply the size by N each step (default 1: use -i)\n"
         "  -i, --stepbytes SIZE  add SIZE each step when -f is 1 (default 1M)\n"
         "  -d, --datatype TYPE   float, half, bfloat16, double, int8, uint8, int32, uint32,\n"
         "                        int64, uint64, a comma list, or all (default float)\n"
         "  -o, --op OP           sum, prod, min, max, avg, a comma list, or all (default sum)\n"
         "  -n, --iters N         timed back-to-back calls per size (default 20)\n"
         "  -w, --warmup N        untimed calls first (default 5)\n"
         "      --check           check one call per size against a float64 host reference\n"
         "                        (-c 0|1 as in nccl-tests)\n"
         "      --device D        the CUDA device of every rank (default 0)\n"
         "      --nodes K         with -N: K emulated nodes (SHARC_NODE_ID per rank, contiguous\n"
         "                        blocks); calls between them take the engine's device path\n"
         "                        (SHARC_DEVICE_PATH, docs/gpu.md) instead of CUDA IPC\n"
         "  -T, --timeout SEC     with -N: kill the ranks after SEC seconds (default 0: never)\n"
         "  -h, --help            this text\n"
         "Sizes take K, M, G suffixes (binary). For all_gather and reduce_scatter the size is\n"
         "the whole gathered/scattered buffer; each rank contributes size/nranks bytes.\n"
         "Before the table rank 0 alone times a device-to-device cudaMemcpyAsync of the\n"
         "largest size (the device copy bandwidth the summary compares busbw with).\n"
         "Exit status: 0, 1 on errors or wrong results, 2 on a bad command line, 77 when no\n"
         "CUDA device is usable.\n";
}

}  // namespace sharc::perf

#include "gpu_perf_options.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>
#include <string_view>

namespace sharc::perf {

namespace {

long long parseInt(std::string_view flag, std::string_view text, long long lo, long long hi) {
  long long v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || v < lo || v > hi)
    throw UsageError(std::string(flag) + ": expected an integer in [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "], got '" + std::string(text) + "'");
  return v;
}

size_t parseSizeFlag(std::string_view flag, std::string_view text) {
  auto v = parseSize(text);
  if (!v) throw UsageError(std::string(flag) + ": bad size '" + std::string(text) + "'");
  return *v;
}

// A comma list of names, or "all".
std::vector<DataType> parseTypes(std::string_view text) {
  std::vector<DataType> out;
  if (text == "all") {
    for (int i = 0; i < kNumDataTypes; ++i) out.push_back(static_cast<DataType>(i));
    return out;
  }
  for (size_t at = 0; at <= text.size();) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string_view name = text.substr(at, comma - at);
    std::optional<DataType> t;
    for (int i = 0; i < kNumDataTypes && !t; ++i)
      if (name == typeName(static_cast<DataType>(i))) t = static_cast<DataType>(i);
    if (!t) t = parseDataType(name);
    if (!t)
      throw UsageError("-d: unknown datatype '" + std::string(name) +
                       "' (float, half, bfloat16, double, int8, uint8, int32, uint32, int64, "
                       "uint64, all)");
    out.push_back(*t);
    at = comma + 1;
  }
  return out;
}

std::vector<RedOp> parseOps(std::string_view text) {
  std::vector<RedOp> out;
  if (text == "all") {
    for (int i = 0; i < kNumRedOps; ++i) out.push_back(static_cast<RedOp>(i));
    return out;
  }
  for (size_t at = 0; at <= text.size();) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string_view name = text.substr(at, comma - at);
    auto op = parseRedOp(name);
    if (!op)
      throw UsageError("-o: unknown op '" + std::string(name) +
                       "' (sum, prod, min, max, avg, all)");
    out.push_back(*op);
    at = comma + 1;
  }
  return out;
}

std::optional<std::vector<Collective>> parseCollectives(std::string_view text) {
  std::string s;
  for (char ch : text)
    if (ch != '_' && ch != '-')
      s += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (s == "all")
    return std::vector{Collective::AllGather, Collective::ReduceScatter, Collective::AllReduce};
  if (s == "allgather") return std::vector{Collective::AllGather};
  if (s == "reducescatter") return std::vector{Collective::ReduceScatter};
  if (s == "allreduce") return std::vector{Collective::AllReduce};
  return std::nullopt;
}

// Long option names and the letter each stands for.
char shortFor(std::string_view name) {
  struct Alias {
    const char* name;
    char letter;
  };
  static constexpr Alias kAliases[] = {
      {"minbytes", 'b'}, {"maxbytes", 'e'}, {"stepbytes", 'i'},    {"stepfactor", 'f'},
      {"iters", 'n'},    {"warmup", 'w'},   {"warmup_iters", 'w'}, {"datatype", 'd'},
      {"op", 'o'},       {"nranks", 'N'},   {"timeout", 'T'},      {"device", 'D'},
      {"check", 'K'},    {"help", 'h'},
  };
  for (const auto& a : kAliases)
    if (name == a.name) return a.letter;
  return 0;
}

}  // namespace

GpuOptions parseGpuOptions(int argc, char** argv) {
  GpuOptions o;
  bool sawMin = false, sawMax = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    char letter = 0;
    std::string_view flag = arg;
    std::optional<std::string_view> inlineValue;
    if (arg.starts_with("--") && arg.size() > 2) {
      std::string_view name = arg.substr(2);
      if (auto eq = name.find('='); eq != std::string_view::npos) {
        inlineValue = name.substr(eq + 1);
        name = name.substr(0, eq);
        flag = arg.substr(0, eq + 2);
      }
      letter = shortFor(name);
    } else if (arg.size() >= 2 && arg[0] == '-' &&
               !std::isdigit(static_cast<unsigned char>(arg[1]))) {
      letter = arg[1];
      flag = arg.substr(0, 2);
      if (arg.size() > 2) inlineValue = arg.substr(2);
    } else {
      auto c = parseCollectives(arg);
      if (!c)
        throw UsageError("unknown collective '" + std::string(arg) +
                         "' (all_gather, reduce_scatter, all_reduce, all)");
      if (!o.collectives.empty()) throw UsageError("more than one collective given");
      o.collectives = *c;
      continue;
    }
    if (letter == 'h') {
      o.help = true;
      continue;
    }
    if (letter == 'K' && !inlineValue) {  // --check takes no value
      o.check = true;
      continue;
    }
    if (letter == 0 || std::string_view("beifnwcdoNTDK").find(letter) == std::string_view::npos)
      throw UsageError("unknown option '" + std::string(arg) + "'");
    std::string_view value;
    if (inlineValue) {
      value = *inlineValue;
    } else {
      if (i + 1 >= argc) throw UsageError(std::string(flag) + ": missing value");
      value = argv[++i];
    }
    switch (letter) {
      case 'b':
        o.minBytes = parseSizeFlag(flag, value);
        sawMin = true;
        break;
      case 'e':
        o.maxBytes = parseSizeFlag(flag, value);
        sawMax = true;
        break;
      case 'i': o.stepBytes = parseSizeFlag(flag, value); break;
      case 'f': o.stepFactor = static_cast<uint64_t>(parseInt(flag, value, 1, 1 << 20)); break;
      case 'n': o.iters = static_cast<int>(parseInt(flag, value, 1, 1 << 30)); break;
      case 'w': o.warmup = static_cast<int>(parseInt(flag, value, 0, 1 << 30)); break;
      case 'c':
      case 'K': o.check = parseInt(flag, value, 0, 1) != 0; break;
      case 'd': o.types = parseTypes(value); break;
      case 'o': o.ops = parseOps(value); break;
      case 'N': o.launchRanks = static_cast<int>(parseInt(flag, value, 1, 1024)); break;
      case 'T': o.timeoutSec = static_cast<int>(parseInt(flag, value, 0, 1 << 30)); break;
      case 'D': o.device = static_cast<int>(parseInt(flag, value, 0, 1023)); break;
      default: throw UsageError("unknown option '" + std::string(arg) + "'");
    }
  }
  if (o.help) return o;
  if (o.collectives.empty())
    throw UsageError("missing collective (all_gather, reduce_scatter, all_reduce or all)");
  if (sawMin && !sawMax && o.maxBytes < o.minBytes) o.maxBytes = o.minBytes;
  if (sawMax && !sawMin && o.minBytes > o.maxBytes) o.minBytes = o.maxBytes;
  if (o.minBytes > o.maxBytes) throw UsageError("-b (minbytes) is larger than -e (maxbytes)");
  if (o.stepFactor <= 1 && o.stepBytes == 0)
    throw UsageError("-i (stepbytes) must be positive when -f (stepfactor) is 1");
  return o;
}

std::vector<size_t> gpuSizeSequence(const GpuOptions& o) {
  std::vector<size_t> sizes;
  for (size_t size = o.minBytes; size <= o.maxBytes;) {
    sizes.push_back(size);
    const size_t next = o.stepFactor > 1 ? size * o.stepFactor : size + o.stepBytes;
    if (next <= size) break;  // overflow, or a zero minimum with a factor
    size = next;
  }
  return sizes;
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

// Elements per rank for all_gather/reduce_scatter, in total for all_reduce (as sharc-perf).
size_t elementCount(Collective c, size_t bytes, size_t typeSize, int nranks) {
  if (c == Collective::AllReduce) return bytes / typeSize;
  return bytes / (typeSize * static_cast<size_t>(nranks));
}

// Bytes nccl-tests reports for `count`: the full gathered/scattered buffer.
size_t reportedBytes(Collective c, size_t count, size_t typeSize, int nranks) {
  if (c == Collective::AllReduce) return count * typeSize;
  return count * typeSize * static_cast<size_t>(nranks);
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

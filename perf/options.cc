#include "options.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <limits>

namespace sharc::perf {

const char* collectiveName(Collective c) noexcept {
  switch (c) {
    case Collective::AllGather: return "all_gather";
    case Collective::ReduceScatter: return "reduce_scatter";
    case Collective::AllReduce: return "all_reduce";
  }
  return "invalid";
}

bool collectiveReduces(Collective c) noexcept {
  return c != Collective::AllGather;
}

const char* typeName(DataType t) noexcept {
  switch (t) {
    case DataType::Int8: return "int8";
    case DataType::Uint8: return "uint8";
    case DataType::Int32: return "int32";
    case DataType::Uint32: return "uint32";
    case DataType::Int64: return "int64";
    case DataType::Uint64: return "uint64";
    case DataType::Float16: return "half";
    case DataType::Float32: return "float";
    case DataType::Float64: return "double";
    case DataType::BFloat16: return "bfloat16";
  }
  return "invalid";
}

std::optional<size_t> parseSize(std::string_view text) noexcept {
  if (text.empty()) return std::nullopt;
  uint64_t value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr == begin) return std::nullopt;
  std::string suffix(ptr, end);
  std::transform(suffix.begin(), suffix.end(), suffix.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
  if (suffix.size() > 1 && (suffix.ends_with("IB") || suffix.ends_with("B")))
    suffix.resize(suffix.size() - (suffix.ends_with("IB") ? 2 : 1));
  else if (suffix == "B")
    suffix.clear();
  int shift = 0;
  if (suffix.empty())
    shift = 0;
  else if (suffix == "K")
    shift = 10;
  else if (suffix == "M")
    shift = 20;
  else if (suffix == "G")
    shift = 30;
  else if (suffix == "T")
    shift = 40;
  else
    return std::nullopt;
  if (shift > 0 && value > (std::numeric_limits<uint64_t>::max() >> shift)) return std::nullopt;
  return static_cast<size_t>(value << shift);
}

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

std::vector<DataType> parseTypes(std::string_view text) {
  if (text == "all") {
    std::vector<DataType> all;
    for (int i = 0; i < kNumDataTypes; ++i) all.push_back(static_cast<DataType>(i));
    return all;
  }
  for (int i = 0; i < kNumDataTypes; ++i)
    if (text == typeName(static_cast<DataType>(i))) return {static_cast<DataType>(i)};
  if (auto t = parseDataType(text)) return {*t};
  throw UsageError("-d: unknown datatype '" + std::string(text) +
                   "' (float, half, bfloat16, double, int8, uint8, int32, uint32, int64, "
                   "uint64, all)");
}

std::vector<RedOp> parseOps(std::string_view text) {
  if (text == "all") {
    std::vector<RedOp> all;
    for (int i = 0; i < kNumRedOps; ++i) all.push_back(static_cast<RedOp>(i));
    return all;
  }
  if (auto op = parseRedOp(text)) return {*op};
  throw UsageError("-o: unknown op '" + std::string(text) + "' (sum, prod, min, max, avg, all)");
}

std::optional<Collective> parseCollective(std::string_view text) {
  std::string s;
  for (char ch : text)
    if (ch != '_' && ch != '-')
      s += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (s.ends_with("perf")) s.resize(s.size() - 4);
  if (s == "allgather") return Collective::AllGather;
  if (s == "reducescatter") return Collective::ReduceScatter;
  if (s == "allreduce") return Collective::AllReduce;
  return std::nullopt;
}

// Maps long option names to their short letter.
char shortFor(std::string_view name) {
  struct Alias {
    const char* name;
    char letter;
  };
  static constexpr Alias kAliases[] = {
      {"minbytes", 'b'},   {"maxbytes", 'e'},       {"stepbytes", 'i'},
      {"stepfactor", 'f'}, {"iters", 'n'},          {"warmup_iters", 'w'},
      {"check", 'c'},      {"datatype", 'd'},       {"op", 'o'},
      {"nranks", 'N'},     {"timeout", 'T'},        {"help", 'h'},
      {"baseline", 'B'},   {"json", 'J'},           {"explain", 'X'},
      {"calibrate", 'C'},  {"shared-buffers", 'S'},
  };
  for (const auto& a : kAliases)
    if (name == a.name) return a.letter;
  return 0;
}

}  // namespace

Options parseOptions(int argc, char** argv) {
  Options o;
  bool haveCollective = false;
  bool sawMin = false;
  bool sawMax = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
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
      if (!letter) throw UsageError("unknown option '" + std::string(arg) + "'");
    } else if (arg.size() >= 2 && arg[0] == '-' &&
               !std::isdigit(static_cast<unsigned char>(arg[1]))) {
      letter = arg[1];
      flag = arg.substr(0, 2);
      if (arg.size() > 2) inlineValue = arg.substr(2);
    } else {
      auto c = parseCollective(arg);
      if (!c)
        throw UsageError("unknown collective '" + std::string(arg) +
                         "' (all_gather, reduce_scatter, all_reduce)");
      if (haveCollective) throw UsageError("more than one collective given");
      o.collective = *c;
      haveCollective = true;
      continue;
    }
    if (letter == 'h') {
      o.help = true;
      continue;
    }
    if (letter == 'X') {
      o.explain = true;
      continue;
    }
    if (letter == 'S') {
      o.sharedBuffers = true;
      continue;
    }
    if (std::string_view("beifnwcdoNTJBC").find(letter) == std::string_view::npos)
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
      case 'c': o.check = parseInt(flag, value, 0, 1) != 0; break;
      case 'd': o.types = parseTypes(value); break;
      case 'o': o.ops = parseOps(value); break;
      case 'N': o.launchRanks = static_cast<int>(parseInt(flag, value, 1, 4096)); break;
      case 'T': o.timeoutSec = static_cast<int>(parseInt(flag, value, 0, 1 << 30)); break;
      case 'J': o.jsonPath = std::string(value); break;
      case 'B':
        // Repeatable, or a comma list: --baseline mpi --baseline memcpy, --baseline mpi,memcpy.
        for (size_t at = 0; at <= value.size();) {
          const size_t comma = std::min(value.find(',', at), value.size());
          const std::string_view name = value.substr(at, comma - at);
          if (name == "mpi")
            o.mpiBaseline = true;
          else if (name == "memcpy")
            o.memcpyBaseline = true;
          else
            throw UsageError("--baseline: expected mpi or memcpy (or both: mpi,memcpy), got '" +
                             std::string(name) + "'");
          at = comma + 1;
        }
        break;
      case 'C': o.calibratePath = std::string(value); break;
      default: throw UsageError("unknown option '" + std::string(arg) + "'");
    }
  }
  if (o.help) return o;
  if (!haveCollective && o.calibratePath.empty())
    throw UsageError("missing collective (all_gather, reduce_scatter or all_reduce)");
  // nccl-tests: a lone -b or -e moves the other bound along when they would cross.
  if (sawMin && !sawMax && o.maxBytes < o.minBytes) o.maxBytes = o.minBytes;
  if (sawMax && !sawMin && o.minBytes > o.maxBytes) o.minBytes = o.maxBytes;
  if (o.minBytes > o.maxBytes) throw UsageError("-b (minbytes) is larger than -e (maxbytes)");
  if (o.stepFactor <= 1 && o.stepBytes == 0)
    throw UsageError("-i (stepbytes) must be positive when -f (stepfactor) is 1");
  return o;
}

std::vector<size_t> sizeSequence(const Options& o) {
  std::vector<size_t> sizes;
  for (size_t size = o.minBytes; size <= o.maxBytes;) {
    sizes.push_back(size);
    size_t next = o.stepFactor > 1 ? size * o.stepFactor : size + o.stepBytes;
    if (next <= size) break;  // overflow, or a zero minimum with a factor
    size = next;
  }
  return sizes;
}

std::string usageText(const char* program) {
  std::string p = program ? program : "sharc-perf";
  return "usage: " + p +
         " all_gather|reduce_scatter|all_reduce [options]\n"
         "       " +
         p +
         " --calibrate FILE [-N RANKS]\n"
         "  -b, --minbytes SIZE      smallest message, total bytes (default 32M)\n"
         "  -e, --maxbytes SIZE      largest message, total bytes (default 32M)\n"
         "  -f, --stepfactor N       multiply the size by N each step (default 1: use -i)\n"
         "  -i, --stepbytes SIZE     add SIZE each step when -f is 1 (default 1M)\n"
         "  -n, --iters N            timed iterations per size (default 20)\n"
         "  -w, --warmup_iters N     untimed iterations first (default 5)\n"
         "  -c, --check 0|1          verify one call's result per size (default 1)\n"
         "  -d, --datatype TYPE      float, half, bfloat16, double, int8, uint8, int32,\n"
         "                           uint32, int64, uint64, or all (default float)\n"
         "  -o, --op OP              sum, prod, min, max, avg, or all (default sum)\n"
         "  -N, --nranks N           launch N ranks on this host (fork, TCP rendezvous on\n"
         "                           127.0.0.1); otherwise join the job described by the\n"
         "                           environment (SHARC_ROOT/SHARC_RANK/SHARC_WORLD_SIZE,\n"
         "                           torchrun's MASTER_ADDR..., or mpirun)\n"
         "  -T, --timeout SEC        with -N: kill the ranks after SEC seconds (default 0: no)\n"
         "      --baseline mpi       also time the MPI collective (needs mpirun and an MPI\n"
         "                           build) and print 'mpi busbw' and 'ratio' columns\n"
         "      --baseline memcpy    also time a single core's memcpy (rank 0, the others idle) of "
         "the\n"
         "                           bytes the bus bandwidth counts per rank ((n-1)/n x size for\n"
         "                           all_gather and reduce_scatter, 2(n-1)/n x size for\n"
         "                           all_reduce) between two buffers allocated and written\n"
         "                           beforehand; time = the median over -n\n"
         "                           copies (after -w untimed ones); prints 'memcpy bw' (those\n"
         "                           bytes / that time, GB/s) and 'ratio' (out-of-place busbw /\n"
         "                           memcpy bw). Both baselines: --baseline mpi,memcpy\n"
         "      --shared-buffers     allocate the send and receive buffers with "
         "sharc::allocShared\n"
         "                           (ranks of one host then copy between them in user space)\n"
         "      --explain            print the tuner's algorithm, its predicted time (us) and\n"
         "                           measured out-of-place time / predicted per row\n"
         "      --calibrate FILE     measure the tuner's parameters on this job (latency and\n"
         "                           bandwidth of a rank pair on one node and across nodes,\n"
         "                           memcpy, reduction, step overhead) and write FILE for\n"
         "                           SHARC_TUNER_FILE; no collective needed\n"
         "      --json FILE          write every row as JSON to FILE\n"
         "  -h, --help               this text\n"
         "Sizes take K, M, G suffixes (binary). For all_gather and reduce_scatter the size is\n"
         "the whole gathered/scattered buffer; each rank contributes size/nranks bytes.\n";
}

}  // namespace sharc::perf

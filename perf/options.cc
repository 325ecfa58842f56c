#include "options.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <limits>

namespace sharc::perf {

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

long long parseIntFlag(std::string_view flag, std::string_view text, long long lo, long long hi) {
  long long v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || v < lo || v > hi)
    throw UsageError(std::string(flag) + ": expected an integer in [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "], got '" + std::string(text) + "'");
  return v;
}

namespace {

size_t parseSizeFlag(std::string_view flag, std::string_view text) {
  auto v = parseSize(text);
  if (!v) throw UsageError(std::string(flag) + ": bad size '" + std::string(text) + "'");
  return *v;
}

// One name, or a comma list when `list`, or "all".
std::vector<DataType> parseTypes(std::string_view text, bool list) {
  std::vector<DataType> out;
  if (text == "all") {
    for (int i = 0; i < kNumDataTypes; ++i) out.push_back(static_cast<DataType>(i));
    return out;
  }
  auto add = [&](std::string_view name) {
    std::optional<DataType> t;
    for (int i = 0; i < kNumDataTypes && !t; ++i)
      if (name == typeName(static_cast<DataType>(i))) t = static_cast<DataType>(i);
    if (!t) t = parseDataType(name);
    if (!t)
      throw UsageError("-d: unknown datatype '" + std::string(name) +
                       "' (float, half, bfloat16, double, int8, uint8, int32, uint32, int64, "
                       "uint64, all)");
    out.push_back(*t);
  };
  if (list)
    forEachItem(text, add);
  else
    add(text);
  return out;
}

std::vector<RedOp> parseOps(std::string_view text, bool list) {
  std::vector<RedOp> out;
  if (text == "all") {
    for (int i = 0; i < kNumRedOps; ++i) out.push_back(static_cast<RedOp>(i));
    return out;
  }
  auto add = [&](std::string_view name) {
    auto op = parseRedOp(name);
    if (!op)
      throw UsageError("-o: unknown op '" + std::string(name) +
                       "' (sum, prod, min, max, avg, all)");
    out.push_back(*op);
  };
  if (list)
    forEachItem(text, add);
  else
    add(text);
  return out;
}

// nccl-tests' names too: all_gather_perf, all-gather.
std::optional<CollectiveKind> parseCollective(std::string_view text) {
  std::string s;
  for (char ch : text)
    if (ch != '-') s += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (s.ends_with("perf")) s.resize(s.size() - 4);
  const auto kind = core::parseCollective(s);
  if (!kind || static_cast<int>(*kind) > static_cast<int>(CollectiveKind::AllReduce))
    return std::nullopt;
  return kind;
}

// sharc-perf's own long names (the common ones are FlagParser's).
constexpr LongFlag kLongFlags[] = {
    {"check", 'c'},  {"baseline", 'B'},  {"json", 'J'},           {"explain", 'X'},
    {"median", 'M'}, {"calibrate", 'C'}, {"shared-buffers", 'S'},
};

constexpr LongFlag kCommonLongFlags[] = {
    {"minbytes", 'b'}, {"maxbytes", 'e'},     {"stepbytes", 'i'}, {"stepfactor", 'f'},
    {"iters", 'n'},    {"warmup_iters", 'w'}, {"datatype", 'd'},  {"op", 'o'},
    {"nranks", 'N'},   {"timeout", 'T'},      {"help", 'h'},
};

char letterFor(std::span<const LongFlag> flags, std::string_view name) {
  for (const auto& f : flags)
    if (name == f.name) return f.letter;
  return 0;
}

}  // namespace

bool FlagParser::next() {
  if (++i_ >= argc_) return false;
  arg_ = argv_[i_];
  flag_ = arg_;
  letter_ = 0;
  inlineValue_.reset();
  if (arg_.starts_with("--") && arg_.size() > 2) {
    std::string_view name = arg_.substr(2);
    if (auto eq = name.find('='); eq != std::string_view::npos) {
      inlineValue_ = name.substr(eq + 1);
      name = name.substr(0, eq);
      flag_ = arg_.substr(0, eq + 2);
    }
    letter_ = letterFor(rules_.longFlags, name);
    if (!letter_) letter_ = letterFor(kCommonLongFlags, name);
  } else if (arg_.size() >= 2 && arg_[0] == '-' &&
             !std::isdigit(static_cast<unsigned char>(arg_[1]))) {
    letter_ = arg_[1];
    flag_ = arg_.substr(0, 2);
    if (arg_.size() > 2) inlineValue_ = arg_.substr(2);
  } else {
    letter_ = kPositional;
  }
  return true;
}

std::string_view FlagParser::value() {
  if (inlineValue_) return *inlineValue_;
  if (i_ + 1 >= argc_) throw UsageError(std::string(flag_) + ": missing value");
  return argv_[++i_];
}

UsageError FlagParser::unknown() const {
  return UsageError("unknown option '" + std::string(arg_) + "'");
}

bool FlagParser::applyCommon(CommonOptions& o) {
  if (letter_ == 'h') {
    o.help = true;
    return true;
  }
  if (letter_ == 0 || std::string_view("beifnwcdoNT").find(letter_) == std::string_view::npos) {
    if (letter_ == 0 || rules_.letters.find(letter_) == std::string_view::npos) throw unknown();
    return false;
  }
  const std::string_view v = value();
  switch (letter_) {
    case 'b':
      o.minBytes = parseSizeFlag(flag_, v);
      sawMin_ = true;
      break;
    case 'e':
      o.maxBytes = parseSizeFlag(flag_, v);
      sawMax_ = true;
      break;
    case 'i': o.stepBytes = parseSizeFlag(flag_, v); break;
    case 'f': o.stepFactor = static_cast<uint64_t>(parseIntFlag(flag_, v, 1, 1 << 20)); break;
    case 'n': o.iters = static_cast<int>(parseIntFlag(flag_, v, 1, 1 << 30)); break;
    case 'w': o.warmup = static_cast<int>(parseIntFlag(flag_, v, 0, 1 << 30)); break;
    case 'c': o.check = parseIntFlag(flag_, v, 0, 1) != 0; break;
    case 'd': o.types = parseTypes(v, rules_.typeLists); break;
    case 'o': o.ops = parseOps(v, rules_.typeLists); break;
    case 'N': o.launchRanks = static_cast<int>(parseIntFlag(flag_, v, 1, rules_.maxRanks)); break;
    case 'T': o.timeoutSec = static_cast<int>(parseIntFlag(flag_, v, 0, 1 << 30)); break;
  }
  return true;
}

void FlagParser::finish(CommonOptions& o) const {
  // nccl-tests: a lone -b or -e moves the other bound along when they would cross.
  if (sawMin_ && !sawMax_ && o.maxBytes < o.minBytes) o.maxBytes = o.minBytes;
  if (sawMax_ && !sawMin_ && o.minBytes > o.maxBytes) o.minBytes = o.maxBytes;
  if (o.minBytes > o.maxBytes) throw UsageError("-b (minbytes) is larger than -e (maxbytes)");
  if (o.stepFactor <= 1 && o.stepBytes == 0)
    throw UsageError("-i (stepbytes) must be positive when -f (stepfactor) is 1");
}

Options parseOptions(int argc, char** argv) {
  Options o;
  bool haveCollective = false;
  FlagParser p(argc, argv,
               {.longFlags = kLongFlags, .letters = "JBC", .maxRanks = 4096, .typeLists = false});
  while (p.next()) {
    if (p.positional()) {
      auto c = parseCollective(p.arg());
      if (!c)
        throw UsageError("unknown collective '" + std::string(p.arg()) +
                         "' (all_gather, reduce_scatter, all_reduce)");
      if (haveCollective) throw UsageError("more than one collective given");
      o.collective = *c;
      haveCollective = true;
      continue;
    }
    if (p.letter() == 'X') {
      o.explain = true;
      continue;
    }
    if (p.letter() == 'S') {
      o.sharedBuffers = true;
      continue;
    }
    if (p.letter() == 'M') {
      o.median = true;
      continue;
    }
    if (p.applyCommon(o)) continue;
    const std::string_view value = p.value();
    switch (p.letter()) {
      case 'J': o.jsonPath = std::string(value); break;
      case 'B':
        // Repeatable, or a comma list: --baseline mpi --baseline memcpy, --baseline mpi,memcpy.
        forEachItem(value, [&](std::string_view name) {
          if (name == "mpi")
            o.mpiBaseline = true;
          else if (name == "memcpy")
            o.memcpyBaseline = true;
          else
            throw UsageError("--baseline: expected mpi or memcpy (or both: mpi,memcpy), got '" +
                             std::string(name) + "'");
        });
        break;
      case 'C': o.calibratePath = std::string(value); break;
      default: throw p.unknown();
    }
  }
  if (o.help) return o;
  if (!haveCollective && o.calibratePath.empty())
    throw UsageError("missing collective (all_gather, reduce_scatter or all_reduce)");
  p.finish(o);
  return o;
}

std::vector<size_t> sizeSequence(const CommonOptions& o) {
  std::vector<size_t> sizes;
  for (size_t size = o.minBytes; size <= o.maxBytes;) {
    sizes.push_back(size);
    size_t next = o.stepFactor > 1 ? size * o.stepFactor : size + o.stepBytes;
    if (next <= size) break;  // overflow, or a zero minimum with a factor
    size = next;
  }
  return sizes;
}

size_t elementCount(CollectiveKind c, size_t bytes, size_t typeSize, int nranks) {
  if (c == CollectiveKind::AllReduce) return bytes / typeSize;
  return bytes / (typeSize * static_cast<size_t>(nranks));
}

size_t reportedBytes(CollectiveKind c, size_t count, size_t typeSize, int nranks) {
  if (c == CollectiveKind::AllReduce) return count * typeSize;
  return count * typeSize * static_cast<size_t>(nranks);
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
         "      --median             time each of the -n calls: time (and busbw, ratio) is the\n"
         "                           slowest rank's median call, not the mean over -n; one\n"
         "                           stalled call then does not move it (JSON has both)\n"
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

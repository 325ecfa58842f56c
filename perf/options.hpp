// Command-line options of sharc-perf, modelled on NVIDIA's nccl-tests.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <sharc/types.hpp>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/collective.hpp"

namespace sharc::perf {

/// The flags sharc-perf and sharc-gpu-perf both take, as nccl-tests spells them.
struct CommonOptions {
  size_t minBytes = size_t{32} << 20;              ///< -b
  size_t maxBytes = size_t{32} << 20;              ///< -e
  size_t stepBytes = size_t{1} << 20;              ///< -i (used when stepFactor <= 1)
  uint64_t stepFactor = 1;                         ///< -f
  int iters = 20;                                  ///< -n
  int warmup = 5;                                  ///< -w
  bool check = true;                               ///< -c
  std::vector<DataType> types{DataType::Float32};  ///< -d
  std::vector<RedOp> ops{RedOp::Sum};              ///< -o
  int launchRanks = 0;                             ///< -N: self-launch this many ranks (0: don't)
  int timeoutSec = 0;  ///< -T: kill self-launched ranks after this (0: never)
  bool help = false;   ///< -h
};

struct Options : CommonOptions {
  CollectiveKind collective = CollectiveKind::AllReduce;
  bool mpiBaseline = false;     ///< --baseline mpi
  bool memcpyBaseline = false;  ///< --baseline memcpy
  bool explain = false;         ///< --explain: the tuner's plan and prediction per row
  /// --median: the table's time is the slowest rank's median time of one call, not the
  /// mean over -n (nccl-tests' time); the JSON carries both either way.
  bool median = false;
  bool sharedBuffers = false;  ///< --shared-buffers: send/recv from sharc::allocShared
  std::string calibratePath;   ///< --calibrate FILE: measure the tuner's parameters
  std::string jsonPath;        ///< --json FILE
};

/// Thrown for a malformed command line; what() is the message to print before the usage.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A long option name and the letter it stands for.
struct LongFlag {
  const char* name;
  char letter;
};

/// Reads an nccl-tests style command line one word at a time and applies the flags both tools
/// take (-b -e -i -f -n -w -c -d -o -N -T, -h and their long names); each tool handles its own
/// letters and its positional words (the collective).
class FlagParser {
 public:
  struct Rules {
    std::span<const LongFlag> longFlags;  ///< the tool's own long names, before the common ones
    std::string_view letters;             ///< the tool's own letters that take a value
    long long maxRanks;                   ///< the largest -N
    bool typeLists;                       ///< -d and -o take comma lists
  };
  FlagParser(int argc, char** argv, const Rules& rules) : argc_(argc), argv_(argv), rules_(rules) {}

  /// Moves to the next word; false after the last.
  bool next();
  /// The word as given.
  std::string_view arg() const { return arg_; }
  /// Not a flag (nor a negative number): the collective.
  bool positional() const { return letter_ == kPositional; }
  /// The flag's letter, 0 for an unknown long name.
  char letter() const { return letter_; }
  /// The flag as typed, for messages: "-b", "--minbytes".
  std::string_view flag() const { return flag_; }
  /// Whether the value came with the flag ("-b1M", "--minbytes=1M").
  bool hasInlineValue() const { return inlineValue_.has_value(); }
  /// Handles -h and the common letters that take a value, taking the value from this word or
  /// the next. False for any other letter; throws UsageError for a letter that is neither a
  /// common one nor one of Rules::letters, or for a missing or malformed value.
  bool applyCommon(CommonOptions& o);
  /// The flag's value, from this word or the next; throws UsageError when it is missing.
  std::string_view value();
  /// "unknown option 'ARG'".
  UsageError unknown() const;
  /// The checks once every word is read: -b/-e (a lone one moves the other along), -i/-f.
  void finish(CommonOptions& o) const;

 private:
  static constexpr char kPositional = '\x01';
  int argc_;
  char** argv_;
  Rules rules_;
  int i_ = 0;
  std::string_view arg_, flag_;
  char letter_ = 0;
  std::optional<std::string_view> inlineValue_;
  bool sawMin_ = false, sawMax_ = false;
};

/// A flag's integer value in [lo, hi]; throws UsageError naming `flag` otherwise.
long long parseIntFlag(std::string_view flag, std::string_view text, long long lo, long long hi);
/// Calls fn for each item of a comma list ("a,b", "a"; "" is one empty item).
template <typename Fn>
void forEachItem(std::string_view text, Fn&& fn) {
  for (size_t at = 0; at <= text.size();) {
    const size_t comma = std::min(text.find(',', at), text.size());
    fn(text.substr(at, comma - at));
    at = comma + 1;
  }
}

/// Parses argv (argv[0] is the program). Throws UsageError.
Options parseOptions(int argc, char** argv);
/// The -h text.
std::string usageText(const char* program);

/// nccl-tests' type names: "int8", "uint8", "int32", "uint32", "int64", "uint64", "half",
/// "float", "double", "bfloat16".
const char* typeName(DataType t) noexcept;
/// "1024", "1K", "64M", "2G" (binary multiples; an optional trailing "B" or "iB").
std::optional<size_t> parseSize(std::string_view text) noexcept;

/// The message sizes (total bytes, as in nccl-tests) in the order they are run.
std::vector<size_t> sizeSequence(const CommonOptions& o);
/// Elements per rank for all_gather/reduce_scatter, in total for all_reduce.
size_t elementCount(CollectiveKind c, size_t bytes, size_t typeSize, int nranks);
/// Bytes nccl-tests reports for `count`: the full gathered/scattered buffer.
size_t reportedBytes(CollectiveKind c, size_t count, size_t typeSize, int nranks);

}  // namespace sharc::perf

// Command-line options of sharc-perf, modelled on NVIDIA's nccl-tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <sharc/types.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace sharc::perf {

enum class Collective { AllGather, ReduceScatter, AllReduce };

struct Options {
  Collective collective = Collective::AllReduce;
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
  int timeoutSec = 0;           ///< -T: kill self-launched ranks after this (0: never)
  bool mpiBaseline = false;     ///< --baseline mpi
  bool memcpyBaseline = false;  ///< --baseline memcpy
  bool explain = false;         ///< --explain: the tuner's plan and prediction per row
  bool sharedBuffers = false;   ///< --shared-buffers: send/recv from sharc::allocShared
  std::string calibratePath;    ///< --calibrate FILE: measure the tuner's parameters
  std::string jsonPath;         ///< --json FILE
  bool help = false;            ///< -h
};

/// Thrown for a malformed command line; what() is the message to print before the usage.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Parses argv (argv[0] is the program). Throws UsageError.
Options parseOptions(int argc, char** argv);
/// The -h text.
std::string usageText(const char* program);

/// "all_gather", "reduce_scatter", "all_reduce".
const char* collectiveName(Collective c) noexcept;
/// True for the collectives that take a reduction operator.
bool collectiveReduces(Collective c) noexcept;
/// nccl-tests' type names: "int8", "uint8", "int32", "uint32", "int64", "uint64", "half",
/// "float", "double", "bfloat16".
const char* typeName(DataType t) noexcept;
/// "1024", "1K", "64M", "2G" (binary multiples; an optional trailing "B" or "iB").
std::optional<size_t> parseSize(std::string_view text) noexcept;

/// The message sizes (total bytes, as in nccl-tests) in the order they are run.
std::vector<size_t> sizeSequence(const Options& o);

}  // namespace sharc::perf

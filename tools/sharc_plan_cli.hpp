// sharc-plan's pieces shared by its subcommands (tools/sharc_plan.cc: main, options,
// `collective`; tools/sharc_plan_fsdp.cc: `fsdp`, `backtest`).
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "sharc/plan.hpp"

namespace sharc::plan::cli {

/// A bad command line: printed with a hint to --help, exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The options after the subcommand: "--key value" pairs and "--flag"s.
struct Args {
  std::string command;
  std::map<std::string, std::string> values;  ///< option -> value ("" for flags)
  bool has(const std::string& k) const { return values.count(k) != 0; }
  std::string get(const std::string& k, const std::string& fallback = "") const;
};

/// Parses argv after the subcommand against the options `withValue` and `flags` of
/// `command`; throws UsageError naming the option and listing the valid ones.
Args parseArgs(const std::string& command, int argc, char** argv,
               const std::vector<std::string>& withValue, const std::vector<std::string>& flags);

/// The cluster of --cluster NAME | --cluster-file F | --calibration F (exactly one), with
/// --ranks-per-node and --gpu-memory applied.
Cluster clusterOf(const Args& a);
/// A whole number >= min of option `opt`, else UsageError.
long long toInt(const std::string& opt, const std::string& text, long long min);
/// A number > 0 of option `opt`, else UsageError.
double toDouble(const std::string& opt, const std::string& text);
/// Bytes with an optional K/M/G/T suffix (powers of 1024), as nccl-tests' -b/-e.
size_t toBytes(const std::string& opt, const std::string& text);
/// "1.5G", "256M", "64K", "512" (powers of 1024).
std::string bytesText(double bytes);

/// A JSON string literal.
std::string jsonString(const std::string& s);
/// A JSON number (finite; 6 significant digits unless integral).
std::string jsonNumber(double v);
/// The cluster as a JSON object.
std::string clusterJson(const Cluster& c);
/// One line describing the cluster.
std::string clusterText(const Cluster& c);

int runCollective(const Args& a);
int runFsdp(const Args& a);
int runBacktestCommand(const Args& a);
int runSimulate(const Args& a);

}  // namespace sharc::plan::cli

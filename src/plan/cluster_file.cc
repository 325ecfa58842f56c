// Clusters that are not built-in profiles (include/sharc/plan_fsdp.hpp): this host's
// cost-model parameters, and cluster files (Cluster's fields, or a sharc-perf --calibrate
// file's tuner keys).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string_view>

#include "algorithms/tuner.hpp"
#include "cluster_model.hpp"
#include "core/config.hpp"
#include "sharc/error.hpp"
#include "sharc/plan_fsdp.hpp"

namespace sharc::plan {

// A Cluster from the tuner's parameters (what the running process would use).
Cluster fromTuner(const algo::TunerParams& p, int ranksPerNode, double memoryBytes) {
  Cluster c;
  c.ranksPerNode = ranksPerNode;
  c.memoryBytes = memoryBytes;
  c.localAlphaUs = p.local.alphaUs;
  c.localGBps = p.local.gbps;
  c.fabricAlphaUs = p.fabric.alphaUs;
  c.fabricGBps = p.fabric.gbps;
  c.rails = 1;
  c.copyGBps = p.copyGbps;
  c.reduceGBps = p.reduceGbps;
  c.stepUs = p.stepUs;
  c.efficiency = 1.0;
  c.fabricHalfDuplex = p.fabricHalfDuplex;
  c.dmaTransfers = p.dmaTransfers;
  c.postedSends = p.postedSends;
  c.railsPerRank = p.fabricRails;   // this host's rails (SHARC_NICS)
  c.railShare = p.fabricRailShare;  // and what the first carries (capped links: all of it)
  return c;
}

namespace {

// A file key: which field it sets. Cluster keys first, then the tuner file's.
struct Key {
  const char* name;
  double Cluster::*field;  // nullptr: handled by name (ranks, memory, names) or ignored
  const char* expected;
};

constexpr Key kKeys[] = {
    {"name", nullptr, "text"},
    {"source", nullptr, "text"},
    {"ranks_per_node", nullptr, "a whole number >= 1"},
    {"memory_gib", nullptr, "GiB of one rank's device memory, a number >= 0"},
    {"local_alpha_us", &Cluster::localAlphaUs, "microseconds, a number >= 0"},
    {"local_gbps", &Cluster::localGBps, "GB/s, a number > 0"},
    {"fabric_alpha_us", &Cluster::fabricAlphaUs, "microseconds, a number >= 0"},
    {"fabric_gbps", &Cluster::fabricGBps, "GB/s of one node, a number > 0"},
    {"rails", nullptr, "a whole number >= 1"},
    {"copy_gbps", &Cluster::copyGBps, "GB/s, a number > 0"},
    {"reduce_gbps", &Cluster::reduceGBps, "GB/s, a number > 0"},
    {"step_us", &Cluster::stepUs, "microseconds, a number >= 0"},
    {"efficiency", &Cluster::efficiency, "a number in (0, 1]"},
    {"fabric_half_duplex", nullptr, "0 or 1"},
    {"dma_transfers", nullptr, "0 or 1"},
    {"posted_sends", nullptr, "a whole number >= 0 (0: no limit)"},
    {"fabric_rank_share", &Cluster::fabricRankShare, "a number in [0, 1] (0: from rails)"},
    {"rails_per_rank", nullptr, "a whole number >= 0 (0: from rails)"},
    {"rail_share", &Cluster::railShare, "a number in [0, 1] (0: every NIC alike)"},
    {"pcie_gbps", &Cluster::pcieGBps, "GB/s of one GPU's PCIe link, a number >= 0 (0: none)"},
    {"host_reduce_gbps", &Cluster::hostReduceGBps,
     "GB/s, a number >= 0 (0: the tuner's host default)"},
    // A sharc-perf --calibrate (SHARC_TUNER_FILE) file.
    {"local.alpha_us", &Cluster::localAlphaUs, "microseconds, a number >= 0"},
    {"local.gbps", &Cluster::localGBps, "GB/s, a number > 0"},
    {"fabric.alpha_us", &Cluster::fabricAlphaUs, "microseconds, a number >= 0"},
    {"fabric.gbps", &Cluster::fabricGBps, "GB/s of one node, a number > 0"},
    {"copy.gbps", &Cluster::copyGBps, "GB/s, a number > 0"},
    {"reduce.gbps", &Cluster::reduceGBps, "GB/s, a number > 0"},
    {"fabric.half_duplex", nullptr, "0 or 1"},
    // The other tuner keys (core::kTunerKeys: this host's CPU scheduling) are accepted and
    // not used for another cluster; so are learned `choice.` lines.
};

bool ignoredTunerKey(const std::string& key) {
  if (key.starts_with("choice.")) return true;
  for (const char* k : core::kTunerKeys)
    if (key == k) return true;
  return false;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// Whether `v` is a valid value for `key` (expected is the text of the rule).
bool valueOk(const std::string& key, double v) {
  if (key == "ranks_per_node" || key == "rails") return v >= 1 && v == std::floor(v) && v < 1e6;
  if (key == "posted_sends" || key == "rails_per_rank")
    return v >= 0 && v == std::floor(v) && v < 1e6;
  if (key.find("half_duplex") != std::string::npos || key == "dma_transfers")
    return v == 0 || v == 1;
  if (key == "efficiency") return v > 0 && v <= 1;
  if (key.ends_with("share")) return v >= 0 && v <= 1;
  if (key == "pcie_gbps" || key == "host_reduce_gbps") return v >= 0;
  if (key.find("gbps") != std::string::npos) return v > 0;
  return v >= 0;
}

// A number as the file writes it: the shortest text that reads back to the same double.
std::string exactNumber(double v) {
  char b[40];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(b, sizeof b, "%.0f", v);
    return b;
  }
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(b, sizeof b, "%.*g", digits, v);
    if (std::strtod(b, nullptr) == v) break;
  }
  return b;
}

// Text as the file writes it: one line, without the comment mark.
std::string fileText(std::string s) {
  for (char& ch : s)
    if (ch == '#' || ch == '\n' || ch == '\r') ch = ' ';
  return trim(s);
}

}  // namespace

std::vector<std::string> clusterFileKeys() {
  std::vector<std::string> k;
  for (const Key& key : kKeys) k.push_back(key.name);
  for (const char* t : core::kTunerKeys)
    if (std::find(k.begin(), k.end(), t) == k.end()) k.push_back(t);
  return k;
}

std::vector<ClusterField> clusterFileFields(const Cluster& c) {
  const auto flag = [](bool b) { return std::string(b ? "1" : "0"); };
  const std::map<std::string, ClusterField> byName = {
      {"name", {"name", fileText(c.name), true}},
      {"source", {"source", fileText(c.source), true}},
      {"ranks_per_node", {"ranks_per_node", std::to_string(c.ranksPerNode), false}},
      {"memory_gib", {"memory_gib", exactNumber(c.memoryBytes / (1u << 30)), false}},
      {"rails", {"rails", std::to_string(c.rails), false}},
      {"fabric_half_duplex", {"fabric_half_duplex", flag(c.fabricHalfDuplex), false}},
      {"dma_transfers", {"dma_transfers", flag(c.dmaTransfers), false}},
      {"posted_sends", {"posted_sends", std::to_string(c.postedSends), false}},
      {"rails_per_rank", {"rails_per_rank", std::to_string(c.railsPerRank), false}},
  };
  std::vector<ClusterField> out;
  for (const Key& k : kKeys) {
    if (std::string_view(k.name).find('.') != std::string_view::npos) continue;  // tuner alias
    if (k.field)
      out.push_back({k.name, exactNumber(c.*(k.field)), false});
    else
      out.push_back(byName.at(k.name));
  }
  return out;
}

std::string clusterFileText(const Cluster& c) {
  std::string out = "# sharc-plan cluster file: `key = value` lines (sharc-plan --help)\n";
  for (const ClusterField& f : clusterFileFields(c)) out += f.key + " = " + f.value + "\n";
  return out;
}

Cluster thisHostCluster(int ranksPerNode, double memoryBytes) {
  const algo::TunerParams t = algo::TunerParams::fromConfig(core::Config::get());
  Cluster c = fromTuner(t, ranksPerNode, memoryBytes);
  const std::string& file = core::Config::get().tunerFile;
  c.name = "this host";
  c.source = "sharc's tuner on this host (fabric: " + t.fabricSource + ")" +
             (file.empty() ? "" : ", SHARC_TUNER_FILE " + file);
  return c;
}

Cluster loadClusterFile(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw Error(Result::InvalidArgument, "cluster file '" + path +
                                             "': cannot read it (expected a readable file of " +
                                             "`key = value` lines)");
  Cluster c = fromTuner(algo::TunerParams::defaults(), 8, 0);
  // Another cluster's NICs: each rank stripes over its share of `rails`, all alike, as the
  // built-in profiles (not this host's one rail).
  c.railsPerRank = 0;
  c.railShare = 0;
  const size_t slash = path.find_last_of('/');
  c.name = slash == std::string::npos ? path : path.substr(slash + 1);
  c.source = "cluster file " + path;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::string where = "cluster file '" + path + "' line " + std::to_string(number);
    const size_t hash = line.find('#');
    const std::string text = trim(line.substr(0, hash));
    if (text.empty()) continue;
    const size_t eq = text.find('=');
    if (eq == std::string::npos)
      throw Error(Result::InvalidArgument, where + ": '" + text + "' is not `key = value`");
    const std::string key = trim(text.substr(0, eq)), value = trim(text.substr(eq + 1));
    const Key* k = nullptr;
    for (const Key& candidate : kKeys)
      if (key == candidate.name) k = &candidate;
    if (!k && ignoredTunerKey(key)) continue;
    if (!k) {
      std::string valid;
      for (const std::string& name : clusterFileKeys()) valid += (valid.empty() ? "" : ", ") + name;
      throw Error(Result::InvalidArgument,
                  where + ": unknown key '" + key + "' (valid keys: " + valid + ")");
    }
    if (key == "name" || key == "source") {
      (key == "name" ? c.name : c.source) = value;
      continue;
    }
    errno = 0;
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || errno != 0 || !std::isfinite(v) || !valueOk(key, v))
      throw Error(Result::InvalidArgument,
                  where + ": " + key + " = '" + value + "': expected " + k->expected);
    if (k->field) {
      c.*(k->field) = v;
    } else if (key == "ranks_per_node") {
      c.ranksPerNode = static_cast<int>(v);
    } else if (key == "rails") {
      c.rails = static_cast<int>(v);
    } else if (key == "fabric_half_duplex" || key == "fabric.half_duplex") {
      c.fabricHalfDuplex = v == 1;
    } else if (key == "dma_transfers") {
      c.dmaTransfers = v == 1;
    } else if (key == "posted_sends") {
      c.postedSends = static_cast<int>(v);
    } else if (key == "rails_per_rank") {
      c.railsPerRank = static_cast<int>(v);
    } else if (key == "memory_gib") {
      c.memoryBytes = v * (1u << 30);
    }
  }
  return c;
}

}  // namespace sharc::plan

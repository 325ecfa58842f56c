// sharc-plan simulate: the model's prediction beside a replay of the engine's real schedules
// (src/plan/schedule_sim.hpp) for the same cluster, node count, size, algorithm and chunk.
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

#include "schedule_sim.hpp"
#include "sharc/error.hpp"
#include "sharc_plan_cli.hpp"

namespace sharc::plan::cli {
namespace {

// The replay plays every message of every rank, all held at once: up to 1,024 p5 nodes, as
// long as the call's operations fit simulateCall's cap (schedule_sim.cc), which turns away the
// schedules whose operations grow with the square of the ranks.
constexpr int kMaxSimulatedRanks = 8192;

struct SimRow {
  Prediction model;
  SimResult replay;  // replay.us NaN: none
  double errorPct() const { return 100.0 * (model.predictedUs - replay.us) / replay.us; }
};

Collective collectiveOf(const std::string& name) {
  if (name == "all_gather") return Collective::AllGather;
  if (name == "reduce_scatter") return Collective::ReduceScatter;
  if (name == "all_reduce") return Collective::AllReduce;
  throw UsageError("sharc-plan simulate: --collective '" + name +
                   "' (valid: all_gather, reduce_scatter, all_reduce)");
}

}  // namespace

int runSimulate(const Args& a) {
  const Cluster cl = clusterOf(a);
  const std::string cname = a.get("--collective", "all_gather");
  const Collective coll = collectiveOf(cname);
  std::vector<int> nodes;
  std::stringstream ss(a.get("--nodes", "2,4,8"));
  for (std::string item; std::getline(ss, item, ',');) {
    const int n = static_cast<int>(toInt("--nodes", item, 1));
    if (static_cast<long long>(n) * cl.ranksPerNode > kMaxSimulatedRanks)
      throw UsageError("--nodes " + item + ": " + std::to_string(n) + " x " +
                       std::to_string(cl.ranksPerNode) + " ranks; the replay takes at most " +
                       std::to_string(kMaxSimulatedRanks) + " ranks (sharc-plan collective " +
                       "predicts any number)");
    nodes.push_back(n);
  }
  if (nodes.empty()) throw UsageError("--nodes: expected node counts like 2,4,8");
  const size_t begin = toBytes("-b", a.get("-b", "1M")), end = toBytes("-e", a.get("-e", "256M"));
  const long long factor = toInt("-f", a.get("-f", "4"), 2);
  if (end < begin) throw UsageError("-e must be at least -b");
  const std::string algorithm = a.get("--algorithm");

  std::vector<SimRow> rows;
  for (int n : nodes)
    for (size_t b = begin; b <= end; b = static_cast<size_t>(b * factor)) {
      SimRow r;
      r.model = predictCollective(cl, n, coll, b, algorithm);
      // The replay runs what the model costed: its algorithm and chunk.
      try {
        r.replay = simulateCall(cl, n, coll, b, r.model.algorithm, r.model.chunkBytes);
      } catch (const Error& e) {  // e.g. a single-copy algorithm, which the replay has not
        if (e.code() != Result::InvalidArgument) throw;
        std::fprintf(stderr, "sharc-plan simulate: %d nodes %s: %s\n", n,
                     bytesText(static_cast<double>(b)).c_str(), e.what());
        r.replay.us = NAN;
      }
      rows.push_back(r);
      if (!a.has("--json"))
        std::fprintf(stderr, "sharc-plan simulate: %d nodes %s done\n", n,
                     bytesText(static_cast<double>(b)).c_str());
      if (b > end / factor) break;
    }

  if (a.has("--json")) {
    std::ostringstream json;
    json << "{\"cluster\": " << clusterJson(cl) << ", \"collective\": " << jsonString(cname)
         << ", \"rows\": [";
    for (size_t i = 0; i < rows.size(); ++i) {
      const SimRow& r = rows[i];
      json << (i ? ",\n  " : "\n  ") << "{\"nodes\": " << r.model.nodes
           << ", \"ranks\": " << r.model.ranks << ", \"bytes\": " << r.model.bytes
           << ", \"algorithm\": " << jsonString(r.model.algorithm)
           << ", \"chunk_bytes\": " << r.model.chunkBytes
           << ", \"model_us\": " << jsonNumber(r.model.predictedUs)
           << ", \"replay_us\": " << jsonNumber(r.replay.us)
           << ", \"error_pct\": " << jsonNumber(r.errorPct())
           << ", \"rank0_fabric_first_us\": " << jsonNumber(r.replay.fabricFirstUs)
           << ", \"rank0_fabric_last_us\": " << jsonNumber(r.replay.fabricLastUs)
           << ", \"rank0_fabric_busy_us\": " << jsonNumber(r.replay.fabricBusyUs) << "}";
    }
    json << "\n]}\n";
    std::fputs(json.str().c_str(), stdout);
    return 0;
  }
  std::printf("sharc-plan simulate %s on %s\n", cname.c_str(), clusterText(cl).c_str());
  const bool fabric = a.has("--fabric");
  int last = -1;
  for (const SimRow& r : rows) {
    if (r.model.nodes != last) {
      std::printf("\n%6s %6s %8s %-18s %6s %12s %12s %8s", "nodes", "ranks", "size", "algorithm",
                  "chunk", "model_us", "replay_us", "error");
      if (fabric) std::printf(" %9s %9s %9s", "lead_us", "busy_us", "idle_us");
      std::printf("\n");
    }
    last = r.model.nodes;
    std::printf("%6d %6d %8s %-18s %6s %12.1f %12.1f %+7.1f%%", r.model.nodes, r.model.ranks,
                bytesText(static_cast<double>(r.model.bytes)).c_str(), r.model.algorithm.c_str(),
                bytesText(static_cast<double>(r.model.chunkBytes)).c_str(), r.model.predictedUs,
                r.replay.us, r.errorPct());
    const SimResult& f = r.replay;
    if (fabric)
      std::printf(" %9.1f %9.1f %9.1f", f.fabricFirstUs, f.fabricBusyUs,
                  f.fabricLastUs - f.fabricFirstUs - f.fabricBusyUs);
    std::printf("\n");
  }
  std::printf(
      "\nerror = (model - replay) / replay; the replay plays every rank's real schedule over the "
      "same links (docs/planning.md, \"The schedule replay\")\n");
  if (fabric)
    std::printf(
        "lead_us: when rank 0's first message to another node started moving; busy_us: how "
        "long at least one moved; idle_us: the gaps between its first and its last\n");
  return 0;
}

}  // namespace sharc::plan::cli

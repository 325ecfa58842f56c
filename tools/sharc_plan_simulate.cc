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
// long as the call's operations fit simulateUs's cap (schedule_sim.cc), which turns away the
// schedules whose operations grow with the square of the ranks.
constexpr int kMaxSimulatedRanks = 8192;

struct SimRow {
  Prediction model;
  double replayUs = 0;
  double errorPct() const {
    return 100.0 * (model.predictedUs - replayUs) / replayUs;
  }  // NaN: none
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
        r.replayUs = simulateUs(cl, n, coll, b, r.model.algorithm, r.model.chunkBytes);
      } catch (const Error& e) {  // e.g. a single-copy algorithm, which the replay has not
        if (e.code() != Result::InvalidArgument) throw;
        std::fprintf(stderr, "sharc-plan simulate: %d nodes %s: %s\n", n,
                     bytesText(static_cast<double>(b)).c_str(), e.what());
        r.replayUs = NAN;
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
           << ", \"replay_us\": " << jsonNumber(r.replayUs)
           << ", \"error_pct\": " << jsonNumber(r.errorPct()) << "}";
    }
    json << "\n]}\n";
    std::fputs(json.str().c_str(), stdout);
    return 0;
  }
  std::printf("sharc-plan simulate %s on %s\n", cname.c_str(), clusterText(cl).c_str());
  int last = -1;
  for (const SimRow& r : rows) {
    if (r.model.nodes != last)
      std::printf("\n%6s %6s %8s %-18s %6s %12s %12s %8s\n", "nodes", "ranks", "size", "algorithm",
                  "chunk", "model_us", "replay_us", "error");
    last = r.model.nodes;
    std::printf("%6d %6d %8s %-18s %6s %12.1f %12.1f %+7.1f%%\n", r.model.nodes, r.model.ranks,
                bytesText(static_cast<double>(r.model.bytes)).c_str(), r.model.algorithm.c_str(),
                bytesText(static_cast<double>(r.model.chunkBytes)).c_str(), r.model.predictedUs,
                r.replayUs, r.errorPct());
  }
  std::printf(
      "\nerror = (model - replay) / replay; the replay plays every rank's real schedule over the "
      "same links (docs/planning.md, \"The schedule replay\")\n");
  return 0;
}

}  // namespace sharc::plan::cli

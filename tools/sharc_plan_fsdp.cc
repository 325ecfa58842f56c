// sharc-plan fsdp (the ranked hybrid-shard / tensor-parallel table of planFsdp) and
// sharc-plan backtest (src/plan/nccl_backtest.hpp).
#include <cstdio>
#include <sstream>

#include "nccl_backtest.hpp"
#include "sharc/plan_fsdp.hpp"
#include "sharc_plan_cli.hpp"

namespace sharc::plan::cli {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

ModelSpec modelOf(const Args& a) {
  const char* custom[] = {"--params", "--layers", "--hidden", "--seq", "--vocab"};
  bool anyCustom = false;
  for (const char* o : custom) anyCustom = anyCustom || a.has(o);
  std::string presets;
  for (const auto& n : builtinModelNames()) presets += (presets.empty() ? "" : ", ") + n;
  ModelSpec m;
  if (a.has("--model")) {
    if (anyCustom)
      throw UsageError(
          "sharc-plan fsdp: --model or --params/--layers/--hidden/--seq/--vocab, "
          "not both");
    const std::string name = a.get("--model");
    bool known = false;
    for (const auto& n : builtinModelNames()) known = known || n == name;
    if (!known)
      throw UsageError("sharc-plan fsdp: unknown --model '" + name + "' (valid: " + presets + ")");
    m = builtinModel(name);
  } else {
    for (const char* o : custom)
      if (!a.has(o))
        throw UsageError(std::string("sharc-plan fsdp: give --model (") + presets +
                         ") or all of --params, --layers, --hidden, --seq, --vocab (missing " + o +
                         ")");
    m.name = "custom";
    m.parameters = toDouble("--params", a.get("--params"));
    m.layers = static_cast<int>(toInt("--layers", a.get("--layers"), 1));
    m.hidden = static_cast<int>(toInt("--hidden", a.get("--hidden"), 1));
    m.seqLen = static_cast<int>(toInt("--seq", a.get("--seq"), 1));
    m.vocab = static_cast<int>(toInt("--vocab", a.get("--vocab"), 0));
    m.tiedEmbeddings = a.has("--tied");
  }
  if (a.has("--batch")) m.microBatch = static_cast<int>(toInt("--batch", a.get("--batch"), 1));
  if (a.has("--param-bytes")) m.paramBytes = toDouble("--param-bytes", a.get("--param-bytes"));
  return m;
}

std::string degrees(const FsdpCandidate& c) {
  return "hybrid_shard_degree=" + std::to_string(c.hybridShardDegree) +
         " tensor_parallel_degree=" + std::to_string(c.tensorParallelDegree);
}

std::string candidateJson(const FsdpCandidate& c) {
  std::ostringstream o;
  o << "{\"hybrid_shard_degree\": " << c.hybridShardDegree
    << ", \"tensor_parallel_degree\": " << c.tensorParallelDegree
    << ", \"replicas\": " << c.replicas << ", \"param_bytes\": " << jsonNumber(c.paramBytes)
    << ", \"grad_bytes\": " << jsonNumber(c.gradBytes)
    << ", \"optimizer_bytes\": " << jsonNumber(c.optimizerBytes)
    << ", \"gathered_layer_bytes\": " << jsonNumber(c.gatheredLayerBytes)
    << ", \"activation_bytes\": " << jsonNumber(c.activationBytes)
    << ", \"total_bytes\": " << jsonNumber(c.totalBytes)
    << ", \"fits\": " << (c.fits ? "true" : "false")
    << ", \"all_gather_us\": " << jsonNumber(c.allGatherUs)
    << ", \"reduce_scatter_us\": " << jsonNumber(c.reduceScatterUs)
    << ", \"all_reduce_us\": " << jsonNumber(c.allReduceUs) << ", \"tp_us\": " << jsonNumber(c.tpUs)
    << ", \"comm_us\": " << jsonNumber(c.commUs)
    << ", \"inter_node_bytes_per_node\": " << jsonNumber(c.interNodeBytesPerNode)
    << ", \"all_gather_algorithm\": " << jsonString(c.allGatherAlgorithm)
    << ", \"reduce_scatter_algorithm\": " << jsonString(c.reduceScatterAlgorithm)
    << ", \"all_reduce_algorithm\": " << jsonString(c.allReduceAlgorithm)
    << ", \"reason\": " << jsonString(c.reason) << "}";
  return o.str();
}

}  // namespace

int runFsdp(const Args& a) {
  const Cluster cl = clusterOf(a);
  const ModelSpec m = modelOf(a);
  if (!a.has("--nodes")) throw UsageError("sharc-plan fsdp: give --nodes N");
  const int nodes = static_cast<int>(toInt("--nodes", a.get("--nodes"), 1));
  if (nodes > 65536) throw UsageError("--nodes: at most 65536");
  if (cl.memoryBytes <= 0)
    throw UsageError("sharc-plan fsdp: cluster '" + cl.name +
                     "' has no GPU memory size: give --gpu-memory GiB");
  const std::vector<FsdpCandidate> ranked = planFsdp(m, cl, nodes);
  const FsdpCandidate& best = ranked.front();
  if (a.has("--json")) {
    std::printf(
        "{\"model\": {\"name\": %s, \"parameters\": %s, \"layers\": %d, \"hidden\": %d, "
        "\"seq\": %d, \"micro_batch\": %d, \"vocab\": %d, \"param_bytes\": %s, "
        "\"tied_embeddings\": %s},\n \"cluster\": %s,\n \"nodes\": %d, \"world\": %d,\n"
        " \"recommended\": %s,\n \"candidates\": [",
        jsonString(m.name).c_str(), jsonNumber(m.parameters).c_str(), m.layers, m.hidden, m.seqLen,
        m.microBatch, m.vocab, jsonNumber(m.paramBytes).c_str(),
        m.tiedEmbeddings ? "true" : "false", clusterJson(cl).c_str(), nodes,
        nodes * cl.ranksPerNode, candidateJson(best).c_str());
    for (size_t i = 0; i < ranked.size(); ++i)
      std::printf("%s%s", i ? ",\n  " : "\n  ", candidateJson(ranked[i]).c_str());
    std::printf("\n]}\n");
    return 0;
  }
  if (best.fits)
    std::printf("recommended: %s (%s)\n", degrees(best).c_str(), best.reason.c_str());
  else
    std::printf("recommended: none fits; the least memory: %s (%s)\n", degrees(best).c_str(),
                best.reason.c_str());
  std::printf(
      "%s: %.2f B parameters, %d layers, hidden %d, seq %d, micro-batch %d, vocab %d, "
      "%g-byte params\n",
      m.name.c_str(), m.parameters / 1e9, m.layers, m.hidden, m.seqLen, m.microBatch, m.vocab,
      m.paramBytes);
  std::printf("on %d nodes = %d GPUs of %.1f GiB; %s\n  source: %s\n\n", nodes,
              nodes * cl.ranksPerNode, cl.memoryBytes / kGiB, clusterText(cl).c_str(),
              cl.source.c_str());
  std::printf("%5s %3s %5s | %7s %7s %7s %8s %7s %7s %4s | %9s %9s %9s %9s %9s | %9s\n", "shard",
              "tp", "repl", "params", "grads", "optim", "gathered", "activ", "total", "fits",
              "AG ms", "RS ms", "AR ms", "TP ms", "comm ms", "GB/node");
  for (const FsdpCandidate& c : ranked)
    std::printf(
        "%5d %3d %5d | %7.2f %7.2f %7.2f %8.2f %7.2f %7.2f %4s | %9.1f %9.1f %9.1f %9.1f %9.1f "
        "| %9.2f\n",
        c.hybridShardDegree, c.tensorParallelDegree, c.replicas, c.paramBytes / kGiB,
        c.gradBytes / kGiB, c.optimizerBytes / kGiB, c.gatheredLayerBytes / kGiB,
        c.activationBytes / kGiB, c.totalBytes / kGiB, c.fits ? "yes" : "no", c.allGatherUs / 1e3,
        c.reduceScatterUs / 1e3, c.allReduceUs / 1e3, c.tpUs / 1e3, c.commUs / 1e3,
        c.interNodeBytesPerNode / 1e9);
  std::printf(
      "\nmemory in GiB per GPU (mixed-precision Adam; activations with every block "
      "checkpointed); communication per step (one micro-batch, not overlapped);\n"
      "GB/node: bytes each node sends over the fabric per step. Algorithms of the "
      "recommendation: AllGather %s, ReduceScatter %s, AllReduce %s\n",
      best.allGatherAlgorithm.empty() ? "-" : best.allGatherAlgorithm.c_str(),
      best.reduceScatterAlgorithm.empty() ? "-" : best.reduceScatterAlgorithm.c_str(),
      best.allReduceAlgorithm.empty() ? "-" : best.allReduceAlgorithm.c_str());
  return 0;
}

int runBacktestCommand(const Args& a) {
  // The AllReduce points, then every published AllGather point (no ReduceScatter over EFA is
  // published).
  const std::vector<BacktestRow> rows = runBacktest();
  const std::vector<BacktestRow> allGather = modelRows(publishedAllGatherCurve());
  std::vector<std::string> bad = boundViolations(rows);
  for (const std::string& line : boundViolations(allGather)) bad.push_back("AllGather " + line);
  if (a.has("--json")) {
    std::fputs(backtestJson(rows, {}, allGather).c_str(), stdout);
    return bad.empty() ? 0 : 1;
  }
  std::vector<std::string> sources;  // printed once each, numbered
  std::printf("%-14s %-10s %5s %8s %10s %10s %7s %6s %10s %6s %-18s %s\n", "instance", "coll",
              "nodes", "size", "published", "predicted", "error", "bound", "ceiling", "eff", "nccl",
              "src");
  for (const auto* list : {&rows, &allGather})
    for (const BacktestRow& r : *list) {
      size_t k = 0;
      while (k < sources.size() && sources[k] != r.source) ++k;
      if (k == sources.size()) sources.push_back(r.source);
      std::printf("%-14s %-10s %5d %8s %10.1f %10.1f %+6.1f%% %5.0f%% %10.1f %6.3f %-18s [%zu]\n",
                  r.instance.c_str(), collectiveName(r.coll), r.nodes,
                  bytesText(static_cast<double>(r.bytes)).c_str(), r.publishedGBps, r.predictedGBps,
                  100 * r.error(), 100 * r.bound(), r.ceilingGBps, r.efficiency,
                  r.ncclAlgorithm.c_str(), k + 1);
    }
  std::printf(
      "\nbusbw in GB/s (nccl-tests); bounds: |error| <= 15%% at >= 128 MB, "
      "30%% below, never above the ceiling\n");
  for (size_t k = 0; k < sources.size(); ++k) std::printf("[%zu] %s\n", k + 1, sources[k].c_str());
  for (const std::string& line : bad) std::printf("OUT OF BOUNDS: %s\n", line.c_str());
  return bad.empty() ? 0 : 1;
}

}  // namespace sharc::plan::cli

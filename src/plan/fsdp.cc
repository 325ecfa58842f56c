// planFsdp (include/sharc/plan_fsdp.hpp): memory and communication of every valid
// (hybrid_shard_degree s, tensor_parallel_degree tp) on N nodes of L ranks, W = N * L.
//
// Mesh as sharc.torch builds it (plugin/torch/sharc/torch/mesh.py, parallelize.py):
// (replicate, shard, tp), tp innermost, so rank = r * s * tp + i * tp + j and
//   tp group         tp consecutive ranks, inside one node;
//   shard group      s ranks at stride tp: a block of s * tp consecutive ranks, one node if
//                    s * tp <= L, else s * tp / L whole nodes with L / tp of its ranks on each;
//   replicate group  W / (s * tp) ranks at stride s * tp: max(1, L / (s * tp)) per node.
// Every rank is in one group of each kind, and the groups of a kind run at the same time, so
// a group with g ranks on a node shares that node's NICs with L / g - 1 others: it gets
// fabricGBps * g / L (with tp = L, the L shard groups cross the node's NICs together).
//
// Memory per GPU (mixed-precision Adam, ZeRO: Rajbhandari et al., arXiv 1910.02054, sec. 3.1:
// 2 bytes of fp16 parameters + 2 of gradients + 12 of fp32 master copy, momentum and
// variance per parameter), all sharded over s * tp, here with paramBytes for the first two;
// plus the largest FSDP unit gathered (its parameters / tp), twice for the prefetch of the
// next; plus activations, assuming every block is checkpointed and attention is flash
// attention (no s^2 term), after Korthikanti et al., arXiv 2205.05198, sec. 4: each block's
// input kept (b * seq * h * paramBytes, replicated in the tp group: no sequence parallelism),
// the working set of one block recomputed, b * seq * h * (10 + 24 / tp) bytes at 2-byte
// activations (scaled by paramBytes / 2), and the fp32 logits b * seq * vocab * 4 / tp.
//
// Communication per step (one micro-batch; sums, no overlap with compute or each other):
// per FSDP unit (each block, and the root unit of the embeddings), AllGather of its
// parameters / tp in forward and again in backward (resharded after forward), ReduceScatter
// of its gradients / tp over the shard group, AllReduce of the shard (/ (tp * s)) over the
// replicate group; per block 4 AllReduces of b * seq * h * paramBytes in the tp group
// (Megatron: 2 forward, 2 backward; the recompute's 2 are not counted). Each call is the
// tuner's plan on the group's own node map.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <tuple>

#include "cluster_model.hpp"
#include "sharc/error.hpp"
#include "sharc/plan_fsdp.hpp"

namespace sharc::plan {
namespace {

constexpr double kOptimizerBytesPerParameter = 12;  // fp32 master, momentum, variance
constexpr int kTpAllReducesPerBlock = 4;
// What a training process can use of a GPU's memory: the rest goes to the CUDA context, the
// caching allocator's fragmentation and communication buffers.
constexpr double kUsableMemory = 0.9;

struct Group {
  int nodes = 1, perNode = 1;
  int size() const { return nodes * perNode; }
};

// Predictions repeat across candidates (the same group shape and bytes): computed once.
class Predictor {
 public:
  Predictor(const Cluster& c) : c_(c) {}
  const Prediction& operator()(const Group& g, Collective coll, double bytes) {
    const auto b = static_cast<size_t>(std::llround(bytes));
    const auto key = std::make_tuple(g.nodes, g.perNode, static_cast<int>(coll), b);
    auto it = cache_.find(key);
    if (it == cache_.end())
      it = cache_
               .emplace(key,
                        predictGroup(c_, g.nodes, g.perNode, c_.ranksPerNode / g.perNode, coll, b))
               .first;
    return it->second;
  }

 private:
  const Cluster& c_;
  std::map<std::tuple<int, int, int, size_t>, Prediction> cache_;
};

std::vector<int> divisors(int x) {
  std::vector<int> d;
  for (int i = 1; i <= x; ++i)
    if (x % i == 0) d.push_back(i);
  return d;
}

void check(bool ok, const std::string& what) {
  if (!ok) throw Error(Result::InvalidArgument, "plan fsdp: " + what);
}

// The algorithm a prediction names (the one name table, core/algorithm.hpp).
algo::Algorithm algorithmOf(const Prediction& p) {
  const auto a = algo::parseAlgorithm(p.algorithm);
  check(a.has_value(), "no algorithm named '" + p.algorithm + "'");
  return *a;
}

std::string gib(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f GiB", bytes / (1u << 30));
  return b;
}

std::string ms(double us) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f ms", us / 1e3);
  return b;
}

std::string degrees(const FsdpCandidate& c) {
  return "hybrid_shard_degree=" + std::to_string(c.hybridShardDegree) +
         " tensor_parallel_degree=" + std::to_string(c.tensorParallelDegree);
}

// Why `best` wins over `next` (both fit): the communication term that differs most.
std::string whyFaster(const FsdpCandidate& best, const FsdpCandidate& next) {
  const double dShard =
      (next.allGatherUs + next.reduceScatterUs) - (best.allGatherUs + best.reduceScatterUs);
  const double dRep = next.allReduceUs - best.allReduceUs;
  const double dTp = next.tpUs - best.tpUs;
  const double most = std::max({dShard, dRep, dTp});
  if (most == dShard) return "its shard-group AllGather/ReduceScatter take " + ms(dShard) + " more";
  if (most == dRep) return "its replicate AllReduce takes " + ms(dRep) + " more";
  return "its tensor-parallel AllReduces take " + ms(dTp) + " more";
}

std::string reason(const std::vector<FsdpCandidate>& ranked, double gpuMemory) {
  const FsdpCandidate& best = ranked[0];
  const double memory = kUsableMemory * gpuMemory;
  if (!best.fits)
    return "nothing fits in the " + gib(memory) + " usable per GPU (90% of " + gib(gpuMemory) +
           "); this needs the least, " + gib(best.totalBytes) + ": add nodes or use larger GPUs";
  const size_t fitting = static_cast<size_t>(
      std::count_if(ranked.begin(), ranked.end(), [](const auto& c) { return c.fits; }));
  std::string r = "fits: " + gib(best.totalBytes) + " of the " + gib(memory) +
                  " usable per GPU; least communication of the " + std::to_string(fitting) +
                  " that fit, " + ms(best.commUs) + " per step";
  if (fitting < 2) {
    r = "the only candidate that fits: " + gib(best.totalBytes) + " of the " + gib(memory) +
        " usable per GPU; " + ms(best.commUs) + " of communication per step";
    if (ranked.size() > 1)
      r += "; next, " + degrees(ranked[1]) + ", needs " + gib(ranked[1].totalBytes);
    return r;
  }
  const FsdpCandidate& next = ranked[1];
  const double extra = best.commUs > 0 ? 100.0 * (next.commUs / best.commUs - 1) : 0;
  char pct[32];
  std::snprintf(pct, sizeof pct, " (+%.0f%%)", extra);
  return r + "; runner-up " + degrees(next) + " takes " + ms(next.commUs) + pct + ": " +
         whyFaster(best, next);
}

}  // namespace

std::vector<FsdpCandidate> planFsdp(const ModelSpec& m, const Cluster& cl, int nodes) {
  check(m.parameters > 0 && m.layers >= 1 && m.hidden >= 1 && m.seqLen >= 1 && m.microBatch >= 1 &&
            m.vocab >= 0 && m.paramBytes > 0,
        "model '" + m.name +
            "' needs parameters and param bytes > 0, layers, hidden, seq and batch >= 1, "
            "vocab >= 0 (0: no embedding unit)");
  check(m.rootParameters() < m.parameters,
        "model '" + m.name + "': its embeddings (vocab * hidden" +
            (m.tiedEmbeddings ? "" : " * 2, input and output untied") +
            ") are not smaller than its parameters" +
            (m.tiedEmbeddings ? "" : " (tied embeddings? set tiedEmbeddings)"));
  check(nodes >= 1, "nodes must be at least 1, got " + std::to_string(nodes));
  check(cl.ranksPerNode >= 1 && cl.localGBps > 0 && (nodes == 1 || cl.fabricGBps > 0),
        "cluster '" + cl.name + "' needs ranks per node >= 1 and local (and fabric) GB/s > 0");
  const int L = cl.ranksPerNode, W = nodes * L;
  const double pb = m.paramBytes;
  const double act = static_cast<double>(m.microBatch) * m.seqLen * m.hidden;  // elements
  // The FSDP units: `layers` blocks and the root unit, in parameters.
  const struct Unit {
    double params;
    int count;
  } units[] = {{m.blockParameters(), m.layers}, {m.rootParameters(), 1}};
  const double largestUnit = std::max(units[0].params, units[1].params);
  Predictor predict(cl);

  std::vector<FsdpCandidate> out;
  for (int tp : divisors(L)) {
    for (int s : divisors(W / tp)) {
      const int block = s * tp;
      if (L % block != 0 && block % L != 0) continue;  // mesh.py _valid_shard_degrees
      FsdpCandidate c;
      c.hybridShardDegree = s;
      c.tensorParallelDegree = tp;
      c.replicas = W / block;
      const double shard = static_cast<double>(block);
      c.paramBytes = m.parameters * pb / shard;
      c.gradBytes = m.parameters * pb / shard;
      c.optimizerBytes = m.parameters * kOptimizerBytesPerParameter / shard;
      c.gatheredLayerBytes = s > 1 ? 2 * largestUnit * pb / tp : 0;
      c.activationBytes = m.layers * act * pb + act * (10 + 24.0 / tp) * pb / 2 +
                          static_cast<double>(m.microBatch) * m.seqLen * m.vocab * 4 / tp;
      c.totalBytes =
          c.paramBytes + c.gradBytes + c.optimizerBytes + c.gatheredLayerBytes + c.activationBytes;
      c.fits = c.totalBytes <= kUsableMemory * cl.memoryBytes;

      const Group shardG = block <= L ? Group{1, s} : Group{block / L, L / tp};
      const int repPerNode = block >= L ? 1 : L / block;
      const Group repG{c.replicas / repPerNode, repPerNode};
      const Group tpG{1, tp};
      // Groups of a kind on one node: they share its NICs (see above).
      const double shardSharing = static_cast<double>(L) / shardG.perNode;
      const double repSharing = static_cast<double>(L) / repG.perNode;
      for (const Unit& u : units) {
        if (u.params <= 0) continue;                 // no embedding unit (vocab 0)
        const double gathered = u.params * pb / tp;  // AllGather output, ReduceScatter input
        if (shardG.size() > 1) {
          const Prediction& ag = predict(shardG, Collective::AllGather, gathered);
          const Prediction& rs = predict(shardG, Collective::ReduceScatter, gathered);
          c.allGatherUs += 2 * u.count * ag.predictedUs;
          c.reduceScatterUs += u.count * rs.predictedUs;
          c.interNodeBytesPerNode +=
              shardSharing * u.count *
              (2 * interNodeBytesPerNode(algorithmOf(ag), Collective::AllGather, gathered,
                                         shardG.nodes, shardG.perNode) +
               interNodeBytesPerNode(algorithmOf(rs), Collective::ReduceScatter, gathered,
                                     shardG.nodes, shardG.perNode));
          if (u.params == largestUnit) {
            c.allGatherAlgorithm = ag.algorithm;
            c.reduceScatterAlgorithm = rs.algorithm;
          }
        }
        if (repG.size() > 1) {
          const double piece = gathered / s;
          const Prediction& ar = predict(repG, Collective::AllReduce, piece);
          c.allReduceUs += u.count * ar.predictedUs;
          c.interNodeBytesPerNode += repSharing * u.count *
                                     interNodeBytesPerNode(algorithmOf(ar), Collective::AllReduce,
                                                           piece, repG.nodes, repG.perNode);
          if (u.params == largestUnit) c.allReduceAlgorithm = ar.algorithm;
        }
      }
      if (tp > 1)
        c.tpUs = kTpAllReducesPerBlock * m.layers *
                 predict(tpG, Collective::AllReduce, act * pb).predictedUs;
      c.commUs = c.allGatherUs + c.reduceScatterUs + c.allReduceUs + c.tpUs;
      out.push_back(c);
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const FsdpCandidate& a, const FsdpCandidate& b) {
    if (a.fits != b.fits) return a.fits;
    if (a.fits && a.commUs != b.commUs) return a.commUs < b.commUs;
    if (a.totalBytes != b.totalBytes) return a.totalBytes < b.totalBytes;
    return a.commUs < b.commUs;
  });
  if (!out.empty()) out[0].reason = reason(out, cl.memoryBytes);
  return out;
}

}  // namespace sharc::plan

// sharc's planner for FSDP (hybrid sharding) with tensor parallelism: which
// (hybrid_shard_degree, tensor_parallel_degree) to train a model with on a cluster, from the
// memory each choice needs per GPU and the communication it costs per step on the tuner's
// cost model (include/sharc/plan.hpp). `sharc-plan fsdp` prints it;
// `sharc.torch.parallelize(..., hybrid_shard_degree="auto")` asks it.
#pragma once

#include <string>
#include <vector>

#include "sharc/plan.hpp"

namespace sharc::plan {

/// A transformer as the planner sees it: `layers` equal blocks (the FSDP units) plus one root
/// unit holding the embeddings (and the output head unless tied).
struct ModelSpec {
  std::string name;
  double parameters = 0;        ///< all parameters
  int layers = 1;               ///< transformer blocks
  int hidden = 1;               ///< model (embedding) width
  int seqLen = 1;               ///< tokens per sequence
  int microBatch = 1;           ///< sequences per GPU per step
  int vocab = 1;                ///< vocabulary size (0: no embedding unit)
  double paramBytes = 2;        ///< bytes of the compute/communication dtype (2: bf16/fp16)
  bool tiedEmbeddings = false;  ///< the output head shares the input embedding's weights

  /// Parameters of the root unit: vocab * hidden, twice unless tied.
  double rootParameters() const;
  /// Parameters of one block: (parameters - rootParameters()) / layers.
  double blockParameters() const;
};

/// The presets: "llama2-7b", "llama2-13b", "llama2-70b", "gpt-175b".
std::vector<std::string> builtinModelNames();
/// The preset `name`; throws sharc::Error(InvalidArgument) listing the valid names.
ModelSpec builtinModel(const std::string& name);

/// One (hybrid_shard_degree, tensor_parallel_degree) choice on a cluster. Bytes are per GPU,
/// times per training step (one micro-batch, no overlap of communication with compute).
struct FsdpCandidate {
  int hybridShardDegree = 1;      ///< s: ranks a parameter is sharded over
  int tensorParallelDegree = 1;   ///< tp: ranks a layer is split over (inside a node)
  int replicas = 1;               ///< world / (s * tp)
  double paramBytes = 0;          ///< parameters: P * paramBytes / (s * tp)
  double gradBytes = 0;           ///< gradients, same dtype and sharding
  double optimizerBytes = 0;      ///< Adam, mixed precision: 12 bytes per parameter / (s * tp)
  double gatheredLayerBytes = 0;  ///< the largest unit gathered, twice (prefetch); 0 if s = 1
  double activationBytes = 0;     ///< see fsdp.cc: checkpointed blocks, flash attention
  double totalBytes = 0;
  /// totalBytes <= 90% of the cluster's memoryBytes (the rest: CUDA context, allocator
  /// fragmentation, communication buffers)
  bool fits = false;
  double allGatherUs = 0;      ///< forward + backward AllGather of every unit (shard group)
  double reduceScatterUs = 0;  ///< ReduceScatter of every unit's gradients (shard group)
  double allReduceUs = 0;      ///< AllReduce of the shards over the replicate group
  double tpUs = 0;             ///< 4 AllReduces of the activations per block (tp group)
  double commUs = 0;           ///< the sum of the four
  /// Bytes each node sends over the fabric per step, from the chosen algorithms' patterns.
  double interNodeBytesPerNode = 0;
  /// The algorithms the tuner chose for the shard-group AllGather and ReduceScatter and the
  /// replicate AllReduce of the largest unit ("" where the group has one rank).
  std::string allGatherAlgorithm, reduceScatterAlgorithm, allReduceAlgorithm;
  std::string reason;  ///< why it wins (filled for the first of planFsdp's list)
};

/// Every valid (s, tp) for `model` on `nodes` nodes of `cluster`, ranked best first: fitting
/// candidates by communication time, then the rest by memory. [0] is the recommendation.
/// Valid as sharc.torch builds its mesh (replicate, shard, tp), tp innermost: tp divides the
/// ranks per node L; s divides world / tp and s * tp divides L or is a multiple of it.
/// Throws sharc::Error(InvalidArgument) for a model or cluster it cannot plan.
std::vector<FsdpCandidate> planFsdp(const ModelSpec& model, const Cluster& cluster, int nodes);

/// The running process's cost-model parameters (defaults overlaid with SHARC_TUNER_FILE) as
/// a Cluster of `ranksPerNode` ranks with `memoryBytes` each.
Cluster thisHostCluster(int ranksPerNode, double memoryBytes);

/// A cluster file: `key = value` lines ('#' comments) of Cluster's fields (every key of
/// clusterFileFields) and/or the keys of a sharc-perf --calibrate file (local.alpha_us,
/// fabric.gbps, ...). Fields not set keep the tuner's defaults (8 ranks per node, memory 0,
/// a CPU transport). Throws sharc::Error(InvalidArgument) naming the file, the line, the key
/// and what was expected.
Cluster loadClusterFile(const std::string& path);
/// The keys loadClusterFile accepts.
std::vector<std::string> clusterFileKeys();

/// One key of a cluster file with its value as the file writes it.
struct ClusterField {
  std::string key;    ///< "fabric_gbps", "memory_gib", ...
  std::string value;  ///< "400", "0.892", "1" (flags are 0 or 1), or text
  bool text = false;  ///< name and source: text, not a number
};
/// Every field of `c` as a cluster file's keys, in the file's order. The values read back
/// to the same doubles, so a file of them (clusterFileText) predicts what `c` does.
std::vector<ClusterField> clusterFileFields(const Cluster& c);
/// `c` as a cluster file that loadClusterFile reads back to the same cluster
/// (`sharc-plan cluster` prints it).
std::string clusterFileText(const Cluster& c);

}  // namespace sharc::plan

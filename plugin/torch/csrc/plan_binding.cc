// sharc._C._plan_fsdp: the planner (include/sharc/plan_fsdp.hpp) for sharc.torch's
// hybrid_shard_degree="auto" and sharc.torch.plan_fsdp.
#include "plan_binding.hpp"

#include <torch/csrc/utils/pybind.h>

#include <string>

#include "sharc/error.hpp"
#include "sharc/plan_fsdp.hpp"

namespace sharc::torch_backend {
namespace {

// Every ranked candidate as a dict (sizes in bytes, times in microseconds).
py::list planFsdp(const std::string& name, double parameters, int layers, int hidden, int seqLen,
                  int microBatch, int vocab, double paramBytes, bool tied, int nodes,
                  int ranksPerNode, double memoryBytes) {
  plan::ModelSpec spec;
  spec.name = name;
  spec.parameters = parameters;
  spec.layers = layers;
  spec.hidden = hidden;
  spec.seqLen = seqLen;
  spec.microBatch = microBatch;
  spec.vocab = vocab;
  spec.paramBytes = paramBytes;
  spec.tiedEmbeddings = tied;
  std::vector<plan::FsdpCandidate> ranked;
  {
    py::gil_scoped_release release;
    ranked = plan::planFsdp(spec, plan::thisHostCluster(ranksPerNode, memoryBytes), nodes);
  }
  py::list out;
  for (const plan::FsdpCandidate& c : ranked) {
    py::dict d;
    d["hybrid_shard_degree"] = c.hybridShardDegree;
    d["tensor_parallel_degree"] = c.tensorParallelDegree;
    d["replicas"] = c.replicas;
    d["fits"] = c.fits;
    d["memory_bytes"] = c.totalBytes;
    d["param_bytes"] = c.paramBytes;
    d["grad_bytes"] = c.gradBytes;
    d["optimizer_bytes"] = c.optimizerBytes;
    d["gathered_layer_bytes"] = c.gatheredLayerBytes;
    d["activation_bytes"] = c.activationBytes;
    d["comm_us"] = c.commUs;
    d["all_gather_us"] = c.allGatherUs;
    d["reduce_scatter_us"] = c.reduceScatterUs;
    d["all_reduce_us"] = c.allReduceUs;
    d["tp_us"] = c.tpUs;
    d["inter_node_bytes_per_node"] = c.interNodeBytesPerNode;
    d["reason"] = c.reason;
    out.append(std::move(d));
  }
  return out;
}

}  // namespace

void registerPlan(py::module_& m) {
  m.def(
      "_plan_fsdp",
      [](const std::string& name, double parameters, int layers, int hidden, int seqLen,
         int microBatch, int vocab, double paramBytes, bool tied, int nodes, int ranksPerNode,
         double memoryBytes) {
        try {
          return planFsdp(name, parameters, layers, hidden, seqLen, microBatch, vocab, paramBytes,
                          tied, nodes, ranksPerNode, memoryBytes);
        } catch (const sharc::Error& e) {
          throw py::value_error(e.what());
        }
      },
      py::arg("name"), py::arg("parameters"), py::arg("layers"), py::arg("hidden"),
      py::arg("seq_len"), py::arg("micro_batch"), py::arg("vocab"), py::arg("param_bytes"),
      py::arg("tied_embeddings"), py::arg("nodes"), py::arg("ranks_per_node"),
      py::arg("memory_bytes"),
      "Every valid (hybrid_shard_degree, tensor_parallel_degree) for the model on this host's "
      "links (the tuner's parameters), ranked best first, as dicts.");
}

}  // namespace sharc::torch_backend

// The model presets of sharc-plan fsdp (include/sharc/plan_fsdp.hpp), from their published
// sizes.
#include <string>
#include <vector>

#include "sharc/error.hpp"
#include "sharc/plan_fsdp.hpp"

namespace sharc::plan {
namespace {

// Llama 2 (Touvron et al., "Llama 2: Open Foundation and Fine-Tuned Chat Models",
// arXiv 2307.09288, Table 1: 4k context; the exact parameter counts, layers, widths and the
// 32,000-token vocabulary from the released checkpoints' config.json, meta-llama/Llama-2-*-hf;
// untied input and output embeddings). GPT-3 175B (Brown et al., "Language Models are
// Few-Shot Learners", arXiv 2005.14165, Table 2.1: 96 layers, d_model 12,288, context 2,048;
// the GPT-2 BPE vocabulary of 50,257 tokens; tied embeddings).
std::vector<ModelSpec> presets() {
  std::vector<ModelSpec> m(4);
  m[0] = {"llama2-7b", 6738415616.0, 32, 4096, 4096, 1, 32000, 2, false};
  m[1] = {"llama2-13b", 13015864320.0, 40, 5120, 4096, 1, 32000, 2, false};
  m[2] = {"llama2-70b", 68976648192.0, 80, 8192, 4096, 1, 32000, 2, false};
  m[3] = {"gpt-175b", 175e9, 96, 12288, 2048, 1, 50257, 2, true};
  return m;
}

}  // namespace

double ModelSpec::rootParameters() const {
  return static_cast<double>(vocab) * hidden * (tiedEmbeddings ? 1 : 2);
}

double ModelSpec::blockParameters() const {
  return (parameters - rootParameters()) / (layers > 0 ? layers : 1);
}

std::vector<std::string> builtinModelNames() {
  std::vector<std::string> names;
  for (const ModelSpec& m : presets()) names.push_back(m.name);
  return names;
}

ModelSpec builtinModel(const std::string& name) {
  std::string valid;
  for (const ModelSpec& m : presets()) {
    if (m.name == name) return m;
    valid += (valid.empty() ? "" : ", ") + m.name;
  }
  throw Error(Result::InvalidArgument,
              "plan: unknown model '" + name + "' (valid presets: " + valid + ")");
}

}  // namespace sharc::plan

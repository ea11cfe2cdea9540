// InferenceCheckpoint (inference_checkpoint.h): a checkpoint's recorded model and its weights, for inference.
#include "meshtrain/ckpt/inference_checkpoint.h"

#include <torch/autograd.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "meshtrain/ckpt/adapter_checkpoint.h"
#include "meshtrain/ckpt/checkpoint_dir.h"
#include "meshtrain/ckpt/lora_export.h"
#include "meshtrain/ckpt/model_path.h"
#include "meshtrain/ckpt/recorded_config.h"
#include "meshtrain/core/error.h"

namespace fs = std::filesystem;

namespace meshtrain::ckpt {

InferenceCheckpoint open_for_inference(const std::string& path, const std::vector<std::string>& overrides) {
  InferenceCheckpoint ck;
  const ModelPath located = locate_model(path, "");
  if (located.hugging_face) {
    ck.hf = std::make_shared<const HfModelDir>(located.dir);
    ck.dir = located.dir;
    // The model config.json describes, every other key meshtrain's default: what `meshtrain import` records.
    // Sequences as long as a fine-tuning run's (kHfSequenceTokens), not the model's whole context (131,072
    // positions for Llama 3.1): `meshtrain eval` of the base then reads the windows a fine-tune's recorded
    // config reads, and a small --data still holds a batch of them.
    Config described;
    described.model = ck.hf->model();
    described.data.seq_len = std::min<int64_t>(described.model.max_seq_len, kHfSequenceTokens);
    ck.config = parse_config(to_json(described), ck.hf->config_file(), /*json=*/true, overrides);
    return ck;
  }
  ck.dir = resolve_checkpoint_dir(located.dir);
  ck.meta = read_meta(ck.dir);
  ck.config = recorded_config(ck.dir, ck.meta, overrides);
  return ck;
}

void load_model_weights(const InferenceCheckpoint& ck, std::vector<ShardedTensor>& wanted) {
  if (ck.hf) return ck.hf->load(wanted);
  load_with_base(ck.dir, wanted);  // an adapters-only LoRA checkpoint: its base from the recorded path
}

std::map<std::string, at::Tensor> load_model_tensors(const InferenceCheckpoint& ck, const std::string& base) {
  if (ck.hf) return ck.hf->read_model();
  return load_full_with_base(ck.dir, "model.", base, "--base DIR");
}

namespace {

// The same model built without adapters (model.lora_rank 0), each adapted weight W + alpha / r · B A
// (merge_lora): one matmul per projection where the adapted one runs three, and the numbers export_hf writes.
model::Transformer merged_lora_model(const ModelConfig& cfg, model::TransformerImpl& adapted) {
  std::map<std::string, at::Tensor> params;
  for (auto& item : adapted.named_parameters()) params[item.key()] = item.value().detach();
  params = merge_lora(cfg, std::move(params));
  ModelConfig plain = cfg;
  plain.lora_rank = 0;
  model::Transformer net(plain);
  torch::NoGradGuard no_grad;
  for (auto& item : net->named_parameters()) {
    const auto it = params.find(item.key());
    MT_CHECK(it != params.end(), "merged_lora_model: no merged tensor for '", item.key(), "'");
    item.value().copy_(it->second);
  }
  return net;
}

}  // namespace

model::Transformer load_model(const InferenceCheckpoint& ck) {
  model::Transformer net(ck.config.model);
  // Each parameter whole, in place: the checkpoint's blocks of any layout are read into it.
  std::vector<ShardedTensor> wanted;
  for (auto& item : net->named_parameters())
    wanted.push_back({"model." + item.key(), item.value().sizes().vec(),
                      std::vector<int64_t>(static_cast<size_t>(item.value().dim()), 0), item.value(), true});
  load_model_weights(ck, wanted);
  if (ck.config.model.lora_rank > 0) net = merged_lora_model(ck.config.model, *net);
  net->eval();
  return net;
}

std::vector<std::string> tokenizer_dirs(const InferenceCheckpoint& ck, const std::string& given) {
  // A run started from a Hub id recorded the id: its snapshot holds the files.
  return {model_files_dir(given), ck.dir, fs::path(ck.dir).parent_path().string(),
          ck.meta.state.value("imported_from", std::string()), model_files_dir(ck.config.checkpoint.init_from)};
}

}  // namespace meshtrain::ckpt

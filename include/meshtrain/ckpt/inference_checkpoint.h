// A checkpoint opened for inference — `meshtrain generate`, `eval`, `serve` and `export` read a checkpoint the
// same way: the step directory a path or its `latest` names, its meta.json, the config it recorded (both places
// it has lived: recorded_config.h), then the model's weights only (never the optimizer state), an
// adapters-only LoRA checkpoint's frozen base from the path it recorded (adapter_checkpoint.h).
// A Hugging Face model directory, or an `org/name` the Hub cache holds (model_path.h), opens the same way: its
// config.json is the recorded config, its safetensors the weights (hf_model_dir.h), nothing converted on disk.
//
//   const auto ck = ckpt::open_for_inference(path);      // errors in meta.json or its config: before any read
//   model::Transformer net = ckpt::load_model(ck);       // the whole model in this process, on the CPU
//
// Why in ckpt: it needs the model room (to build the Transformer) and the checkpoint reader, nothing of
// parallel or train, and ckpt may use model (docs/architecture.md); export lives in ckpt, so only here can all
// three readers share it. A sharded reader (eval under FSDP or TP) builds and parallelizes its model itself
// and hands its blocks to load_model_weights.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "meshtrain/ckpt/checkpoint_meta.h"
#include "meshtrain/ckpt/hf_model_dir.h"
#include "meshtrain/core/config.h"
#include "meshtrain/core/sharded_tensor.h"
#include "meshtrain/model/transformer.h"

namespace meshtrain::ckpt {

// A Hugging Face directory has no training config: its data.seq_len is the model's positions up to this (what
// configs/recipes/chat-lora.yaml fine-tunes at), so `meshtrain eval` of a base reads a fine-tune's windows.
inline constexpr int64_t kHfSequenceTokens = 2048;

struct InferenceCheckpoint {
  std::string dir;      // the step directory (resolve_checkpoint_dir), or the Hugging Face directory
  CheckpointMeta meta;  // its meta.json (a Hugging Face directory's: step 0, no tensors)
  Config config;        // what it recorded (config.json's model), the caller's overrides applied; not resolved
  std::shared_ptr<const HfModelDir> hf;  // set for a Hugging Face directory: the weights are read from it
};

// `path`: a step directory, a directory holding `latest`, a Hugging Face model directory or an `org/name` in
// the Hub cache (model_path.h). `overrides` ("section.key=value") go on top of the recorded config. UserError
// naming meta.json (or config.json) for a damaged file or no recorded config, or the path for none of these.
InferenceCheckpoint open_for_inference(const std::string& path, const std::vector<std::string>& overrides = {});

// Fills `wanted` ("model."-prefixed blocks of any layout) from the checkpoint, and from the recorded base for
// what an adapters-only LoRA checkpoint does not hold (or from the Hugging Face directory's safetensors).
// UserError naming a tensor meta.json (or the directory) lacks.
void load_model_weights(const InferenceCheckpoint& ck, std::vector<ShardedTensor>& wanted);

// Every model tensor whole ("model."-prefixed, CPU, the saved dtype): the checkpoint's, an adapters-only one's
// base from `base` (`--base DIR`) or the path it recorded, or the Hugging Face directory's. What export reads.
std::map<std::string, at::Tensor> load_model_tensors(const InferenceCheckpoint& ck, const std::string& base);

// The whole model built from the recorded config on the CPU, its weights loaded, in eval mode. A LoRA
// checkpoint's adapters come folded into their weights (ckpt/lora_export.h merge_lora): the model returned has
// no adapters, so inference pays one matmul per projection.
model::Transformer load_model(const InferenceCheckpoint& ck);

// Where the model's tokenizer files may be, in the order to look: `given` (the path the user named), the step
// directory (or the Hugging Face directory itself), the run directory above it, the Hugging Face directory it
// was imported from and the checkpoint its run started from (`meshtrain import` copies the tokenizer files
// beside the checkpoint it writes); a Hub id among them stands for its snapshot in the cache.
std::vector<std::string> tokenizer_dirs(const InferenceCheckpoint& ck, const std::string& given);

}  // namespace meshtrain::ckpt

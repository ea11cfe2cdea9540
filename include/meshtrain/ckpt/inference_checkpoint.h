// A checkpoint opened for inference — `meshtrain generate`, `eval` and `export` read a checkpoint the same
// way: the step directory a path or its `latest` names, its meta.json, the config it recorded (both places
// it has lived: recorded_config.h), then the model's weights only (never the optimizer state), an
// adapters-only LoRA checkpoint's frozen base from the path it recorded (adapter_checkpoint.h).
//
//   const auto ck = ckpt::open_for_inference(path);      // errors in meta.json or its config: before any read
//   model::Transformer net = ckpt::load_model(ck);       // the whole model in this process, on the CPU
//
// Why in ckpt: it needs the model room (to build the Transformer) and the checkpoint reader, nothing of
// parallel or train, and ckpt may use model (docs/architecture.md); export lives in ckpt, so only here can all
// three readers share it. A sharded reader (eval under FSDP or TP) builds and parallelizes its model itself
// and hands its blocks to load_model_weights.
#pragma once

#include <string>
#include <vector>

#include "meshtrain/ckpt/checkpoint_meta.h"
#include "meshtrain/core/config.h"
#include "meshtrain/core/sharded_tensor.h"
#include "meshtrain/model/transformer.h"

namespace meshtrain::ckpt {

struct InferenceCheckpoint {
  std::string dir;      // the step directory (resolve_checkpoint_dir)
  CheckpointMeta meta;  // its meta.json
  Config config;        // what it recorded, the caller's overrides applied; not resolved
};

// `path`: a step directory or a directory holding `latest`. `overrides` ("section.key=value") go on top of
// the recorded config. UserError naming meta.json for a damaged file or no recorded config.
InferenceCheckpoint open_for_inference(const std::string& path, const std::vector<std::string>& overrides = {});

// Fills `wanted` ("model."-prefixed blocks of any layout) from the checkpoint, and from the recorded base for
// what an adapters-only LoRA checkpoint does not hold. UserError naming a tensor meta.json lacks.
void load_model_weights(const InferenceCheckpoint& ck, std::vector<ShardedTensor>& wanted);

// The whole model built from the recorded config on the CPU, its weights loaded, in eval mode. A LoRA
// checkpoint's adapters come folded into their weights (ckpt/lora_export.h merge_lora): the model returned has
// no adapters, so inference pays one matmul per projection.
model::Transformer load_model(const InferenceCheckpoint& ck);

// Where the model's tokenizer files may be, in the order to look: `given` (the path the user named), the step
// directory, the run directory above it, the Hugging Face directory it was imported from and the checkpoint
// its run started from (`meshtrain import` copies the tokenizer files beside the checkpoint it writes).
std::vector<std::string> tokenizer_dirs(const InferenceCheckpoint& ck, const std::string& given);

}  // namespace meshtrain::ckpt

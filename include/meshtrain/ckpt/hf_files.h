// `meshtrain export CKPT --format hf OUT/` and `meshtrain import HF_DIR OUT_CKPT`: Hugging Face model
// directories (config.json + model.safetensors, or model-0000K-of-0000N.safetensors + 
// model.safetensors.index.json above a size) ↔ meshtrain checkpoints. Names and layouts: hf_convert.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meshtrain/core/config_enums.h"

namespace meshtrain::ckpt {

struct ExportOptions {
  std::string dtype = "keep";                  // keep | fp32 | bf16 | fp16
  uint64_t max_shard_bytes = 5'000'000'000ull;  // above this, several files and an index (HF's default 5 GB)
  std::string base;  // an adapters-only LoRA checkpoint's base (ckpt/adapter_checkpoint.h); "" = the recorded one
};

struct ExportResult {
  int files = 0;
  uint64_t bytes = 0;
  int64_t tensors = 0;
  std::vector<std::string> tokenizer_files;  // copied into the export (tokenizer.json, …); none where none was found
};

// Reads only the model tensors ("model.*") of the checkpoint, whatever layout saved them (and, for an
// adapters-only LoRA checkpoint, its base's). The tokenizer files (tokenizer.json, tokenizer_config.json with the
// chat template, special_tokens_map.json, generation_config.json, chat_template.jinja) are copied from the first
// of the model's tokenizer directories that has a tokenizer.json (inference_checkpoint.h tokenizer_dirs: --base,
// the step directory, the run directory, the imported-from directory, checkpoint.init_from).
ExportResult export_hf(const std::string& checkpoint, const std::string& out_dir, const ExportOptions& opts);

struct ImportResult {
  std::string checkpoint;  // the step directory written
  std::string config_yaml;
  Family family = Family::gpt2;
  int64_t tensors = 0;
  std::vector<std::string> tokenizer_files;  // copied beside the checkpoint (tokenizer.json, …)
};

// Writes <out>/step_00000000 (model weights as fp32 "model.*" tensors, the config in meta.json), <out>/latest
// and <out>/config.yaml: the model section from config.json (dropout and bos/eos ids included) and
// checkpoint.init_from = <out>, every other key a commented template (no resolved world size or run paths).
// The tokenizer files the directory has (tokenizer.json, tokenizer_config.json, generation_config.json, …)
// are copied into <out>, where `meshtrain generate` and fine-tuning runs started from it find them.
// `hf_dir` may be an org/name the Hub cache holds (hf_hub_cache.h).
ImportResult import_hf(const std::string& hf_dir, const std::string& out_dir);

// Copies the tokenizer files `from` has (tokenizer.json, tokenizer_config.json, special_tokens_map.json,
// generation_config.json, chat_template.jinja) into `to`, each through a temporary name (never half a file);
// returns the names copied.
std::vector<std::string> copy_tokenizer_files(const std::string& from, const std::string& to);

}  // namespace meshtrain::ckpt

// `meshtrain export CKPT --gguf OUT.gguf --type T` and `meshtrain import FILE.gguf OUT_DIR`: meshtrain
// checkpoints ↔ llama.cpp's GGUF files (what Ollama and LM Studio keep on disk). The pieces: the container
// (gguf/gguf_file.h), the block formats (gguf/ggml_types.h), the Llama layout and q/k permutation
// (gguf/gguf_llama.h), the tokenizer metadata (gguf/gguf_tokenizer.h), which type each tensor gets
// (gguf/gguf_export_type.h). Llama only (llama.cpp's "llama" architecture).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "meshtrain/ckpt/hf_files.h"

namespace meshtrain::ckpt {

struct GgufExportOptions {
  std::string type = "f16";  // f32 | f16 | bf16 | q8_0 | q4_0 | q4_k_m
  std::string base;          // an adapters-only LoRA checkpoint's base; "" = the recorded one
  std::string tokenizer;     // a tokenizer.json or its directory; "" = the first found beside the checkpoint
};

struct GgufExportResult {
  int64_t tensors = 0;
  uint64_t bytes = 0;                  // the file's size
  std::map<std::string, int> types;    // ggml type name → tensors written in it
  std::string tokenizer;               // the tokenizer.json carried into the file
};

// A Llama checkpoint (any layout; LoRA adapters merged) as one GGUF file llama.cpp loads: the llama.* and
// general.* keys, the tokenizer.* keys and chat template, the tensors in llama.cpp's names and layouts. Written
// through out_path + ".tmp" and a rename. UserError for a GPT-2 checkpoint, an unknown --type or no tokenizer.
GgufExportResult export_gguf(const std::string& checkpoint, const std::string& out_path, const GgufExportOptions& opts);

// A llama-architecture GGUF file of any tensor type meshtrain reads (gguf/ggml_types.h), dequantized into an
// fp32 checkpoint and config.yaml under out_dir (imported_checkpoint.h), its tokenizer and chat template
// written beside it as tokenizer.json, tokenizer_config.json and generation_config.json (where `generate`
// finds them). Every tensor is read and checked before anything is written: a bad file leaves out_dir
// untouched. UserError naming the file for a truncated or foreign file, an unsupported tensor type or
// architecture, a missing, unknown or mis-shaped tensor.
ImportResult import_gguf(const std::string& gguf_path, const std::string& out_dir);

}  // namespace meshtrain::ckpt

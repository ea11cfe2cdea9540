// What `meshtrain export --gguf --type T` writes each tensor as. 1-D tensors (the norms, rope_freqs) stay F32
// everywhere, as in llama.cpp's files. For the 2-D weights:
//   f32, f16, bf16, q8_0  every weight in that type, as convert_hf_to_gguf.py --outtype writes it; a row length
//                         that is not a multiple of 32 falls back to F16 (q8_0).
//   q4_0                  llama-quantize's Q4_0: every weight Q4_0 but the output head (output.weight, or
//                         token_embd.weight when tied) Q6_K.
//   q4_k_m                llama-quantize's Q4_K_M: Q4_K, except Q6_K for the output head and for attn_v and
//                         ffn_down in the layers where llama.cpp's use_more_bits(i, n) holds: the first and last
//                         eighth of the layers and every third one between (i < n/8, i ≥ 7n/8, or (i − n/8) % 3 == 2).
// A K-quant on a row length that is not a multiple of 256 falls back as llama-quantize's does: Q4_K → Q5_0,
// Q6_K → Q8_0; any block type on a row that is not a multiple of 32 → F16.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "meshtrain/ckpt/gguf/ggml_types.h"
#include "meshtrain/ckpt/gguf/gguf_llama.h"

namespace meshtrain::ckpt::gguf {

struct ExportType {
  std::string name;    // "q4_k_m"
  uint32_t file_type;  // llama.cpp's LLAMA_FTYPE (general.file_type)
  GgmlType base;       // what most weights get
};

// The export type --type names; UserError listing the valid names otherwise.
ExportType export_type(const std::string& name);

// The ggml type of tensor `t` of a model with `n_layer` layers and tied (`tied`) embeddings.
GgmlType tensor_type(const ExportType& e, const LlamaTensorName& t, int64_t n_layer, bool tied);

}  // namespace meshtrain::ckpt::gguf

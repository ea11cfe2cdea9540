// meshtrain's Llama as llama.cpp's "llama" architecture: the metadata keys convert_hf_to_gguf.py writes for
// a LlamaForCausalLM, the tensor names, and the q/k row permutation.
//
//   tok_embed.weight              ↔ token_embd.weight          attn_norm ↔ blk.N.attn_norm
//   blocks.N.attn.{wq,wk,wv,wo}   ↔ blk.N.attn_{q,k,v,output}  mlp_norm  ↔ blk.N.ffn_norm
//   blocks.N.mlp.{w1,w3,w2}       ↔ blk.N.ffn_{gate,up,down}   final_norm ↔ output_norm, lm_head ↔ output
// The names come from the Hugging Face table (hf_name_table.h), so the three layouts cannot drift apart.
//
// Q/K permutation: meshtrain's RoPE (as Hugging Face's) rotates the halves of each head, [x1, x2] → [−x2, x1];
// llama.cpp's rotates adjacent pairs. convert_hf_to_gguf.py therefore reorders each head's rows of wq (and of
// wk, per key/value head) from [pair dim 0 of both halves …] to interleaved pairs: row (h, i, j) of the view
// [heads, 2, head_dim/2, in] moves to (h, j, i). Import undoes it.
//
// Llama 3.1's RoPE scaling (what meshtrain applies when max_seq_len > 8192) travels as the rope_freqs.weight
// tensor of per-frequency divisors, as convert_hf_to_gguf.py writes it.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "meshtrain/ckpt/gguf/gguf_file.h"
#include "meshtrain/core/config.h"

namespace meshtrain::ckpt::gguf {

struct LlamaTensorName {
  std::string ours;            // meshtrain parameter (no "model." prefix)
  std::string gguf;            // llama.cpp's name
  std::vector<int64_t> shape;  // PyTorch order ([out, in]); the file's ne is its reverse
  int64_t permute_heads = 0;   // > 0: rows permuted for llama.cpp's RoPE over this many heads
  int64_t layer = -1;          // the block it belongs to, -1 outside the blocks
};

// Every weight of `m`'s Llama (resolved), in the model's order; output.weight only when untied.
std::vector<LlamaTensorName> llama_tensor_names(const ModelConfig& m);

// Rows in HF's rotate-half order → llama.cpp's pairs, and back. `w`: [heads · head_dim, in].
at::Tensor permute_for_gguf(const at::Tensor& w, int64_t heads);
at::Tensor unpermute_from_gguf(const at::Tensor& w, int64_t heads);

// general.* and llama.* keys for `m` (resolved). `file_type`: llama.cpp's LLAMA_FTYPE of the export.
Metadata llama_metadata(const ModelConfig& m, const std::string& name, uint32_t file_type);

// rope_freqs.weight's values: meshtrain's unscaled inverse frequencies over its Llama 3.1-scaled ones, or
// empty when `m` applies no scaling (max_seq_len ≤ 8192).
std::vector<float> llama_rope_factors(const ModelConfig& m);

// The model a llama-architecture file describes; UserError naming the file and the key for another
// architecture, a mixture of experts, RoPE scaling meshtrain does not apply or dimensions that do not divide.
ModelConfig llama_config_from_gguf(const GgufReader& r);

}  // namespace meshtrain::ckpt::gguf

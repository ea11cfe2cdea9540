// Hugging Face ↔ meshtrain: config.json ↔ ModelConfig and the tensors, for `meshtrain export` and
// `meshtrain import` (hf_files.h does the file I/O). Both directions read one name table per family
// (hf_name_table.h); in short:
//
// Llama (LlamaForCausalLM): tok_embed → model.embed_tokens, blocks.N.attn.{wq,wk,wv,wo} →
//   model.layers.N.self_attn.{q,k,v,o}_proj, attn_norm → input_layernorm, mlp_norm → post_attention_layernorm,
//   mlp.{w1,w3,w2} → mlp.{gate,up,down}_proj, final_norm → model.norm, lm_head → lm_head (untied only).
//   No q/k permutation: meshtrain's RoPE (model/rotary.cpp) already rotates halves [x1, x2] → [-x2, x1] with
//   cos/sin tables repeated over both halves, exactly HF's rotate_half; HF's permutation exists to convert
//   Meta's interleaved-pair weights, which meshtrain never has. The HF round-trip test checks logits.
// GPT-2 (GPT2LMHeadModel): HF's Conv1D stores weights as [in, out], the transpose of a Linear, and fuses
//   q, k, v into attn.c_attn ([D, 3D]: columns q | k | v); names under transformer.{wte,wpe,h.N,ln_f}.
//   The causal-mask buffers some files carry (h.N.attn.bias, h.N.attn.masked_bias) are skipped on import.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "meshtrain/core/config.h"

namespace meshtrain::ckpt {

// `m` resolved (n_kv_head, d_ff filled). `dtype`: "float32", "bfloat16" or "float16".
nlohmann::json hf_config_from(const ModelConfig& m, const std::string& dtype);
// UserError naming `where` and the key for an architecture or option meshtrain does not model. A bos or eos
// id outside the vocabulary (transformers writes its class's default, GPT-2's 50256, whatever vocab_size is)
// becomes none (-1), with a warning line saying so.
ModelConfig model_config_from_hf(const nlohmann::json& hf, const std::string& where);

// meshtrain parameter names (no "model." prefix) → HF names and layouts.
std::map<std::string, at::Tensor> to_hf_tensors(const ModelConfig& m, const std::map<std::string, at::Tensor>& ours);
// The name a tensor of a Hugging Face file goes by in the family's table (hf_name_table.h): GPT-2 files from the
// Hub lack the "transformer." prefix save_pretrained writes. "" for a tensor that is not a weight: the causal-mask
// buffers, cached RoPE frequencies, a tied model's copy of the embedding as lm_head.weight.
std::string hf_table_name(const ModelConfig& m, const std::string& file_name);
// UserError naming `where` unless `shapes` (table names → shapes, hf_table_name's) holds every weight of `m`'s
// table with its shape and nothing else: what an import and a directory opened in place both check first.
void check_hf_tensors(const ModelConfig& m, const std::map<std::string, std::vector<int64_t>>& shapes,
                      const std::string& where);
// HF tensors → meshtrain parameters; UserError naming `where` for a missing, mis-shaped or unknown tensor.
std::map<std::string, at::Tensor> from_hf_tensors(const ModelConfig& m, const std::map<std::string, at::Tensor>& hf,
                                                  const std::string& where);

}  // namespace meshtrain::ckpt

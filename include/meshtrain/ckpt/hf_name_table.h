// How each meshtrain parameter is named and laid out in a Hugging Face model (LlamaForCausalLM,
// GPT2LMHeadModel): one table per family, read one way by export (to_hf_tensors) and the other by import
// (from_hf_tensors, hf_convert.h), so that the two directions cannot drift apart.
//
// A row pairs one HF tensor with one meshtrain parameter, or with several that HF concatenates along dim 0
// (GPT-2's attn.c_attn = [wq; wk; wv]); `transposed` marks HF's Conv1D layout, [in, out] (GPT-2's linears).
//   tok_embed.weight                       ↔ model.embed_tokens.weight           [V, D]
//   blocks.3.attn.wq.weight                ↔ model.layers.3.self_attn.q_proj.weight
//   blocks.3.attn.{wq,wk,wv}.weight        ↔ transformer.h.3.attn.c_attn.weight   ([wq; wk; wv]ᵀ)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meshtrain/core/config.h"

namespace meshtrain::ckpt {

struct HfTensorName {
  std::vector<std::string> ours;  // meshtrain parameter names (no "model." prefix); several: concatenated
  std::string hf;                 // the Hugging Face tensor's name
  std::vector<int64_t> shape;     // each of `ours`' tensors
  bool transposed = false;        // HF stores the (concatenated) tensor transposed
};

// Every weight of `m`'s model (resolved: n_kv_head, d_ff filled), its layers expanded, in the model's order;
// lm_head only when untied.
std::vector<HfTensorName> hf_name_table(const ModelConfig& m);

// The HF tensor's shape: `ours` concatenated along dim 0, then transposed where HF stores it so.
std::vector<int64_t> hf_shape(const HfTensorName& row);

// A Llama layer parameter's HF name: "blocks.3.attn.wq.weight" → "model.layers.3.self_attn.q_proj.weight";
// "" for a name that is not one (PEFT's adapter names are built on it: ckpt/lora_export.h).
std::string llama_hf_layer_name(const std::string& ours);

}  // namespace meshtrain::ckpt

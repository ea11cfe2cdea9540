// ParamTable: every parameter model/transformer.cpp creates for a config — name, shape, which block owns it
// and how tensor parallelism cuts it (parallel/tp/tensor_parallel.h) — computed without building the model, so
// the planner can count bytes per rank exactly (FSDP's padded row chunks, uneven vocabulary blocks, frozen
// parameters) for any layout. The multi-process layout tests check it against what the ranks really hold.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meshtrain/core/config.h"

namespace meshtrain::plan {

// How tensor parallelism splits a parameter over tp ranks.
enum class TpSplit {
  replicated,  // norms, pos_embed, row-parallel biases
  rows,        // column-parallel weights and biases: dim 0 evenly
  cols,        // row-parallel weights: dim 1 evenly
  vocab,       // tok_embed / lm_head: vocabulary rows as evenly as possible (vocab·r/tp .. vocab·(r+1)/tp)
};

struct ParamSpec {
  std::string name;            // as named_parameters() names it: "blocks.0.attn.wq.weight"
  std::vector<int64_t> shape;  // whole (global) shape
  int64_t block = -1;          // the transformer block holding it; -1 = the root (embeddings, final norm, head)
  TpSplit split = TpSplit::replicated;
  bool matmul = false;         // an operand of a matmul: autocast casts it to bf16 (and linear saves the copy)

  int64_t numel() const;
  // Shape of tp rank `r`'s block of it (of `tp` ranks).
  std::vector<int64_t> tp_shape(int64_t r, int64_t tp) const;
};

// The parameters of the model `m` (resolved: d_ff and n_kv_head filled) in registration order.
std::vector<ParamSpec> param_table(const ModelConfig& m);

// Whether train.freeze leaves `name` trainable (the globs of parallel/trainable_policy.h: '*' crosses dots).
bool trains(const std::vector<std::string>& frozen_globs, const std::string& name);
// Whether `name` trains under cfg: train.freeze, and with LoRA on (model.lora_rank > 0) only the adapters.
bool trains(const Config& cfg, const std::string& name);

}  // namespace meshtrain::plan

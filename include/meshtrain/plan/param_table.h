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

// The parameter table folded for sums over the model: the root's parameters one by one, and the parameters of
// a block once for each run of consecutive blocks whose parameters train alike (one run unless train.freeze
// names single blocks), as the run's first block's with the run's length. What the planner sums over, so that
// its cost does not grow with model.n_layer (a search over 100,000 layers takes seconds, not minutes).
struct ParamGroup {
  ParamSpec spec;        // the root's parameter, or this parameter of the run's first block
  bool trains = true;    // trains(cfg, spec.name): the same in every block of the run
  int64_t blocks = 1;    // the run's length (1 for a root parameter): the group stands for that many parameters
};
// The groups of cfg (resolved) in registration order. train.freeze globs are matched once per block name;
// the last config's answer is kept, so a search over layouts of one model matches them once.
std::vector<ParamGroup> param_groups(const Config& cfg);

// Whether train.freeze leaves `name` trainable (the globs of parallel/trainable_policy.h: '*' crosses dots).
bool trains(const std::vector<std::string>& frozen_globs, const std::string& name);
// Whether `name` trains under cfg: train.freeze, and with LoRA on (model.lora_rank > 0) only the adapters.
bool trains(const Config& cfg, const std::string& name);

}  // namespace meshtrain::plan

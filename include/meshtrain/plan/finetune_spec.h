// FinetuneSpec: what a fine-tuning run changes in the per-GPU arithmetic — LoRA adapters over a frozen base,
// and the optimizer state offloaded to host memory — as the planner's own inputs (`meshtrain plan
// --lora-rank/--lora-targets/--offload`; the config keys model.lora.* and optimizer.offload map onto it).
//
//   LoRA (rank r on projection W [out, in]): A [r, in] and B [out, r] per target per block. The base is frozen
//     in bf16: 2 bytes a parameter (sharded under FSDP/ZeRO, gathered in bf16 for compute), no master, no
//     gradient, no optimizer state, no autocast copies. The adapters train like any parameter: fp32 master,
//     fp32 gradient, AdamW m and v. Under TP, A is split with a row-parallel weight's input columns and B with
//     a column-parallel weight's output rows (the other factor replicated).
//   Offload: the fp32 master, the gradient shard and AdamW m and v live in pinned host memory; the GPU keeps the
//     bf16 parameters (its shard under FSDP) and only the gradients of the unit being reduced.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meshtrain/core/config.h"
#include "meshtrain/plan/param_table.h"

namespace meshtrain::plan {

struct FinetuneSpec {
  int64_t lora_rank = 0;                  // 0: no adapters, every parameter as the config trains it
  std::vector<std::string> lora_targets;  // among q, k, v, o, gate, up, down
  bool offload = false;                   // optimizer.offload: cpu

  bool lora() const { return lora_rank > 0; }

  // From the command line: `targets` comma-separated ("all" = all seven), `offload` none | cpu. UserError
  // naming the flag, the value and the valid ones.
  static FinetuneSpec parse(int64_t rank, const std::string& targets, const std::string& offload);
};

// The projections LoRA may target, in order.
const std::vector<std::string>& lora_projection_names();

// The adapter parameters of `m` (resolved) under `ft`, block by block: "blocks.3.attn.wq.lora_A" [r, in],
// "….lora_B" [out, r]. UserError for a target the family does not have (GPT-2 has no gate projection).
std::vector<ParamSpec> lora_params(const ModelConfig& m, const FinetuneSpec& ft);

}  // namespace meshtrain::plan

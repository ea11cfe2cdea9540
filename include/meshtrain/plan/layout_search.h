// LayoutSearch: the planner's answer for one layout (memory and step time) and for every layout of the mesh
// that divides the GPUs — pp × dp × fsdp × tp = GPUs with tp inside a node and dividing the heads and d_ff,
// pp dividing the layers; each data-parallel shape as DDP, ZeRO-1, ZeRO-2 or FSDP (HSDP where dp and fsdp are
// both > 1); with and without activation checkpointing; a full fine-tune also with its optimizer state offloaded
// (", offload") and, for Llama, as LoRA r16 instead (", lora r16": another job, so ranked after the full
// fine-tune's fitting rows) — those that fit first, each part sorted by predicted step time. Every layout trains the config's global batch
// (micro-batch × grad_accum × data ranks): train.grad_accum is set per layout. A config with
// train.device: cpu is refused (UserError): the figures are a GPU's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meshtrain/core/config.h"
#include "meshtrain/plan/memory_model.h"
#include "meshtrain/plan/mfu_table.h"
#include "meshtrain/plan/step_time.h"

namespace meshtrain::plan {

struct PlanOptions {
  int64_t gpus = 1;   // all GPUs of the job
  int64_t nodes = 1;
  std::string gpu = "h200-141gb";
};

struct PlanRow {
  std::string layout;  // "fsdp 8 (zero 3), ac" — as a person reads it
  Config cfg;          // resolved for the GPUs
  MemoryEstimate memory;
  StepTime time;
  std::string note;    // a variant the search chose (offload, LoRA), what the plan does not model (pipeline)
  bool changes_job = false;  // LoRA instead of the config's full fine-tune
};

// The layout `cfg` asks for (resolved here for opts.gpus).
PlanRow plan_layout(Config cfg, const PlanOptions& opts, const MfuTable& mfu);
// Every layout of the GPUs: those that fit fastest first, then those that do not (memory.fits false), fastest
// first.
std::vector<PlanRow> search_layouts(const Config& cfg, const PlanOptions& opts, const MfuTable& mfu);

}  // namespace meshtrain::plan

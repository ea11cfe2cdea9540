// LoraBase: the base model a LoRA run adapts (docs/lora.md), named in its checkpoints so that adapters are
// never resumed onto, or exported with, another base.
//
// The base is checkpoint.init_from's checkpoint — named by its path and an id computed from the checksums
// meta.json already holds for its tensors (no weight is read) — or, without init_from, the seeded
// initialisation ("seed N"). A LoRA checkpoint records both in meta.json's state ("lora": {rank, alpha,
// targets, base, id, ...}).
//
//   info.state["lora"] = lora_record(cfg);                   // saving
//   check_lora_checkpoint(cfg, dir, meta);                  // resuming: UserError when base or adapters differ
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "meshtrain/ckpt/checkpoint_meta.h"
#include "meshtrain/core/config.h"

namespace meshtrain::train {

// The base's id: "crc32c:XXXXXXXX" over the names and checksums of init_from's model tensors (adapters
// excluded), or "seed N" without init_from.
std::string lora_base_id(const Config& cfg);
// A LoRA run started from init_from saves only its adapters (and their optimizer state): the base is on disk
// already (ckpt/adapter_checkpoint.h). A seeded base is saved whole, since nothing else holds it.
bool saves_adapters_only(const Config& cfg);
// {"rank", "alpha", "targets", "base" (init_from's path, "" when seeded), "id", "hf_dir" (the Hugging Face
// directory the base was imported from, or ""), "adapters_only"} for cfg's run.
nlohmann::json lora_record(const Config& cfg);
// Resuming `dir` (its meta.json: `meta`) under cfg. UserError, one line: a LoRA checkpoint under a run with
// LoRA off or of another rank, other targets (model.lora_targets, as a set) or another model.lora_alpha, a
// checkpoint without adapters under LoRA, adapters of another base than cfg's (by id), or adapters-only with
// init_from unset or not a checkpoint.
void check_lora_checkpoint(const Config& cfg, const std::string& dir, const ckpt::CheckpointMeta& meta);

}  // namespace meshtrain::train

// Typed values of the config's string settings. The strings are resolved here, once, so every consumer takes
// an enum and a misspelt value is a UserError naming its key instead of a silent default.
//
//   Dtype d = parse_dtype(cfg.parallel.reduce_dtype, "parallel.reduce_dtype");   // fp32 | bf16
//   Dtype c = compute_dtype(cfg.train, /*cuda=*/true);                          // train.dtype, auto resolved
//   MasterLocation m = parse_master_location(cfg.parallel.master_location);     // device (host: not built)
//   std::vector<std::string> globs = freeze_patterns(cfg.train);               // train.freeze, split
//   std::vector<LoraTarget> t = lora_targets(cfg.model);                       // model.lora_targets, split
#pragma once

#include <string>
#include <vector>

#include "meshtrain/core/config.h"

namespace meshtrain {

enum class Dtype { fp32, bf16 };
// Where the fp32 master shards and optimizer state of the sharded layouts live.
enum class MasterLocation { device, host };

// "fp32" | "bf16"; anything else is a UserError naming `key` and the valid values.
Dtype parse_dtype(const std::string& value, const std::string& key);
// train.dtype with "auto" resolved for the training device (bf16 on CUDA, fp32 on the CPU).
Dtype compute_dtype(const TrainConfig& t, bool cuda);
// parallel.master_location: "device"; "host" is a UserError saying it is not built yet.
MasterLocation parse_master_location(const std::string& value);
// train.freeze split at commas, blanks trimmed; an empty pattern between commas is a UserError.
std::vector<std::string> freeze_patterns(const TrainConfig& t);

// The projections LoRA adapts (model.lora_targets), named as in the config and after PEFT's Llama modules.
enum class LoraTarget { q, k, v, o, gate, up, down };
// "q" … "down" (lora_targets' spelling).
const char* lora_target_name(LoraTarget t);
// model.lora_targets split at commas: each a known projection, none twice, at least one. Empty when
// model.lora_rank is 0 (LoRA off). UserError naming the key otherwise.
std::vector<LoraTarget> lora_targets(const ModelConfig& m);

}  // namespace meshtrain

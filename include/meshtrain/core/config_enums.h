// Typed values of the config's string settings. The strings are resolved here, once, so every consumer takes
// an enum and a misspelt value is a UserError naming its key instead of a silent default.
//
//   Dtype d = parse_dtype(cfg.parallel.reduce_dtype, "parallel.reduce_dtype");   // fp32 | bf16
//   Dtype c = compute_dtype(cfg.train, /*cuda=*/true);                          // train.dtype, auto resolved
//   MasterLocation m = parse_master_location(cfg.parallel.master_location);     // device
//   OptimizerOffload o = parse_optimizer_offload(cfg.optimizer.offload);         // none | cpu
//   std::vector<std::string> globs = freeze_patterns(cfg.train);               // train.freeze, split
//   Fp8Scaling f = parse_fp8(cfg.train);                                        // off | tensorwise | rowwise
//   bool g = cuda_graph_on(cfg.train);                                          // train.cuda_graph: off | on
//   AttentionBackend a = parse_attention_backend(cfg.train);                    // auto | flash | cudnn | …
//   std::vector<LoraTarget> t = lora_targets(cfg.model);                       // model.lora_targets, split
#pragma once

#include <string>
#include <vector>

#include "meshtrain/core/config.h"

namespace meshtrain {

enum class Dtype { fp32, bf16 };
// Where the fp32 master shards and optimizer state of the sharded layouts live.
enum class MasterLocation { device, host };
// Where the fp32 master weights and AdamW moments live and the update runs (optimizer.offload).
enum class OptimizerOffload { none, cpu };

// "fp32" | "bf16"; anything else is a UserError naming `key` and the valid values.
Dtype parse_dtype(const std::string& value, const std::string& key);
// train.dtype with "auto" resolved for the training device (bf16 on CUDA, fp32 on the CPU).
Dtype compute_dtype(const TrainConfig& t, bool cuda);
// parallel.master_location: "device"; "host" is a UserError pointing at optimizer.offload: cpu.
MasterLocation parse_master_location(const std::string& value);
// How train.fp8 scales a tensor before its FP8 cast: one scale per tensor, or one per row of the matmul's left
// operand and per column of its right one (finer: an outlier spoils only its row).
enum class Fp8Scaling { off, tensorwise, rowwise };
Fp8Scaling parse_fp8(const TrainConfig& t);
// train.cuda_graph: "off" | "on"; anything else is a UserError naming the key and the valid values.
bool cuda_graph_on(const TrainConfig& t);
// The SDPA kernel attention is restricted to (train.attention_backend); automatic = SDPA chooses.
enum class AttentionBackend { automatic, flash, cudnn, efficient, math };
AttentionBackend parse_attention_backend(const TrainConfig& t);
// "auto" … "math" (attention_backend's spelling).
const char* attention_backend_name(AttentionBackend b);
// optimizer.offload: "none" | "cpu"; anything else is a UserError naming the key and the valid values.
OptimizerOffload parse_optimizer_offload(const std::string& value);
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

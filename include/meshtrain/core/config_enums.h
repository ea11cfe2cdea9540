// The config's closed enumerations, each one X-macro of (identifier, spelling) rows (core/enum_names.h): the
// config structs' members are these types (config.h), the loader refuses any other spelling with the valid
// list, and consumers switch on them. A new value is one row here (and its case where it is switched on).
//
//   cfg.model.family == Family::llama
//   Dtype c = compute_dtype(cfg.train, /*cuda=*/true);             // train.dtype, auto resolved
//   std::vector<LoraTarget> t = lora_targets(cfg.model);           // model.lora_targets, checked
#pragma once

#include <vector>

#include "meshtrain/core/enum_names.h"

namespace meshtrain {

struct ModelConfig;
struct TrainConfig;

// clang-format off
// model.family: the transformer's architecture.
#define MT_FAMILY_VALUES(V) V(gpt2, "gpt2") V(llama, "llama")
// parallel.pp_schedule: the pipeline's order of forward and backward passes (docs/pipeline.md).
#define MT_PIPELINE_KIND_VALUES(V) \
  V(gpipe, "gpipe") V(one_f_one_b, "1f1b") V(interleaved_1f1b, "interleaved-1f1b") V(zb_h1, "zb-h1")
// parallel.backend: the collective backend; automatic = nccl on CUDA, cpu otherwise.
#define MT_COMM_BACKEND_VALUES(V) V(automatic, "auto") V(nccl, "nccl") V(cpu, "cpu")
// parallel.param_dtype, parallel.reduce_dtype: a floating-point element type.
#define MT_DTYPE_VALUES(V) V(fp32, "fp32") V(bf16, "bf16")
// parallel.master_location: where the fp32 master shards and optimizer state of the sharded layouts live.
#define MT_MASTER_LOCATION_VALUES(V) V(device, "device")
// data.format: how token shards are read; Auto = llm.c header if the magic is there, else uint16.
#define MT_SHARD_FORMAT_VALUES(V) V(Auto, "auto") V(LlmC, "llmc") V(U16, "uint16") V(U32, "uint32")
// data.loss_mask: which targets the loss counts; automatic = the shards' loss masks where they have them.
#define MT_LOSS_MASK_VALUES(V) V(automatic, "auto") V(all, "all")
// optimizer.name.
#define MT_OPTIMIZER_NAME_VALUES(V) V(adamw, "adamw")
// optimizer.offload: where the fp32 master weights and AdamW moments live and the update runs.
#define MT_OPTIMIZER_OFFLOAD_VALUES(V) V(none, "none") V(cpu, "cpu")
// model.base_quant: how LoRA's frozen base linears are held (docs/lora.md "QLoRA").
#define MT_BASE_QUANT_VALUES(V) V(none, "none") V(nf4, "nf4")
// schedule.kind: the learning rate's shape after warmup.
#define MT_LR_SHAPE_VALUES(V) V(cosine, "cosine") V(linear, "linear") V(constant, "constant") V(wsd, "wsd")
// train.device: where to train; automatic = cuda if present.
#define MT_TRAIN_DEVICE_VALUES(V) V(automatic, "auto") V(cpu, "cpu") V(cuda, "cuda")
// train.dtype: compute precision; automatic = bf16 on cuda, fp32 on the CPU (compute_dtype()).
#define MT_COMPUTE_DTYPE_VALUES(V) V(automatic, "auto") V(fp32, "fp32") V(bf16, "bf16")
// train.attention_backend: the SDPA kernel attention is restricted to; automatic = SDPA chooses.
#define MT_ATTENTION_BACKEND_VALUES(V) \
  V(automatic, "auto") V(flash, "flash") V(cudnn, "cudnn") V(efficient, "efficient") V(math, "math")
// train.fp8: how a tensor is scaled before its FP8 cast: one scale per tensor, or one per row of the matmul's
// left operand and per column of its right one (finer: an outlier spoils only its row), or one per tensor from
// the amaxes of the casts before it (delayed: one pass over the tensor, not two).
#define MT_FP8_SCALING_VALUES(V) \
  V(off, "off") V(tensorwise, "tensorwise") V(rowwise, "rowwise") V(delayed, "delayed")
// A switch written off | on (train.cuda_graph).
#define MT_ON_OFF_VALUES(V) V(off, "off") V(on, "on")
// logging.level (log::Level's order).
#define MT_LOG_LEVEL_VALUES(V) \
  V(trace, "trace") V(debug, "debug") V(info, "info") V(warn, "warn") V(error, "error") V(off, "off")
// logging.wandb: Weights & Biases through its own `wandb` package; offline writes a run directory that
// `wandb sync` uploads later.
#define MT_WANDB_MODE_VALUES(V) V(off, "off") V(offline, "offline") V(online, "online")
// The projections LoRA adapts (model.lora_targets' items), named as PEFT's Llama modules are.
#define MT_LORA_TARGET_VALUES(V) \
  V(q, "q") V(k, "k") V(v, "v") V(o, "o") V(gate, "gate") V(up, "up") V(down, "down")
// clang-format on

MT_DEFINE_ENUM(Family, MT_FAMILY_VALUES)
MT_DEFINE_ENUM(PipelineKind, MT_PIPELINE_KIND_VALUES)
MT_DEFINE_ENUM(CommBackend, MT_COMM_BACKEND_VALUES)
MT_DEFINE_ENUM(Dtype, MT_DTYPE_VALUES)
MT_DEFINE_ENUM_NOTED(MasterLocation, MT_MASTER_LOCATION_VALUES,
                     "the master weights and optimizer state move to host memory with optimizer.offload: cpu")
MT_DEFINE_ENUM(ShardFormat, MT_SHARD_FORMAT_VALUES)
MT_DEFINE_ENUM(LossMask, MT_LOSS_MASK_VALUES)
MT_DEFINE_ENUM(OptimizerName, MT_OPTIMIZER_NAME_VALUES)
MT_DEFINE_ENUM(OptimizerOffload, MT_OPTIMIZER_OFFLOAD_VALUES)
MT_DEFINE_ENUM(BaseQuant, MT_BASE_QUANT_VALUES)
MT_DEFINE_ENUM(LrShape, MT_LR_SHAPE_VALUES)
MT_DEFINE_ENUM(TrainDevice, MT_TRAIN_DEVICE_VALUES)
MT_DEFINE_ENUM(ComputeDtype, MT_COMPUTE_DTYPE_VALUES)
MT_DEFINE_ENUM(AttentionBackend, MT_ATTENTION_BACKEND_VALUES)
MT_DEFINE_ENUM(Fp8Scaling, MT_FP8_SCALING_VALUES)
MT_DEFINE_ENUM(OnOff, MT_ON_OFF_VALUES)
MT_DEFINE_ENUM(LogLevel, MT_LOG_LEVEL_VALUES)
MT_DEFINE_ENUM(WandbMode, MT_WANDB_MODE_VALUES)
MT_DEFINE_ENUM(LoraTarget, MT_LORA_TARGET_VALUES)

// train.dtype with auto resolved for the training device (bf16 on CUDA, fp32 on the CPU).
Dtype compute_dtype(const TrainConfig& t, bool cuda);
// model.lora_targets as projections: each a known one, none twice, at least one. Empty when model.lora_rank is
// 0 (LoRA off). UserError naming the key otherwise.
std::vector<LoraTarget> lora_targets(const ModelConfig& m);

}  // namespace meshtrain

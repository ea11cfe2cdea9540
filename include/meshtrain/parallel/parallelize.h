// parallelize(): applies the layout the config asks for, in a fixed order (docs/architecture.md) —
//   [pipeline stage split →] tensor parallelism → which parameters train → activation checkpointing →
//   FSDP/ZeRO or DDP
// With pp > 1 the model is first split into stages (parallel/pipeline/pipeline_split.h); this rank's chunks each get
// the rest of the order inside their stage and run under a pipeline schedule (parallel/pipeline/pipeline_model.h).
// and returns the model as the trainer drives it (parallel/parallel_model.h).
//
// Layout from parallel.{dp, fsdp, tp, zero_stage}:
//   tp > 1              Megatron-style TP over the tp group first (parallel/tp/tensor_parallel.h); what follows
//                       then applies to this rank's TP blocks
//   fsdp > 1            FSDP over the fsdp group (zero_stage 0 or 3); dp > 1 adds replicas: HSDP
//   fsdp = 1, stage 1-3 ZeRO-1 / ZeRO-2 / FSDP over the dp group
//   fsdp = 1, stage 0   DDP over the dp group (a plain model in a single process, or TP alone, unless
//                       force_wrapper)
// Under TP every layout's sharded_parameters() are blocks of the global tensors (FSDP's dim-0 chunk inside
// the TP block), its clip_grad_norm sums TP blocks over tp and counts TP-replicated parameters once, and its
// backward finishes sequence parallelism's partial gradients.
#pragma once

#include <memory>

#include "meshtrain/core/config.h"
#include "meshtrain/parallel/parallel_groups.h"
#include "meshtrain/parallel/parallel_model.h"
#include "meshtrain/parallel/trainable_policy.h"

namespace meshtrain::parallel {

// `net` is built on the meta device (model::Transformer(cfg.model, TensorOptions().device(kMeta))); its
// parameters are materialised here — whole, or only this rank's shards — for cfg.train.seed on `device`.
// `cfg` resolved and validated for the world size of `groups`. `policy` decides which parameters train
// (parallel/trainable_policy.h; UserError for a pattern that matches no parameter); the overload without it
// takes train.freeze. Compute runs in train.dtype (auto: bf16 on CUDA) under autocast.
std::unique_ptr<ParallelModel> parallelize(model::Transformer net, const ParallelGroups& groups, const Config& cfg,
                                           const at::Device& device, const TrainablePolicy& policy);
std::unique_ptr<ParallelModel> parallelize(model::Transformer net, const ParallelGroups& groups, const Config& cfg,
                                           const at::Device& device);

// 0 = replicated, 1-3 = ZeRO stage; fsdp > 1 with zero_stage 0 means 3.
int effective_zero_stage(const ParallelConfig& p);

}  // namespace meshtrain::parallel

#include "meshtrain/parallel/parallelize.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "meshtrain/comm/fake_communicator.h"
#include "meshtrain/core/config_enums.h"
#include "meshtrain/core/error.h"
#include "meshtrain/model/activation_checkpoint.h"
#include "meshtrain/model/init.h"
#include "meshtrain/model/nf4_base.h"
#include "meshtrain/model/param_module.h"
#include "meshtrain/parallel/pipeline/pipeline_model.h"
#include "meshtrain/parallel/ddp/replicated_model.h"
#include "meshtrain/parallel/fsdp/sharded_model.h"

namespace meshtrain::parallel {
namespace {

at::ScalarType at_dtype(Dtype d) { return d == Dtype::bf16 ? at::kBFloat16 : at::kFloat; }

// LoRA's frozen base is only ever read: under a reduced compute dtype it is held in that dtype — no fp32 copy —
// like the autocast copies it would otherwise be cast into anyway. None: frozen parameters stay fp32.
std::optional<at::ScalarType> frozen_dtype(const Config& cfg, const at::Device& device) {
  if (cfg.model.lora_rank == 0 || compute_dtype(cfg.train, device.is_cuda()) != Dtype::bf16) return std::nullopt;
  return at::kBFloat16;
}

// The replicated layout's counterpart of FullyShardOptions::frozen_dtype: each frozen parameter gets its storage
// in `dtype` directly, drawn in fp32 (init_parameter_block: the same numbers as every layout) and cast at once.
// Materialising the whole model in fp32 and casting afterwards held an fp32 copy of the frozen base at once — on
// a GPU, before the first step, 4 bytes per base parameter where the base needs 2. Drawn largest first, the
// most alive at once is the largest parameter's fp32 draw and bf16 copy beside the few drawn before it (70B
// shape: head and embedding, 8 B × V·D), not the last one's beside the whole base. Frozen parameters that
// are real already (tensor parallelism's blocks) are cast in place.
void materialize_frozen_in(model::TransformerImpl& net, const at::Device& device, int64_t seed,
                           at::ScalarType dtype) {
  struct Frozen {
    model::ParamModule* owner;
    std::string local, name;
    at::Tensor current;
  };
  std::vector<Frozen> frozen;
  for (const auto& item : net.named_modules()) {
    auto* m = dynamic_cast<model::ParamModule*>(item.value().get());
    if (!m) continue;
    const std::string prefix = item.key().empty() ? "" : item.key() + ".";
    for (const auto& p : m->named_parameters(/*recurse=*/false))
      if (!p.value().requires_grad() && p.value().scalar_type() != dtype)
        frozen.push_back({m, p.key(), prefix + p.key(), p.value()});
  }
  std::stable_sort(frozen.begin(), frozen.end(),
                   [](const Frozen& a, const Frozen& b) { return a.current.numel() > b.current.numel(); });
  at::NoGradGuard no_grad;
  for (Frozen& f : frozen) {
    at::Tensor held;
    if (f.current.is_meta()) {
      held = at::empty(f.current.sizes(), f.current.options().device(device).dtype(dtype));
      model::init_parameter_block(net.config(), f.name, f.current.sizes().vec(),
                                  std::vector<int64_t>(f.current.dim(), 0), held, seed);
    } else {
      held = f.current.to(dtype);
    }
    f.current = at::Tensor();  // the fp32 block (tensor parallelism's) goes as soon as it is replaced
    f.owner->replace_parameter(f.local, std::move(held));
  }
}

// model.base_quant nf4: the frozen block linears held in NF4 before any layout sees them (they leave the
// parameters: DDP's broadcast never sees them, and FSDP shards them apart, parallel/fsdp/fully_shard.h).
// Replicated layouts: drawn here from the seed, one weight at a time in fp32, as every layout draws them, and
// held whole on every rank (0.52 bytes a parameter). Sharded ones: held by their sizes only — FSDP draws and
// quantizes each itself and keeps its rows' share, so no rank holds the whole NF4 base. A run from
// checkpoint.init_from quantizes them again from the base's values (src/train/trainer.cpp).
void quantize_seeded_base(model::TransformerImpl& net, const Config& cfg, const at::Device& device, bool sharded) {
  if (cfg.model.base_quant == BaseQuant::none) return;
  if (sharded) {
    model::hold_base_nf4_sizes(net);
    return;
  }
  model::quantize_base(net, device, [&](const std::string& name, at::IntArrayRef shape) {
    return model::seeded_base_weight(cfg.model, name, shape, device, cfg.train.seed);
  });
}

// A group of one when the world is a single process: every collective is then the identity.
comm::CommPtr or_single(const comm::CommPtr& c) { return c ? c : comm::make_fake_communicator(0, 1); }

}  // namespace

int effective_zero_stage(const ParallelConfig& p) {
  if (p.fsdp > 1 && p.zero_stage == 0) return 3;
  return static_cast<int>(p.zero_stage);
}

std::unique_ptr<ParallelModel> parallelize(model::Transformer net, const ParallelGroups& groups, const Config& cfg,
                                           const at::Device& device) {
  return parallelize(std::move(net), groups, cfg, device, TrainablePolicy::from_config(cfg));
}

namespace {

// One module's layout (the whole model, or one pipeline stage's): steps 1-4 of parallelize() below. `policy`
// null: the module's frozen parameters are marked already. `distributed`: more than one rank holds this
// module's parameters.
std::unique_ptr<ParallelModel> parallelize_module(model::Transformer net, const ParallelGroups& groups,
                                                  const Config& cfg, const at::Device& device,
                                                  const TrainablePolicy* policy, bool distributed) {
  const ParallelConfig& p = cfg.parallel;
  const int stage = effective_zero_stage(p);
  // 1. Tensor parallelism: cuts the attention/MLP/embedding weights into this rank's blocks over the tp group.
  //    Under DDP the blocks are materialised here; under FSDP/ZeRO they stay on the meta device and FSDP
  //    initialises only its chunk of each (never the whole TP block).
  std::shared_ptr<const TensorParallel> tp;
  if (p.tp > 1) {
    MT_CHECK(groups.tp && groups.tp->size() == p.tp, "parallelize: parallel.tp ", p.tp,
             " without a tp group of that size");
    tp = apply_tensor_parallel(*net, groups.tp, cfg, stage == 0 ? device : at::Device(at::kMeta));
  }
  // 2. Which parameters train: marked once on the module; every wrapper below follows the mark. Under
  //    model.base_quant nf4 the frozen block linears then leave the parameters for their NF4 copies.
  if (policy) policy->apply(*net);
  quantize_seeded_base(*net, cfg, device, /*sharded=*/stage != 0);
  // 3. Activation checkpointing: the innermost runner, so the recomputation sees gathered parameters.
  model::BlockRunner ac = cfg.train.activation_checkpointing ? model::activation_checkpointing_runner()
                                                             : model::BlockRunner();
  // 4. FSDP / ZeRO or DDP, over the TP blocks.
  std::unique_ptr<ParallelModel> out;
  if (stage == 0) {
    if (auto frozen = frozen_dtype(cfg, device)) materialize_frozen_in(*net, device, cfg.train.seed, *frozen);
    net->materialize(device, cfg.train.seed);  // the rest in fp32
    net->set_block_runner(ac);
    // A dp group of one (TP alone) reduces nothing: no reducer unless asked for.
    const bool reduce = distributed && (groups.dp->size() > 1 || !tp);
    comm::CommPtr dp = reduce ? groups.dp : p.force_wrapper ? or_single(groups.dp) : nullptr;
    DataParallelOptions o{.bucket_mb = p.bucket_mb, .first_bucket_mb = p.bucket_first_mb,
                          .reduce_dtype = at_dtype(p.reduce_dtype),
                          .allow_unused = p.allow_unused_params};
    out = std::make_unique<ReplicatedModel>(std::move(net), std::move(dp), o, std::move(tp));
  } else {
    comm::CommPtr shard = or_single(p.fsdp > 1 ? groups.fsdp : groups.dp);
    comm::CommPtr replicate = p.fsdp > 1 ? groups.dp : nullptr;
    FullyShardOptions o{.zero_stage = stage, .reshard_after_forward = p.fsdp_reshard_after_forward,
                        .param_dtype = at_dtype(p.param_dtype),
                        .reduce_dtype = at_dtype(p.reduce_dtype),
                        .allow_unused = p.allow_unused_params,
                        .master_location = p.master_location,
                        .frozen_dtype = frozen_dtype(cfg, device)};
    out = std::make_unique<ShardedModel>(std::move(net), cfg.train.seed, device, std::move(shard),
                                         std::move(replicate), o, std::move(ac), std::move(tp));
  }
  return out;
}

}  // namespace

std::unique_ptr<ParallelModel> parallelize(model::Transformer net, const ParallelGroups& groups, const Config& cfg,
                                           const at::Device& device, const TrainablePolicy& policy) {
  const ParallelConfig& p = cfg.parallel;
  const int world = groups.world ? groups.world->size() : 1;
  std::unique_ptr<ParallelModel> out;
  if (p.pp > 1) {
    // 0. The stage split first: each of this rank's model chunks gets the layout below over the groups
    //    inside its stage (dp/fsdp/tp); the pipeline runs the chunks (parallel/pipeline/pipeline_model.h).
    const bool distributed = world / p.pp > 1;
    auto layout = [&](model::Transformer stage) {
      return parallelize_module(std::move(stage), groups, cfg, device, nullptr, distributed);
    };
    out = std::make_unique<PipelineModel>(net, groups, cfg, device, policy, layout);
  } else {
    out = parallelize_module(std::move(net), groups, cfg, device, &policy, world > 1);
  }
  out->set_compute_dtype(compute_dtype(cfg.train, device.is_cuda()), device.type());
  return out;
}

}  // namespace meshtrain::parallel

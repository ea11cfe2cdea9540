// LoraLinear: a Linear with a low-rank adapter beside its weight (LoRA, Hu et al. 2021; docs/lora.md):
//   y = W x + b + (alpha / r) · B (A (dropout x))      A: [r, in], B: [out, r]
// W (and b) are the base model's, frozen by the trainable-parameter policy (parallel/trainable_policy.h) and
// held in the compute dtype; only A and B train. A starts kaiming-uniform and B at zero as PEFT does, so the
// adapted model starts equal to its base (model/init.h). It stands in for a Linear under the same module name
// (forward is virtual), so the base's parameter names — and a checkpoint or HF import of the base — are
// unchanged; the adapters add `<module>.lora_A` and `<module>.lora_B`.
//
//   auto q = make_linear(cfg, LoraTarget::q, d, d, /*bias=*/false, opts);   // a LoraLinear when q is a target
#pragma once

#include "meshtrain/core/config.h"
#include "meshtrain/model/linear/linear.h"

namespace meshtrain::model {

class LoraLinearImpl : public LinearImpl {
 public:
  LoraLinearImpl(int64_t in, int64_t out, bool bias, int64_t rank, double alpha, double dropout,
                 const at::TensorOptions& opts);
  at::Tensor forward(const at::Tensor& x) override;  // x: [..., in] → [..., out]
  // The adapters' product is added after the matmul: no fused GELU epilogue.
  bool can_fuse_gelu() const override { return false; }

  // alpha / r: what the adapters' product is multiplied by.
  double scale() const { return scale_; }
  // The probability of dropping an adapter input feature while training.
  double dropout() const { return dropout_; }
  // W + scale · B A in W's dtype: the weight of the merged model (export).
  at::Tensor merged_weight() const;

  at::Tensor lora_A;  // [r, in]
  at::Tensor lora_B;  // [out, r]

 private:
  double scale_;
  double dropout_;
};

// A Linear for projection `target` of a block: a LoraLinearImpl when LoRA is on (model.lora_rank > 0) and
// `target` is among model.lora_targets, else a plain LinearImpl.
Linear make_linear(const ModelConfig& cfg, LoraTarget target, int64_t in, int64_t out, bool bias,
                   const at::TensorOptions& opts);

// The adapters' dropout of `x`, features [offset, offset + x.size(-1)) of a `width`-wide input ([..., width]):
// the keep-mask is drawn for the whole width from the default generator and narrowed. Ranks holding column
// blocks of one input (a row-parallel layer) thus drop what one process drops, and ranks holding the same
// input (column-parallel) draw the same mask, as long as their default generators agree — which is why the
// whole width is drawn even where a rank uses part of it.
at::Tensor lora_dropout(const at::Tensor& x, double p, int64_t width, int64_t offset);

// The name suffixes of adapter parameters, for whoever must tell them from the base's (the trainable policy,
// init_from of a base checkpoint, export).
bool is_lora_parameter(const std::string& name);

}  // namespace meshtrain::model

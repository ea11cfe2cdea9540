// Linear and Embedding with the parameter names and maths of torch::nn's, but constructed from explicit
// TensorOptions: built on the meta device they allocate nothing, which is how a model larger than one GPU
// (or one host) is described before the parallel layers materialise only this rank's shards
// (TransformerImpl::materialize, parallel/fsdp/). Initial values are not set here: see model/init.h.
// forward is virtual so that the tensor-parallel layers (parallel/tp/) can stand in for a Linear or an
// Embedding under the same module name — parameter names unchanged, the model none the wiser.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "meshtrain/core/config_enums.h"
#include "meshtrain/model/linear/fp8_amax_history.h"
#include "meshtrain/model/linear/fp8_weight.h"
#include "meshtrain/model/param_module.h"
#include "meshtrain/model/table_rows.h"

namespace meshtrain::model {

class Fp8SharedInput;
struct Nf4Tensor;

class LinearImpl : public ParamModule {
 public:
  LinearImpl(int64_t in, int64_t out, bool bias, const at::TensorOptions& opts);
  virtual at::Tensor forward(const at::Tensor& x);  // x: [..., in] → [..., out]
  // FP8 matmuls (model/linear/fp8_linear.h) where the sizes allow; off by default. A layer that overrides forward
  // (the tensor-parallel ones) keeps its own matmuls. `shared`: the input's casts shared with the other
  // layers that read the same input (model/linear/fp8_shared_input.h). Delayed scaling starts the layer's amax
  // histories anew (model/linear/fp8_amax_history.h).
  void set_fp8(Fp8Scaling s, std::shared_ptr<Fp8SharedInput> shared = nullptr);
  // gelu_tanh(forward(x)). With `fused`, bias and GELU fused with the matmul (model/linear/fused_linear_gelu.h)
  // where the layer can_fuse_gelu(); otherwise gelu(forward(x)).
  virtual at::Tensor forward_gelu(const at::Tensor& x, bool fused);
  // r + forward(x), r the fp32 residual stream: the add inside the GEMM (model/linear/residual_linear.h) where the
  // layer can_fuse(), master_grads() and fused_adds() are on and residual_linear applies; otherwise the add
  // after forward.
  at::Tensor forward_residual(const at::Tensor& x, const at::Tensor& r);
  // Whether forward is exactly x·Wᵀ + b on this layer's whole weight, so a fused matmul + bias + GELU may stand
  // in for it. A subclass whose forward computes more or otherwise (adapters, a shard between collectives)
  // answers false.
  virtual bool can_fuse_gelu() const { return true; }
  // Whether a fused op may compute this layer's x·Wᵀ + b in its place (model/linear/gelu_mlp.h): can_fuse_gelu()
  // and no FP8 matmuls.
  bool can_fuse() const { return holds_plain_weight() && can_fuse_gelu(); }
  // Whether forward(x), run without gradients, is exactly x·Wᵀ + b on this layer's own weight and bias (this
  // rank's block of them), however the weight is held (in FP8 for inference too), so that an inference step may
  // compute it inside one GEMM with other layers that read the same input, their weights laid side by side
  // (model/fused_projections.h). Unlike can_fuse(), a layer whose forward adds only collectives that are the
  // identity in a forward (a column-parallel shard) answers true; adapters, FP8 training matmuls, NF4 or a
  // collective on the output answer false.
  virtual bool plain_in_inference() const { return fp8_ == Fp8Scaling::off && !nf4_ && can_fuse_gelu(); }
  // With a bias: forward through bias_linear (model/linear/bias_linear.h: the bias gradient inside the weight-gradient
  // GEMM on CUDA) instead of at::linear; default off. Layers that override forward keep their own matmuls.
  void set_fused_bias(bool on) { fused_bias_ = on; }
  bool fused_bias() const { return fused_bias_; }
  // forward through master_linear (model/linear/master_linear.h: fp32 master weights under CUDA autocast get ∂W and
  // ∂b in fp32 straight from the GEMM and the column sum, no cast kernel after them) where it applies,
  // at::linear elsewhere; default off, on with train.fused_kernels. Layers that override forward keep theirs.
  void set_master_grads(bool on) { master_grads_ = on; }
  bool master_grads() const { return master_grads_; }
  // Adds done by the GEMMs: forward_residual's, and the input gradients of layers sharing an input
  // (model/linear/shared_input_linears.h); default off, on with train.fused_kernels and train.fused_adds.
  void set_fused_adds(bool on) { fused_adds_ = on; }
  bool fused_adds() const { return fused_adds_; }

  // model.base_quant nf4 (docs/lora.md "QLoRA"): the frozen weight held as `q` from now on — forward and
  // backward dequantize it to the compute dtype (model/linear/nf4_linear.h). `weight` leaves the module's
  // parameters (no optimizer, checkpoint or layout's parameter list sees it; FSDP shards the NF4 storage apart,
  // through hold_nf4_rows) and becomes a meta tensor of its shape, which still answers size() and allocates
  // nothing.
  void hold_weight_as_nf4(Nf4Tensor q);
  // A layout that keeps the NF4 weight's storage itself (FSDP shards it: parallel/fsdp/fully_shard.h): from now
  // on the weight reads its codes, absmax codes and scales from `rows` (Nf4Tensor::as_rows()'s layout; their
  // storage is the layout's to fill before this layer runs), and a later hold_weight_as_nf4 hands the new
  // values' rows to `store` (the layout writes its piece of them) instead of holding them whole. An empty
  // `store`: the rows are this layer's own again.
  using Nf4RowStore = std::function<void(const std::vector<at::Tensor>& rows)>;
  void hold_nf4_rows(std::vector<at::Tensor> rows, Nf4RowStore store);
  // The NF4 weight, or null while the weight is a parameter. Its storage held by a layout (hold_nf4_rows), its
  // codes, absmax codes and scales are meta tensors of their sizes: bytes(), rows() and the map answer.
  const Nf4Tensor* nf4_weight() const { return nf4_.get(); }
  // Inference with FP8 weights (docs/serving.md "FP8 weights"): the weight held as `w` from now on, and the
  // layer's product is fp8_weight_linear (model/linear/fp8_weight.h), without gradients. `weight` leaves the
  // module's parameters and becomes a meta tensor of its shape and dtype, as for NF4. Only where can_hold_fp8().
  void hold_weight_as_fp8(Fp8Weight w);
  // Whether hold_weight_as_fp8 may take this layer: its weight is a plain tensor (no FP8 training matmuls, NF4 or
  // FP8 weight already) and its forward computes nothing on it but x·Wᵀ + b (with collectives around it, for
  // the tensor-parallel layers, which run local_product()); adapters answer false.
  virtual bool can_hold_fp8() const { return holds_plain_weight() && can_fuse_gelu(); }
  // The FP8 weight, undefined while the weight is a parameter.
  const Fp8Weight& fp8_weight() const { return fp8_weight_; }
  // The weight's values in fp32 whichever way it is held (the NF4 one dequantized): for export and merging.
  at::Tensor weight_values() const;

  at::Tensor weight;  // [out, in]
  at::Tensor bias;    // [out], undefined without bias

 protected:
  // x·Wᵀ + b on this layer's weight however it is held: at::linear, or fp8_weight_linear for an FP8 weight. What
  // a subclass's forward calls for its own block's product.
  at::Tensor local_product(const at::Tensor& x, const at::Tensor& b) const;
  // Neither FP8 training matmuls, nor NF4, nor an FP8 weight: `weight` is the tensor the product reads.
  bool holds_plain_weight() const { return fp8_ == Fp8Scaling::off && !nf4_ && !fp8_weight_.defined(); }

 private:
  // The NF4 weight over its storage: nf4_ itself, or nf4_'s sizes over the layout's rows (views, made per use).
  Nf4Tensor nf4_current() const;

  std::shared_ptr<const Nf4Tensor> nf4_;
  std::vector<at::Tensor> nf4_rows_;  // hold_nf4_rows: the storage nf4_ reads, and who writes it
  Nf4RowStore nf4_store_;
  Fp8Weight fp8_weight_;
  Fp8Scaling fp8_ = Fp8Scaling::off;
  std::shared_ptr<Fp8SharedInput> fp8_input_;
  c10::intrusive_ptr<Fp8LinearHistories> fp8_sites_;  // delayed scaling's
  bool fused_bias_ = false;
  bool master_grads_ = false;
  bool fused_adds_ = false;
};
TORCH_MODULE(Linear);

class EmbeddingImpl : public ParamModule {
 public:
  EmbeddingImpl(int64_t num, int64_t dim, const at::TensorOptions& opts);
  virtual at::Tensor forward(const at::Tensor& ids);  // ids: [...] int64 → [..., dim]
  // forward(ids) as rows of a table held here, for a reader that would rather gather them again than keep them
  // (model/table_rows.h); nullopt where forward is more than a local lookup (a subclass that overrides forward
  // must override this too).
  virtual std::optional<TableRows> rows(const at::Tensor& ids) const { return TableRows{weight, ids}; }

  at::Tensor weight;  // [num, dim]
};
TORCH_MODULE(Embedding);

}  // namespace meshtrain::model

// ParallelModel: a transformer as one layout runs it — what the trainer drives, whatever the layout (plain,
// DDP, ZeRO-1/2, FSDP, HSDP; each optionally over tensor-parallel blocks). Built by parallelize()
// (parallel/parallelize.h).
//
// Per step:  forward_backward(micro-batches) → clip_grad_norm(max) → optimizer.step() on optimizer_params()
//            → after_optimizer_step()
// forward_backward is the step seam: its default runs today's loop — for each micro-batch { l = loss(x, y)
// under autocast; backward(l / A, sync = last micro-batch) } — and a pipeline schedule overrides it alone.
// Only trainable parameters (parallel/trainable_policy.h) get gradients, optimizer entries and norm terms.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "meshtrain/core/config_enums.h"
#include "meshtrain/core/sharded_tensor.h"
#include "meshtrain/model/transformer.h"
#include "meshtrain/parallel/generation_scope.h"
#include "meshtrain/parallel/gradient_sink.h"
#include "meshtrain/parallel/tp/tensor_parallel.h"

namespace meshtrain::parallel {

class ParallelModel {
 public:
  struct OptimParam {
    std::string name;  // global parameter name
    at::Tensor param;  // what the optimizer updates in place: the parameter, or this rank's fp32 shard of it
    bool decay;        // ≥ 2-D and not an embedding (GPT-2 / nanoGPT rule)
  };
  struct MicroBatch {
    at::Tensor tokens, targets;  // [B, T] on the training device; a target of -100 takes no loss (masked)
    model::Documents docs;       // packed documents (model/documents.h); empty = each row is one document
    // What this micro-batch's mean loss is multiplied by before backward; unset = 1 / the number of
    // micro-batches. For the mean over every unmasked target of the global batch, the caller sets
    // (this micro-batch's unmasked targets) × (ranks the gradients are averaged over) / (unmasked targets of
    // the step on all data-parallel ranks). 0 = no unmasked target here (its backward still runs, as zeros).
    std::optional<double> loss_weight;
  };

  virtual ~ParallelModel() = default;

  model::TransformerImpl& module() { return *net_; }
  const model::Transformer& net() const { return net_; }

  // The step's forward and backward over `batches` (grad_accum micro-batches): each loss scaled by its
  // loss_weight (1 / count when unset), reductions skipped on all but the last. Returns count × the loss
  // backpropagated (the sum of the micro-batch losses when unweighted) as a device scalar (no host sync).
  // Afterwards the optimizer parameters' .grad hold the global average.
  virtual at::Tensor forward_backward(const std::vector<MicroBatch>& batches);
  // Mean loss of one micro-batch with gradients, under the training precision: what forward_backward runs per
  // micro-batch, and what a CUDA graph of the step captures (train/cuda_graph_step.h).
  at::Tensor train_loss(const at::Tensor& tokens, const at::Tensor& targets, const model::Documents* docs = nullptr);
  // Whether one micro-batch's train_loss + backward(sync = true) may be captured into a CUDA graph and
  // replayed: nothing in it reads values on the host, issues collectives or keeps CPU-side bookkeeping, and
  // the gradients accumulate into the .grad tensors as given. The layouts with hooks in backward cannot.
  virtual bool capturable() const { return false; }
  // Mean loss of one micro-batch for evaluation: no gradients, the training precision.
  at::Tensor eval_loss(const at::Tensor& tokens, const at::Tensor& targets, const model::Documents* docs = nullptr);
  // Full parameters in the module and plain TP until the scope ends (collective: every rank calls it); see
  // parallel/generation_scope.h.
  GenerationScope generation_scope();
  // bf16 compute: autocast on `device` around every forward (parallelize() sets it from train.dtype).
  void set_compute_dtype(Dtype compute, c10::DeviceType device) {
    autocast_ = compute == Dtype::bf16;
    autocast_device_ = device;
  }

  // Mean next-token cross-entropy of one micro-batch over its unmasked targets, with whatever the layout
  // needs before a forward. `docs`: packed documents (null: each row one document).
  virtual at::Tensor loss(const at::Tensor& tokens, const at::Tensor& targets,
                          const model::Documents* docs = nullptr) = 0;
  // Backward of one micro-batch. `sync` false on accumulation micro-steps (no reduction where the layout can
  // skip it); after a synced backward the optimizer parameters' .grad hold the global average.
  virtual void backward(const at::Tensor& loss, bool sync) = 0;
  // A pipeline stage (parallel/pipeline/pipeline_model.h) over this layout: the forward from the embedding (where
  // this module holds it) or from `x` [B, T', D], the previous stage's output, to the loss against `targets`
  // (where it holds the head) or to the next stage's input; with the layout's pre-forward work. `docs`: the
  // micro-batch's packed documents (positions and attention restart at each; null: each row one document).
  at::Tensor stage_forward(const at::Tensor& tokens, const at::Tensor& x, const at::Tensor& targets,
                           const model::Documents* docs = nullptr);
  // Backward from a stage's output `out` with `grad`, the gradient the next stage sent (undefined: `out` is
  // the loss); `sync` as in backward(). Layouts that cannot run as a stage throw.
  virtual void stage_backward(const at::Tensor& out, const at::Tensor& grad, bool sync);
  virtual std::vector<OptimParam> optimizer_params() const = 0;
  // Global gradient norm over all parameters (shards and replicas counted once), as a device scalar; scales
  // the gradients down to `max_norm` when above it (0: no clipping).
  virtual at::Tensor clip_grad_norm(double max_norm) = 0;
  // After the optimizer step: clears gradients for the next step, marks gathered copies out of date.
  virtual void after_optimizer_step() = 0;
  // Optimizer offload: from now on the trainable parameters are held in the compute dtype (bf16 under bf16
  // compute; the fp32 master lives in the sink's host memory) and each micro-batch's gradient goes to `sink`
  // as soon as it is final, freed on the device after; clip_grad_norm() then takes the norm from the sink
  // (and never clips in place). Call once, before the first step; optimizer_params() afterwards names the
  // new tensors. False: this layout cannot, and keeps fp32 parameters and gradients on the device.
  virtual bool stream_gradients(GradientSink& sink) {
    (void)sink;
    return false;
  }
  // Optimizer offload where gradients do not stream (core/gradient_streaming.h's held way): from now on the
  // trainable parameters are held in the compute dtype and their gradients accumulate on the device in it;
  // clip_grad_norm() takes the norm there and the optimizer takes them down in chunks at the step. Call once,
  // before the first step; optimizer_params() afterwards names the new tensors. False: this layout cannot.
  virtual bool hold_gradients() { return false; }
  // Ranks each gradient is split over (FSDP's shard group; 1 where every rank holds whole gradients): a
  // streamed rank moves 1/that of the model's gradient to the host per micro-batch (core/gradient_streaming.h).
  virtual int64_t gradient_shards() const { return 1; }
  // Makes replicas identical (rank 0's values) after loading; a no-op where nothing is replicated.
  virtual void broadcast_parameters() {}
  // This rank's parameters as blocks of the global tensors (checkpoints; core/sharded_tensor.h). `local` is
  // the live tensor the optimizer updates, so optimizer state of the same shape shares the block layout.
  virtual std::vector<ShardedTensor> sharded_parameters() const = 0;
  // Every rank holds every parameter whole (plain, DDP without TP): no gathering needed to see them.
  virtual bool replicated() const { return false; }
  // "ddp over 4 ranks, 3 buckets", for the log.
  virtual std::string describe() const = 0;
  // Figures of the last forward_backward that only some layouts have, for the step log (a pipeline: its
  // measured bubble fraction, peak live activations); empty for the others.
  virtual std::vector<std::pair<std::string, double>> step_metrics() const { return {}; }

 protected:
  ParallelModel(model::Transformer net, std::shared_ptr<const TensorParallel> tp)
      : net_(std::move(net)), tp_(std::move(tp)) {}
  bool decays(const std::string& name, int64_t dim) const { return dim >= 2 && !net_->is_embedding(name); }
  // Scales `grads` by min(1, max_norm / (total + 1e-6)) on the device (no host sync).
  static void clip_to(const std::vector<at::Tensor>& grads, const at::Tensor& total, double max_norm);
  // "tp 2 × " when tensor parallel, else "": prefixes describe().
  std::string tp_prefix() const;
  // Full parameters in the module until the next step (generation runs the module directly). Under tensor
  // parallelism "full" means this rank's TP blocks.
  virtual void gather_full_parameters() {}
  // What the layout does before a forward of the module (FSDP gathers its root unit).
  virtual void before_forward() {}

  model::Transformer net_;
  std::shared_ptr<const TensorParallel> tp_;
  bool autocast_ = false;
  c10::DeviceType autocast_device_ = c10::DeviceType::CPU;
};

}  // namespace meshtrain::parallel

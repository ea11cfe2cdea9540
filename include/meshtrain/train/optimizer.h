// Optimizer: what the trainer drives each step, wherever the state lives. Two kinds, both AdamW with the
// same math and the same checkpoint names:
//   AdamW           (train/adamw.h)           state beside the parameters, ATen's fused kernel
//   OffloadedAdamW  (train/offloaded_adamw.h) fp32 master and moments in host memory, a threaded CPU update
// make_optimizer() picks one from optimizer.offload.
//
// Per step:  gradients_ready() (the backward is queued) → the layout's clip_grad_norm, with max_norm 0 when
//            scales_gradients() or steps_on_device() → where steps_on_device(): device_step(lr, clip divisor,
//            skip flag), no host read between the backward and the update; otherwise step(lr, clip coefficient)
//            once the host has read that the step is finite
// The live parameters were written (loaded, broadcast) → parameters_changed()
// Before the parameters are read outside the step loop (evaluation, a checkpoint, the end of the run) →
// settle(): an update still in flight (optimizer.offload_delay) lands first.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "meshtrain/core/config.h"

namespace meshtrain::parallel {
class ParallelModel;
}

namespace meshtrain::train {

class Optimizer {
 public:
  struct Param {
    std::string name;
    at::Tensor param;  // fp32 (the layout's parameter or shard), requires grad
    bool decay;
  };

  virtual ~Optimizer() = default;

  // Whether step() applies the clip coefficient itself: the caller then takes the norm without clipping and
  // passes min(1, max_norm / (norm + 1e-6)). Otherwise the layout clips the gradients in place.
  virtual bool scales_gradients() const { return false; }
  // Whether device_step() is available: the clip and the skip decision arrive as device tensors, so the
  // update is queued behind the backward without the host reading the norm first.
  virtual bool steps_on_device() const { return false; }
  // The step's backward has been queued and the gradients are final: an optimizer that moves them starts here.
  virtual void gradients_ready() {}
  // One update with learning rate `lr`; gradients scaled by `grad_scale` first (only where scales_gradients()).
  // Parameters without a gradient are skipped.
  virtual void step(double lr, double grad_scale = 1.0) = 0;
  // One update with learning rate `lr` decided on the device (only where steps_on_device()): each gradient
  // divided by `grad_divisor` (fp32 0-dim on the parameters' device, max(1, norm / max_norm); undefined: not
  // scaled) and, where `skip` (fp32 0-dim there, exactly 0 or 1) is 1, parameters and state left exactly as
  // they were, step counters included. Parameters without a gradient are skipped.
  virtual void device_step(double lr, const at::Tensor& grad_divisor, const at::Tensor& skip);
  // The live parameters were written from outside (a checkpoint loaded, replicas broadcast): a copy of them
  // is brought up to date.
  virtual void parameters_changed() {}
  // Completes whatever update step() left running, so the parameters and the state are the last step's.
  virtual void settle() {}

  // Takes `par`'s gradients as they are produced where the layout can stream them (parallel/gradient_sink.h);
  // the optimizer's parameters become the layout's compute-dtype ones and its own fp32 master is the master.
  virtual bool stream_from(parallel::ParallelModel& par) {
    (void)par;
    return false;
  }
  // Where the layout can hold its parameters and gradients in the compute dtype on the device
  // (ParallelModel::hold_gradients) and the optimizer can take the gradients from there in chunks at the step
  // (core/gradient_streaming.h's held way): the optimizer's parameters become the layout's compute-dtype ones
  // and its own fp32 master is the master.
  virtual bool hold_gradients_from(parallel::ParallelModel& par) {
    (void)par;
    return false;
  }
  // The fp32 master of a live parameter when this optimizer holds it apart from the parameter (checkpoints
  // save and load it; parameters_changed() then writes the parameters from it); undefined otherwise.
  virtual at::Tensor master_of(const at::Tensor& param) const {
    (void)param;
    return at::Tensor();
  }

  // "<param>.exp_avg", "<param>.exp_avg_sq", "<param>.step" → tensors (shared, not copies).
  virtual std::map<std::string, at::Tensor> state_tensors() const = 0;
  // Copies saved state in; a missing or mis-shaped tensor is a UserError naming it.
  void load_state_tensors(const std::map<std::string, at::Tensor>& saved, const std::string& prefix);
  // What the last step cost, for the step log ("host update ms", "D2H MB", ...); empty when nothing to say.
  virtual std::vector<std::pair<std::string, double>> step_metrics() const { return {}; }

  const std::vector<Param>& params() const { return params_; }

 protected:
  explicit Optimizer(std::vector<Param> params) : params_(std::move(params)) {}
  std::vector<Param> params_;
};

// device_step's clip: max(1, (norm + 1e-6) / max_norm), fp32 on norm's device — the layouts' in-place
// coefficient min(1, max_norm / (norm + 1e-6)) inverted; undefined (no clip) where max_norm is 0.
at::Tensor clip_divisor(const at::Tensor& norm, double max_norm);

// AdamW on the device, or offloaded to host memory when optimizer.offload is cpu.
std::unique_ptr<Optimizer> make_optimizer(std::vector<Optimizer::Param> params, const OptimizerConfig& cfg);
// The optimizer of `par`'s optimizer_params(); offloaded, it takes the gradients as the layout produces them
// where the layout can stream them (stream_from) and streams_gradients (core/gradient_streaming.h) says
// so at `grad_accum` for the layout's gradient shards: FSDP at any accumulation, whole gradients only at 1.
// Otherwise, without the delayed update, where the layout can hold them (hold_gradients_from): the gradients
// sum on the device in the compute dtype and go down in chunks at the step. Otherwise they sum on the device in
// fp32 and leave after the backward.
std::unique_ptr<Optimizer> make_optimizer(parallel::ParallelModel& par, const OptimizerConfig& cfg,
                                          int64_t grad_accum);

}  // namespace meshtrain::train

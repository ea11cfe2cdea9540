#include "meshtrain/train/optimizer.h"

#include <ATen/ATen.h>

#include "meshtrain/core/config_enums.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/gradient_streaming.h"
#include "meshtrain/parallel/parallel_model.h"
#include "meshtrain/train/adamw.h"
#include "meshtrain/train/offloaded_adamw.h"

namespace meshtrain::train {

std::unique_ptr<Optimizer> make_optimizer(std::vector<Optimizer::Param> params, const OptimizerConfig& cfg) {
  if (cfg.offload == OptimizerOffload::cpu)
    return std::make_unique<OffloadedAdamW>(std::move(params), cfg);
  return std::make_unique<AdamW>(std::move(params), cfg);
}

std::unique_ptr<Optimizer> make_optimizer(parallel::ParallelModel& par, const OptimizerConfig& cfg,
                                          int64_t grad_accum) {
  std::vector<Optimizer::Param> params;
  for (const auto& p : par.optimizer_params()) params.push_back({p.name, p.param, p.decay});
  auto opt = make_optimizer(std::move(params), cfg);
  // The layout itself says whether it can stream (ParallelModel::stream_gradients); the accumulation rule here.
  if (streams_gradients(par.gradient_shards(), grad_accum)) {
    opt->stream_from(par);
  } else if (cfg.offload_delay == 0) {
    opt->hold_gradients_from(par);
  }
  return opt;
}

at::Tensor clip_divisor(const at::Tensor& norm, double max_norm) {
  if (max_norm <= 0) return at::Tensor();
  return at::clamp_min((norm.to(at::kFloat) + 1e-6) / max_norm, 1.0);
}

void Optimizer::device_step(double lr, const at::Tensor& grad_divisor, const at::Tensor& skip) {
  (void)lr, (void)grad_divisor, (void)skip;
  MT_CHECK(false, "device_step: this optimizer cannot take the clip and the skip as device tensors "
                  "(steps_on_device() is false)");
}

void Optimizer::load_state_tensors(const std::map<std::string, at::Tensor>& saved, const std::string& prefix) {
  at::NoGradGuard no_grad;
  for (auto& [name, t] : state_tensors()) {
    auto it = saved.find(prefix + name);
    MT_USER_CHECK(it != saved.end(), "checkpoint: optimizer state '", prefix + name, "' is missing");
    MT_USER_CHECK(it->second.sizes() == t.sizes(), "checkpoint: optimizer state '", prefix + name, "' has shape ",
                  it->second.sizes(), ", the model needs ", t.sizes());
    t.copy_(it->second);
  }
}

}  // namespace meshtrain::train

// The checkpoint as a custom autograd function. Forward runs `run` with grad mode off (Function::apply turns
// it off), saving only the input; backward re-runs it with grad mode on under the saved RNG and autocast
// state, and differentiates the recomputed output w.r.t. the input and the parameters.
#include "meshtrain/model/activation_checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/ivalue.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "meshtrain/model/block.h"

namespace meshtrain::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Keeps the block function alive in the autograd graph until backward ran.
struct RunHolder : torch::CustomClassHolder {
  explicit RunHolder(BlockFn f) : run(std::move(f)) {}
  BlockFn run;
};

// Sets the device's autocast state for its lifetime, restoring the previous one.
class AutocastState {
 public:
  AutocastState(at::DeviceType dev, bool enabled, at::ScalarType dtype)
      : dev_(dev), prev_enabled_(at::autocast::is_autocast_enabled(dev)),
        prev_dtype_(at::autocast::get_autocast_dtype(dev)) {
    at::autocast::set_autocast_enabled(dev_, enabled);
    at::autocast::set_autocast_dtype(dev_, dtype);
  }
  ~AutocastState() {
    // The recomputation's casts of fp32 weights are cached by autocast; drop them, or the next forward
    // would reuse bf16 copies of weights from before the optimizer step.
    at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(dev_, prev_enabled_);
    at::autocast::set_autocast_dtype(dev_, prev_dtype_);
  }

 private:
  at::DeviceType dev_;
  bool prev_enabled_;
  at::ScalarType prev_dtype_;
};

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, at::TensorList params,
                               const c10::intrusive_ptr<RunHolder>& holder) {
    std::vector<at::Tensor> saved{x};
    saved.insert(saved.end(), params.begin(), params.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["run"] = c10::IValue::make_capsule(holder);
    const auto dev = x.device().type();
    ctx->saved_data["rng"] = at::globalContext().defaultGenerator(x.device()).get_state();
    ctx->saved_data["autocast"] = at::autocast::is_autocast_enabled(dev);
    ctx->saved_data["autocast_dtype"] = static_cast<int64_t>(at::autocast::get_autocast_dtype(dev));
    return {holder->run(x)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    auto holder = c10::static_intrusive_pointer_cast<RunHolder>(ctx->saved_data["run"].toCapsule());

    auto xd = x.detach().requires_grad_(x.requires_grad());
    at::Tensor out;
    {
      // Recompute with the forward's random numbers, then give the generator back its current state.
      auto gen = at::globalContext().defaultGenerator(x.device());
      auto now = gen.get_state();
      gen.set_state(ctx->saved_data["rng"].toTensor());
      AutocastState autocast(x.device().type(), ctx->saved_data["autocast"].toBool(),
                             static_cast<at::ScalarType>(ctx->saved_data["autocast_dtype"].toInt()));
      at::AutoGradMode grad_on(true);
      out = holder->run(xd);
      gen.set_state(now);
    }

    // Differentiate w.r.t. whatever needs a gradient; the rest get undefined gradients.
    std::vector<at::Tensor> inputs;
    std::vector<size_t> slot;  // position in the returned list
    if (xd.requires_grad()) inputs.push_back(xd), slot.push_back(0);
    for (size_t i = 1; i < saved.size(); ++i)
      if (saved[i].requires_grad()) inputs.push_back(saved[i]), slot.push_back(i);
    variable_list grads(saved.size() + 1);  // + the holder, which takes no gradient
    if (inputs.empty()) return grads;
    auto g = torch::autograd::grad({out}, inputs, {grad_out[0]}, /*retain_graph=*/false,
                                   /*create_graph=*/false, /*allow_unused=*/true);
    for (size_t i = 0; i < g.size(); ++i) grads[slot[i]] = g[i];
    return grads;
  }
};

}  // namespace

at::Tensor checkpointed(const BlockFn& run, const at::Tensor& x, const std::vector<at::Tensor>& params) {
  if (!at::GradMode::is_enabled()) return run(x);
  auto holder = c10::make_intrusive<RunHolder>(run);
  at::TensorList plist(params);
  return CheckpointFunction::apply(x, plist, holder)[0];
}

BlockRunner activation_checkpointing_runner() {
  return [](int64_t, BlockImpl& block, const at::Tensor& x, const BlockFn& run) {
    return checkpointed(run, x, block.parameters());
  };
}

}  // namespace meshtrain::model

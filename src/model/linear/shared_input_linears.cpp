#include "meshtrain/model/linear/shared_input_linears.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/custom_function.h>

#include "model/kernels/cuda_kernel_call.h"
#include "model/linear/linear_params.h"
#include "meshtrain/model/linear/master_linear.h"

namespace meshtrain::model {
namespace {

#if MESHTRAIN_CUDA_KERNELS
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class SharedInputLinears : public torch::autograd::Function<SharedInputLinears> {
 public:
  // x: [N, in] contiguous in the compute dtype; ws[i]: [out_i, in] fp32 contiguous; bs[i]: [out_i] fp32, or
  // every one empty ([0]) without biases; one CUDA device.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, at::TensorList ws, at::TensorList bs) {
    const c10::DeviceGuard guard(x.device());
    variable_list saved{x}, ys;
    for (size_t i = 0; i < ws.size(); ++i) {
      const auto wc = compute_copy(ws[i], x.scalar_type());  // kept for ∂x, as autocast's linear keeps it
      ys.push_back(bs[i].numel() > 0 ? at::addmm(compute_copy(bs[i], x.scalar_type()), x, wc.t())
                                     : at::mm(x, wc.t()));
      saved.push_back(wc);
    }
    ctx->save_for_backward(saved);
    ctx->saved_data["biased"] = bs[0].numel() > 0;
    return ys;
  }

  // {∂x, ∂W₀ … ∂Wₖ₋₁, ∂b₀ … ∂bₖ₋₁}, the parameters' gradients in fp32.
  static variable_list backward(AutogradContext* ctx, variable_list grad_ys) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const size_t k = grad_ys.size();
    const c10::DeviceGuard guard(x.device());
    variable_list grads(1 + 2 * k);
    at::Tensor& dx = grads[0];
    for (size_t i = 0; i < k; ++i) {
      if (!grad_ys[i].defined()) continue;  // an output nothing depended on
      const auto dy = grad_ys[i].to(x.scalar_type()).contiguous();
      if (ctx->needs_input_grad(0)) dx = dx.defined() ? dx.addmm_(dy, saved[1 + i]) : dy.mm(saved[1 + i]);
      std::tie(grads[1 + i], grads[1 + k + i]) = linear_param_grads(
          dy, x,
          {.weight = ctx->needs_input_grad(1 + i),
           .bias = ctx->needs_input_grad(1 + k + i) && ctx->saved_data["biased"].toBool()});
    }
    return grads;
  }
};
#endif

}  // namespace

bool shares_input(const std::vector<LinearImpl*>& layers, const at::Tensor& x) {
  if (layers.size() < 2) return false;
  const bool biased = layers[0]->bias.defined();
  for (const auto* l : layers)
    if (!l->can_fuse() || !l->master_grads() || !l->fused_adds() || l->bias.defined() != biased ||
        !master_linear_applies(x, l->weight, l->bias))
      return false;
  return true;
}

std::vector<at::Tensor> forward_shared_input(const std::vector<LinearImpl*>& layers, const at::Tensor& x) {
#if MESHTRAIN_CUDA_KERNELS
  if (shares_input(layers, x)) {
    std::vector<at::Tensor> ws, bs;
    for (auto* l : layers) {
      ws.push_back(l->weight.contiguous());
      bs.push_back(bias_or_none(l->bias, l->weight));
    }
    auto ys = SharedInputLinears::apply(as_rows(cuda::compute_cast(x)), at::TensorList(ws), at::TensorList(bs));
    for (size_t i = 0; i < ys.size(); ++i) ys[i] = ys[i].view(output_shape(x, ws[i].size(0)));
    return ys;
  }
#endif
  std::vector<at::Tensor> ys;
  for (auto* l : layers) ys.push_back(l->forward(x));
  return ys;
}

}  // namespace meshtrain::model

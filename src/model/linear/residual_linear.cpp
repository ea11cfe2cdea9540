#include "meshtrain/model/linear/residual_linear.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/custom_function.h>

#include "model/kernels/cuda_kernel_call.h"
#include "model/linear/linear_params.h"
#include "meshtrain/core/error.h"
#include "meshtrain/model/linear/master_linear.h"

namespace meshtrain::model {
namespace {

#if MESHTRAIN_CUDA_KERNELS
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class ResidualLinear : public torch::autograd::Function<ResidualLinear> {
 public:
  // x: [N, in] contiguous in the compute dtype; w: [out, in] and b: [out] (empty, [0], without a bias)
  // contiguous fp32; r: [N, out] contiguous fp32; one CUDA device.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                               const at::Tensor& r) {
    const c10::DeviceGuard guard(x.device());
    const auto wc = compute_copy(w, x.scalar_type());  // kept for ∂x, as master_linear keeps it
    auto y = add_product(x, wc, b, r);
    save_linear(ctx, x, wc, w, b);
    return {y};
  }

  // ∂x, ∂W, ∂b as master_linear's backward computes them from ∂y (cast to the compute dtype inside);
  // ∂r = ∂y as it is.
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto grads = linear_backward(ctx, grad_out[0], /*bias_epilogue=*/false);
    grads.push_back(ctx->needs_input_grad(3) ? grad_out[0] : at::Tensor());
    return grads;
  }
};
#endif

}  // namespace

bool residual_linear_applies(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                             const at::Tensor& r) {
  if (!master_linear_applies(x, weight, bias)) return false;
  if (r.scalar_type() != at::kFloat || r.device() != x.device() || r.dim() != x.dim()) return false;
  for (int64_t i = 0; i + 1 < x.dim(); ++i)
    if (r.size(i) != x.size(i)) return false;
  return r.size(-1) == weight.size(0);
}

at::Tensor residual_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                           const at::Tensor& r) {
  MT_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1), "residual_linear: x ", x.sizes(),
           " does not match weight ", weight.sizes());
#if MESHTRAIN_CUDA_KERNELS
  if (residual_linear_applies(x, weight, bias, r)) {
    const auto x2 = as_rows(cuda::compute_cast(x));
    return ResidualLinear::apply(x2, weight.contiguous(), bias_or_none(bias, weight), as_rows(r))[0].view(r.sizes());
  }
#endif
  return r + at::linear(x, weight, bias);
}

}  // namespace meshtrain::model

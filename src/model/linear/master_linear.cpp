#include "meshtrain/model/linear/master_linear.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/custom_function.h>

#include "model/kernels/cuda_kernel_call.h"
#include "model/linear/linear_params.h"
#include "meshtrain/core/error.h"

#if MESHTRAIN_CUDA_KERNELS
#include <ATen/autocast_mode.h>
#endif

namespace meshtrain::model {
namespace {

#if MESHTRAIN_CUDA_KERNELS
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class MasterLinear : public torch::autograd::Function<MasterLinear> {
 public:
  // x: [N, in] contiguous in the compute dtype; w: [out, in] and b: [out] contiguous, each fp32 or of x's
  // dtype, on x's device. No bias: b empty ([0]), never read — autograd records every tensor input's device
  // and dtype, which an undefined tensor does not have.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
    const c10::DeviceGuard guard(x.device());
    const auto wc = compute_copy(w, x.scalar_type());  // what autocast's cast would make, kept for ∂x
    const bool biased = b.numel() > 0;
    auto y = biased ? at::addmm(compute_copy(b, x.scalar_type()), x, wc.t()) : at::mm(x, wc.t());
    save_linear(ctx, x, wc, w, b);
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    return linear_backward(ctx, grad_out[0], /*bias_epilogue=*/false);
  }
};

bool is_master(const at::Tensor& p, const at::Tensor& x) {
  return p.scalar_type() == at::kFloat && p.device() == x.device();
}
#endif

}  // namespace

bool master_linear_applies(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
#if MESHTRAIN_CUDA_KERNELS
  if (!x.is_cuda() || x.numel() == 0 || !at::autocast::is_autocast_enabled(at::kCUDA)) return false;
  const auto dt = at::autocast::get_autocast_dtype(at::kCUDA);
  if (dt != at::kBFloat16 && dt != at::kHalf) return false;
  // x as autocast would cast it (fp32 or already the compute dtype); fp64 and integers stay at::linear's.
  if (x.scalar_type() != at::kFloat && x.scalar_type() != dt) return false;
  if (!is_master(weight, x) || (bias.defined() && !is_master(bias, x))) return false;
  const bool any_grad = x.requires_grad() || weight.requires_grad() || (bias.defined() && bias.requires_grad());
  return at::GradMode::is_enabled() && any_grad;
#else
  (void)x, (void)weight, (void)bias;
  return false;
#endif
}

at::Tensor master_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  MT_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1), "master_linear: x ", x.sizes(),
           " does not match weight ", weight.sizes());
  MT_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0)), "master_linear: bias of ",
           weight.size(0), " expected");
#if MESHTRAIN_CUDA_KERNELS
  if (master_linear_applies(x, weight, bias)) {
    // x's own cast stays autocast's (recorded by autograd: an fp32 x gets its gradient in fp32).
    const auto x2 = as_rows(cuda::compute_cast(x));
    return MasterLinear::apply(x2, weight.contiguous(), bias_or_none(bias, weight))[0].view(
        output_shape(x, weight.size(0)));
  }
#endif
  return at::linear(x, weight, bias);
}

}  // namespace meshtrain::model

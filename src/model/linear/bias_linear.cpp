#include "meshtrain/model/linear/bias_linear.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/custom_function.h>

#include "model/kernels/cuda_kernel_call.h"
#include "model/linear/linear_args.h"
#include "model/linear/linear_params.h"
#include "meshtrain/model/kernels/lt_matmul.h"

namespace meshtrain::model {
namespace {

#if MESHTRAIN_CUDA_KERNELS
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class LtBiasLinear : public torch::autograd::Function<LtBiasLinear> {
 public:
  // x: [N, in] contiguous in the compute dtype; w: [out, in], b: [out] contiguous, each fp32 (a master under
  // autocast) or of x's dtype; one CUDA device.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
    const c10::DeviceGuard guard(x.device());
    const auto wc = compute_copy(w, x.scalar_type()), bc = compute_copy(b, x.scalar_type());
    auto y = at::empty({x.size(0), w.size(0)}, x.options());
    if (!lt::run({.a = x, .b = wc, .trans_b = true, .out = y, .epilogue = lt::Epilogue::kBias, .bias = bc}))
      y = at::addmm(bc, x, wc.t());
    save_linear(ctx, x, wc, w, b);
    return {y};
  }

  // dW (in W's dtype) with the bias gradient in the same GEMM's epilogue where cuBLASLt has a kernel for it,
  // else the GEMM and the column sum.
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    return linear_backward(ctx, grad_out[0], /*bias_epilogue=*/true);
  }
};
#endif

}  // namespace

at::Tensor bias_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  check_biased_linear_args("bias_linear", x, weight, bias);
#if MESHTRAIN_CUDA_KERNELS
  if (x.is_cuda() && x.numel() > 0) {
    const auto xc = cuda::compute_cast(x);
    if (cuda::kernel_ready({xc}) && takes_param(weight, xc) && takes_param(bias, xc)) {
      // Without a backward, autocast's cached casts of the weights serve (generation repeats the forward).
      const bool grad =
          at::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad() || bias.requires_grad());
      const auto w = grad ? weight : cuda::compute_cast(weight), b = grad ? bias : cuda::compute_cast(bias);
      return LtBiasLinear::apply(as_rows(xc), w.contiguous(), b.contiguous())[0].view(output_shape(x, weight.size(0)));
    }
  }
#endif
  return at::linear(x, weight, bias);
}

}  // namespace meshtrain::model

#include "meshtrain/model/bias_linear.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/custom_function.h>

#include "cuda_kernel_call.h"
#include "linear_args.h"
#include "meshtrain/model/lt_matmul.h"

namespace meshtrain::model {
namespace {

#if MESHTRAIN_CUDA_KERNELS
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class LtBiasLinear : public torch::autograd::Function<LtBiasLinear> {
 public:
  // x: [N, in] contiguous, w: [out, in], b: [out]; one dtype, one CUDA device.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
    const c10::DeviceGuard guard(x.device());
    auto y = at::empty({x.size(0), w.size(0)}, x.options());
    if (!lt::run({.a = x, .b = w, .trans_b = true, .out = y, .epilogue = lt::Epilogue::kBias, .bias = b}))
      y = at::addmm(b, x, w.t());
    ctx->save_for_backward({x, w});
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1];
    const c10::DeviceGuard guard(x.device());
    const auto dy = grad_out[0].to(x.scalar_type()).contiguous();  // [N, out]
    auto dx = ctx->needs_input_grad(0) ? dy.mm(w) : at::Tensor();  // [N, in]
    at::Tensor dw, db;
    if (ctx->needs_input_grad(1) && ctx->needs_input_grad(2)) {
      // dW = ∂yᵀ·x with the bias gradient Σ_rows ∂y reduced from the same reads of ∂y.
      dw = at::empty_like(w, at::MemoryFormat::Contiguous);
      db = at::empty({w.size(0)}, w.options());
      if (!lt::run({.a = dy, .trans_a = true, .b = x, .out = dw, .epilogue = lt::Epilogue::kBGradB, .bias = db})) {
        dw = dy.t().mm(x);
        db = dy.sum(0);
      }
    } else {
      if (ctx->needs_input_grad(1)) dw = dy.t().mm(x);
      if (ctx->needs_input_grad(2)) db = dy.sum(0);
    }
    return {dx, dw, db};
  }
};
#endif

}  // namespace

at::Tensor bias_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  check_biased_linear_args("bias_linear", x, weight, bias);
#if MESHTRAIN_CUDA_KERNELS
  if (x.is_cuda() && x.numel() > 0) {
    const auto xc = cuda::compute_cast(x), wc = cuda::compute_cast(weight), bc = cuda::compute_cast(bias);
    if (cuda::kernel_ready({xc, wc, bc})) {
      auto out_shape = x.sizes().vec();
      out_shape.back() = weight.size(0);
      const auto x2 = xc.reshape({-1, x.size(-1)}).contiguous();
      return LtBiasLinear::apply(x2, wc.contiguous(), bc.contiguous())[0].view(out_shape);
    }
  }
#endif
  return at::linear(x, weight, bias);
}

}  // namespace meshtrain::model

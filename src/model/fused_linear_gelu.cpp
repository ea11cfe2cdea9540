#include "meshtrain/model/fused_linear_gelu.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/custom_function.h>

#include "cuda_kernel_call.h"
#include "linear_args.h"

#if MESHTRAIN_CUDA_KERNELS
#include "fused_gelu_cuda.h"
#endif

namespace meshtrain::model {
namespace {

#if MESHTRAIN_CUDA_KERNELS
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class FusedLinearGelu : public torch::autograd::Function<FusedLinearGelu> {
 public:
  // x: [N, in], w: [out, in], b: [out], one dtype (fp32 or bf16), one device.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
    const c10::DeviceGuard guard(x.device());
    auto pre = at::addmm(b, x, w.t());  // [N, out]; the bias added in the matmul's epilogue
    ctx->save_for_backward({x, w, pre});
    return {at::gelu(pre, "tanh")};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1], &pre = saved[2];
    const c10::DeviceGuard guard(pre.device());
    const auto dy = grad_out[0].to(pre.scalar_type()).contiguous();
    const int64_t rows = pre.size(0), cols = pre.size(1);
    auto dpre = at::empty_like(pre, at::MemoryFormat::Contiguous);
    auto part = at::empty({cuda::gelu_bias_chunks(rows), cols}, pre.options().dtype(at::kFloat));
    cuda::check_launch(cuda::gelu_bias_backward(cuda::dtype_of(pre), dy.const_data_ptr(), pre.contiguous().const_data_ptr(),
                                                dpre.mutable_data_ptr(), part.mutable_data_ptr<float>(), rows, cols,
                                                cuda::stream_of(pre)),
                       "fused GELU + bias backward");
    // The bias gradient's second stage: the chunks' partial column sums added up.
    auto db = part.sum(0).to(pre.scalar_type());
    auto dx = ctx->needs_input_grad(0) ? dpre.mm(w) : at::Tensor();      // [N, in]
    auto dw = ctx->needs_input_grad(1) ? dpre.t().mm(x) : at::Tensor();  // [out, in]
    return {dx, dw, db};
  }
};

#endif

}  // namespace

at::Tensor fused_linear_gelu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  check_biased_linear_args("fused_linear_gelu", x, weight, bias);
#if MESHTRAIN_CUDA_KERNELS
  if (x.is_cuda() && x.numel() > 0) {
    const auto xc = cuda::compute_cast(x), wc = cuda::compute_cast(weight), bc = cuda::compute_cast(bias);
    if (cuda::kernel_ready({xc, wc, bc})) {
      auto out_shape = x.sizes().vec();
      out_shape.back() = weight.size(0);
      const auto x2 = xc.reshape({-1, x.size(-1)});
      const bool grad = at::GradMode::is_enabled() && (xc.requires_grad() || wc.requires_grad() || bc.requires_grad());
      // Without gradients nothing needs the pre-activation: bias and GELU both in the matmul's epilogue.
      auto y = grad ? FusedLinearGelu::apply(x2, wc, bc)[0]
                    : at::_addmm_activation(bc, x2, wc.t(), 1, 1, /*use_gelu=*/true);
      return y.view(out_shape);
    }
  }
#endif
  return at::gelu(at::linear(x, weight, bias), "tanh");
}

}  // namespace meshtrain::model

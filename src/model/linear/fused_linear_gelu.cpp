#include "meshtrain/model/linear/fused_linear_gelu.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/custom_function.h>

#include "model/kernels/cuda_kernel_call.h"
#include "model/linear/linear_args.h"
#include "model/linear/linear_params.h"
#include "meshtrain/model/kernels/column_sum.h"

#if MESHTRAIN_CUDA_KERNELS
#include "model/kernels/fused_gelu_cuda.h"
#endif

namespace meshtrain::model {
namespace {

#if MESHTRAIN_CUDA_KERNELS
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class FusedLinearGelu : public torch::autograd::Function<FusedLinearGelu> {
 public:
  // x: [N, in] contiguous in the compute dtype (fp32 or bf16); w: [out, in], b: [out], each fp32 (a master
  // under autocast) or of x's dtype; one device.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
    const c10::DeviceGuard guard(x.device());
    const auto wc = compute_copy(w, x.scalar_type());
    auto pre = at::addmm(compute_copy(b, x.scalar_type()), x, wc.t());  // [N, out]; the bias in the epilogue
    ctx->save_for_backward({x, wc, pre});
    ctx->saved_data["w_dtype"] = static_cast<int64_t>(w.scalar_type());
    ctx->saved_data["b_dtype"] = static_cast<int64_t>(b.scalar_type());
    return {at::gelu(pre, "tanh")};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &wc = saved[1], &pre = saved[2];
    const c10::DeviceGuard guard(pre.device());
    const auto dy = grad_out[0].to(pre.scalar_type()).contiguous();
    const int64_t rows = pre.size(0), cols = pre.size(1);
    auto dpre = at::empty_like(pre, at::MemoryFormat::Contiguous);
    auto part = at::empty({cuda::gelu_bias_chunks(rows), cols}, pre.options().dtype(at::kFloat));
    cuda::check_launch(cuda::gelu_bias_backward(cuda::dtype_of(pre), dy.const_data_ptr(), pre.contiguous().const_data_ptr(),
                                                dpre.mutable_data_ptr(), part.mutable_data_ptr<float>(), rows, cols,
                                                cuda::stream_of(pre)),
                       "fused GELU + bias backward");
    // The bias gradient's second stage: the chunks' partial column sums added up, stored in b's dtype.
    const auto b_dtype = static_cast<at::ScalarType>(ctx->saved_data["b_dtype"].toInt());
    auto db = ctx->needs_input_grad(2) ? column_sum(part, b_dtype) : at::Tensor();
    auto dx = ctx->needs_input_grad(0) ? dpre.mm(wc) : at::Tensor();  // [N, in]
    const auto w_dtype = static_cast<at::ScalarType>(ctx->saved_data["w_dtype"].toInt());
    auto dw = ctx->needs_input_grad(1) ? weight_grad(dpre, x, w_dtype) : at::Tensor();  // [out, in], W's dtype
    return {dx, dw, db};
  }
};

#endif

}  // namespace

at::Tensor fused_linear_gelu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  check_biased_linear_args("fused_linear_gelu", x, weight, bias);
#if MESHTRAIN_CUDA_KERNELS
  if (x.is_cuda() && x.numel() > 0) {
    const auto xc = cuda::compute_cast(x);
    if (cuda::kernel_ready({xc}) && takes_param(weight, xc) && takes_param(bias, xc)) {
      const auto x2 = as_rows(xc);
      const bool grad =
          at::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad() || bias.requires_grad());
      // Without gradients nothing needs the pre-activation: bias and GELU both in the matmul's epilogue, on
      // autocast's cached casts of the weights.
      auto y = grad ? FusedLinearGelu::apply(x2, weight.contiguous(), bias.contiguous())[0]
                    : at::_addmm_activation(cuda::compute_cast(bias), x2, cuda::compute_cast(weight).t(), 1, 1,
                                            /*use_gelu=*/true);
      return y.view(output_shape(x, weight.size(0)));
    }
  }
#endif
  return at::gelu(at::linear(x, weight, bias), "tanh");
}

}  // namespace meshtrain::model

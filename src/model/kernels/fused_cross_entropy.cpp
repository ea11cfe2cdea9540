#include "meshtrain/model/kernels/fused_cross_entropy.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/custom_function.h>

#include "model/kernels/cuda_kernel_call.h"
#include "meshtrain/core/error.h"

#if MESHTRAIN_CUDA_KERNELS
#include "model/kernels/fused_cross_entropy_cuda.h"
#endif

namespace meshtrain::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

#if MESHTRAIN_CUDA_KERNELS
class FusedCrossEntropy : public torch::autograd::Function<FusedCrossEntropy> {
 public:
  // logits: [N, width] with unit column stride, the first V of them classes; the per-row results stay for
  // backward: lse (fp32 [N]) and the valid-row count, both on the device (no host sync anywhere).
  static variable_list forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& targets,
                               int64_t ignore_index, bool in_place, int64_t V) {
    const c10::DeviceGuard guard(logits.device());
    const int64_t N = logits.size(0);
    const auto f32 = logits.options().dtype(at::kFloat);
    auto rows = at::empty({N}, f32), lse = at::empty({N}, f32);
    cuda::check_launch(cuda::cross_entropy_forward(cuda::dtype_of(logits), logits.const_data_ptr(), N, V,
                                                   logits.stride(0), targets.const_data_ptr<int64_t>(),
                                                   ignore_index, rows.mutable_data_ptr<float>(),
                                                   lse.mutable_data_ptr<float>(), cuda::stream_of(logits)),
                       "fused cross-entropy forward");
    auto n_valid = targets.ne(ignore_index).sum().to(at::kFloat);
    ctx->save_for_backward({logits, targets, lse, n_valid});
    ctx->saved_data["ignore_index"] = ignore_index;
    ctx->saved_data["in_place"] = in_place;
    ctx->saved_data["classes"] = V;
    return {rows.sum() / n_valid};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const bool in_place = ctx->saved_data["in_place"].toBool();
    MT_CHECK(!in_place || ctx->saved_data.find("done") == ctx->saved_data.end(),
             "fused_cross_entropy(in_place=true): backward ran twice, but the first overwrote the logits");
    ctx->saved_data["done"] = true;
    auto saved = ctx->get_saved_variables();
    const at::Tensor &logits = saved[0], &targets = saved[1], &lse = saved[2], &n_valid = saved[3];
    const c10::DeviceGuard guard(logits.device());
    const auto go = grad_out[0].to(at::kFloat).contiguous();
    at::Tensor grad = in_place ? logits : at::empty_like(logits, at::MemoryFormat::Contiguous);
    const int64_t N = logits.size(0), V = ctx->saved_data["classes"].toInt();
    if (V < logits.size(1)) grad.narrow(1, V, logits.size(1) - V).zero_();  // padding: no gradient
    cuda::check_launch(cuda::cross_entropy_backward(
                           cuda::dtype_of(logits), logits.const_data_ptr(), logits.stride(0), grad.mutable_data_ptr(),
                           grad.stride(0), N, V, targets.const_data_ptr<int64_t>(),
                           ctx->saved_data["ignore_index"].toInt(), lse.const_data_ptr<float>(),
                           go.const_data_ptr<float>(), n_valid.const_data_ptr<float>(), cuda::stream_of(logits)),
                       "fused cross-entropy backward");
    return {grad.detach(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};
#endif

}  // namespace

at::Tensor fused_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index,
                               bool in_place, int64_t classes) {
  MT_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0),
           "fused_cross_entropy: logits [N, V], targets [N]; got ", logits.sizes(), ", ", targets.sizes());
  if (classes == 0) classes = logits.size(1);
  MT_CHECK(0 < classes && classes <= logits.size(1), "fused_cross_entropy: classes ", classes, " outside (0, ",
           logits.size(1), "]");
#if MESHTRAIN_CUDA_KERNELS
  if (cuda::kernel_ready({logits}) && targets.device() == logits.device() && logits.size(1) > 0) {
    // The kernels need unit column stride and int64 targets; a copy made here is ours to overwrite.
    const bool unit = logits.stride(1) == 1;
    const auto x = unit ? logits : logits.contiguous();
    return FusedCrossEntropy::apply(x, targets.to(at::kLong).contiguous(), ignore_index, in_place, classes)[0];
  }
#endif
  (void)in_place;
  const auto x = classes == logits.size(1) ? logits : logits.narrow(1, 0, classes);
  return at::cross_entropy_loss(x.to(at::kFloat), targets, {}, at::Reduction::Mean, ignore_index);
}

}  // namespace meshtrain::model

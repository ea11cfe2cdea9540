#include "meshtrain/model/kernels/fused_adamw.h"

#include <c10/core/DeviceGuard.h>

#include "model/kernels/cuda_kernel_call.h"

#if MESHTRAIN_CUDA_KERNELS
#include "model/kernels/fused_adamw_cuda.h"
#endif

namespace meshtrain::model {
namespace {

#if MESHTRAIN_CUDA_KERNELS
// A contiguous fp32 CUDA tensor on `device` (a scalar where `numel` is 1).
bool fp32_on(const at::Tensor& t, const c10::Device& device, int64_t numel) {
  return t.defined() && t.device() == device && t.scalar_type() == at::kFloat && t.is_contiguous() &&
         t.numel() == numel;
}

bool kernel_takes(const AdamWTensors& t, const at::Tensor& grad_divisor, const at::Tensor& skip) {
  const size_t n = t.params.size();
  if (n == 0 || t.grads.size() != n || t.exp_avgs.size() != n || t.exp_avg_sqs.size() != n || t.steps.size() != n)
    return false;
  const at::Tensor& first = t.params[0];
  if (!first.is_cuda()) return false;
  const c10::Device device = first.device();
  for (size_t i = 0; i < n; ++i) {
    const int64_t numel = t.params[i].numel();
    if (!fp32_on(t.params[i], device, numel) || !fp32_on(t.grads[i], device, numel) ||
        !fp32_on(t.exp_avgs[i], device, numel) || !fp32_on(t.exp_avg_sqs[i], device, numel) ||
        !fp32_on(t.steps[i], device, 1))
      return false;
  }
  return (!grad_divisor.defined() || fp32_on(grad_divisor, device, 1)) && (!skip.defined() || fp32_on(skip, device, 1));
}
#endif

}  // namespace

bool fused_adamw(const AdamWTensors& t, const AdamWSettings& s, const at::Tensor& grad_divisor,
                 const at::Tensor& skip) {
#if MESHTRAIN_CUDA_KERNELS
  if (!kernel_takes(t, grad_divisor, skip)) return false;
  const c10::DeviceGuard guard(t.params[0].device());
  // Rounded to fp32 as at::_fused_adamw_ rounds its double arguments for fp32 parameters.
  const cuda::AdamWConstants c{.lr = static_cast<float>(s.lr),
                               .beta1 = static_cast<float>(s.beta1),
                               .beta2 = static_cast<float>(s.beta2),
                               .weight_decay = static_cast<float>(s.weight_decay),
                               .eps = static_cast<float>(s.eps),
                               .grad_divisor = grad_divisor.defined() ? grad_divisor.const_data_ptr<float>() : nullptr,
                               .skip = skip.defined() ? skip.const_data_ptr<float>() : nullptr};
  void* stream = cuda::stream_of(t.params[0]);
  for (size_t i = 0; i < t.params.size(); ++i)
    cuda::check_launch(
        cuda::adamw_update(t.params[i].mutable_data_ptr<float>(), t.grads[i].const_data_ptr<float>(),
                           t.exp_avgs[i].mutable_data_ptr<float>(), t.exp_avg_sqs[i].mutable_data_ptr<float>(),
                           t.steps[i].const_data_ptr<float>(), t.params[i].numel(), c, stream),
        "fused AdamW");
  // Written in place as ATen's in-place ops write: their version counters move, so a cache keyed on them (an
  // FP8 weight's cast) sees the change.
  for (const auto* list : {&t.params, &t.exp_avgs, &t.exp_avg_sqs})
    for (const at::Tensor& x : *list) x.unsafeGetTensorImpl()->bump_version();
  return true;
#else
  (void)t;
  (void)s;
  (void)grad_divisor;
  (void)skip;
  return false;
#endif
}

}  // namespace meshtrain::model

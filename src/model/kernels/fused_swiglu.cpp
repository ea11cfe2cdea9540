#include "meshtrain/model/kernels/fused_swiglu.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/custom_function.h>

#include <optional>

#include "model/kernels/cuda_kernel_call.h"
#include "meshtrain/core/error.h"

#if MESHTRAIN_CUDA_KERNELS
#include "model/kernels/fused_swiglu_cuda.h"
#endif

namespace meshtrain::model {
namespace {

#if MESHTRAIN_CUDA_KERNELS
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// gate and up as `rows` rows of `width` contiguous elements, rows `stride` apart, the same layout for both: a
// contiguous tensor, or the two halves of a wider tensor's last dim (the inference path's fused gate and up GEMM,
// model/fused_projections.h), which the kernel then reads in place instead of copying each half.
struct SwigluRows {
  int64_t rows = 1, width = 0, stride = 0;
};
std::optional<SwigluRows> swiglu_rows(const at::Tensor& gate, const at::Tensor& up) {
  if (gate.is_contiguous() && up.is_contiguous()) return SwigluRows{1, gate.numel(), gate.numel()};
  if (gate.dim() == 0 || gate.strides() != up.strides() || gate.stride(-1) != 1) return std::nullopt;
  SwigluRows r{1, gate.size(-1), gate.size(-1)};
  int64_t next = -1;  // the stride the next outer dim must have to continue the rows
  for (int64_t d = gate.dim() - 2; d >= 0; --d) {
    if (gate.size(d) == 1) continue;
    if (next < 0) {
      r.stride = gate.stride(d);
    } else if (gate.stride(d) != next) {
      return std::nullopt;
    }
    r.rows *= gate.size(d);
    next = gate.stride(d) * gate.size(d);
  }
  if (r.stride < r.width) return std::nullopt;
  return r;
}

class FusedSwiglu : public torch::autograd::Function<FusedSwiglu> {
 public:
  // gate, up: same shape, dtype and swiglu_rows layout.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up) {
    const c10::DeviceGuard guard(gate.device());
    const SwigluRows r = *swiglu_rows(gate, up);
    auto y = at::empty(gate.sizes(), gate.options());
    cuda::check_launch(cuda::swiglu_forward(cuda::dtype_of(gate), gate.const_data_ptr(), up.const_data_ptr(),
                                            y.mutable_data_ptr(), r.rows, r.width, r.stride, cuda::stream_of(gate)),
                       "fused SwiGLU forward");
    ctx->save_for_backward({gate, up});
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor gate = saved[0].contiguous(), up = saved[1].contiguous();  // the backward kernel's layout
    const c10::DeviceGuard guard(gate.device());
    const auto dy = grad_out[0].to(gate.scalar_type()).contiguous();
    auto dgate = at::empty_like(gate), dup = at::empty_like(up);
    cuda::check_launch(cuda::swiglu_backward(cuda::dtype_of(gate), dy.const_data_ptr(), gate.const_data_ptr(),
                                             up.const_data_ptr(), dgate.mutable_data_ptr(), dup.mutable_data_ptr(),
                                             gate.numel(), cuda::stream_of(gate)),
                       "fused SwiGLU backward");
    return {dgate, dup};
  }
};
#endif

}  // namespace

at::Tensor fused_swiglu(const at::Tensor& gate, const at::Tensor& up) {
  MT_CHECK(gate.sizes() == up.sizes(), "fused_swiglu: gate and up differ in shape: ", gate.sizes(), " vs ",
           up.sizes());
#if MESHTRAIN_CUDA_KERNELS
  if (cuda::kernel_ready({gate, up})) {
    if (swiglu_rows(gate, up)) return FusedSwiglu::apply(gate, up)[0];
    return FusedSwiglu::apply(gate.contiguous(), up.contiguous())[0];
  }
#endif
  return at::silu(gate) * up;
}

}  // namespace meshtrain::model

#include "meshtrain/model/kernels/fused_swiglu.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/custom_function.h>

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

class FusedSwiglu : public torch::autograd::Function<FusedSwiglu> {
 public:
  // gate, up: contiguous, same shape and dtype.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up) {
    const c10::DeviceGuard guard(gate.device());
    auto y = at::empty_like(gate);
    cuda::check_launch(cuda::swiglu_forward(cuda::dtype_of(gate), gate.const_data_ptr(), up.const_data_ptr(),
                                            y.mutable_data_ptr(), gate.numel(), cuda::stream_of(gate)),
                       "fused SwiGLU forward");
    ctx->save_for_backward({gate, up});
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &gate = saved[0], &up = saved[1];
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
  if (cuda::kernel_ready({gate, up})) return FusedSwiglu::apply(gate.contiguous(), up.contiguous())[0];
#endif
  return at::silu(gate) * up;
}

}  // namespace meshtrain::model

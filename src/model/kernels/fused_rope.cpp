#include "meshtrain/model/kernels/fused_rope.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/custom_function.h>

#include "model/kernels/cuda_kernel_call.h"
#include "meshtrain/core/error.h"
#include "meshtrain/model/rotary.h"

#if MESHTRAIN_CUDA_KERNELS
#include "model/kernels/fused_rope_cuda.h"
#endif

namespace meshtrain::model {
namespace {

#if MESHTRAIN_CUDA_KERNELS
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// in: [B, H, T, hd] with unit last stride; out gets in's strides where they are dense, else contiguous.
at::Tensor rotate(const at::Tensor& in, const at::Tensor& cos, const at::Tensor& sin, bool backward) {
  const c10::DeviceGuard guard(in.device());
  auto out = at::empty_like(in);
  if (out.stride(3) != 1) out = at::empty(in.sizes(), in.options());
  cuda::RopeShape s{in.size(0), in.size(1), in.size(2), in.size(3), {in.stride(0), in.stride(1), in.stride(2)},
                    {out.stride(0), out.stride(1), out.stride(2)}};
  cuda::check_launch(cuda::rope(cuda::dtype_of(in), backward, in.const_data_ptr(), out.mutable_data_ptr(), s,
                                cos.const_data_ptr<float>(), sin.const_data_ptr<float>(), cuda::stream_of(in)),
                     backward ? "fused RoPE backward" : "fused RoPE forward");
  return out;
}

at::Tensor unit_last_stride(const at::Tensor& t) { return t.stride(3) == 1 ? t : t.contiguous(); }

class FusedRope : public torch::autograd::Function<FusedRope> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos,
                               const at::Tensor& sin) {
    ctx->save_for_backward({cos, sin});  // tables only: the backward is a rotation of ∂y, x is not needed
    return {rotate(x, cos, sin, false)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    return {rotate(unit_last_stride(grad_out[0]), saved[0], saved[1], true), at::Tensor(), at::Tensor()};
  }
};
#endif

}  // namespace

at::Tensor fused_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  MT_CHECK(x.dim() == 4 && cos.dim() == 2 && cos.sizes() == sin.sizes() && cos.size(0) == x.size(2) &&
               cos.size(1) == x.size(3) && x.size(3) % 2 == 0,
           "fused_rope: x [B, H, T, hd] (hd even), cos/sin [T, hd]; got ", x.sizes(), ", ", cos.sizes(), ", ",
           sin.sizes());
#if MESHTRAIN_CUDA_KERNELS
  if (cuda::kernel_ready({x})) {
    auto c = cos.to(x.device(), at::kFloat).contiguous();
    auto s = sin.to(x.device(), at::kFloat).contiguous();
    return FusedRope::apply(unit_last_stride(x), c, s)[0];
  }
#endif
  return apply_rope(x, cos, sin);
}

}  // namespace meshtrain::model

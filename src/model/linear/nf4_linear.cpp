// nf4_linear; see nf4_linear.h.
#include "meshtrain/model/linear/nf4_linear.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include "meshtrain/core/error.h"
#include "meshtrain/model/nf4_tensor.h"

namespace meshtrain::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The NF4 tensor's parts in the context (its tensors shared, not copied), and back.
void save_nf4(AutogradContext* ctx, const Nf4Tensor& w) {
  ctx->saved_data["codes"] = w.codes;
  ctx->saved_data["absmax_codes"] = w.absmax_codes;
  ctx->saved_data["absmax_scales"] = w.absmax_scales;
  ctx->saved_data["absmax_map"] = w.absmax_map;
  ctx->saved_data["absmax_offset"] = static_cast<double>(w.absmax_offset);
  ctx->saved_data["shape"] = w.shape;
}

Nf4Tensor saved_nf4(AutogradContext* ctx) {
  Nf4Tensor w;
  w.codes = ctx->saved_data["codes"].toTensor();
  w.absmax_codes = ctx->saved_data["absmax_codes"].toTensor();
  w.absmax_scales = ctx->saved_data["absmax_scales"].toTensor();
  w.absmax_map = ctx->saved_data["absmax_map"].toTensor();
  w.absmax_offset = static_cast<float>(ctx->saved_data["absmax_offset"].toDouble());
  w.shape = ctx->saved_data["shape"].toIntVector();
  return w;
}

class Nf4Linear : public torch::autograd::Function<Nf4Linear> {
 public:
  // x in the compute dtype. The bias (frozen) is added outside: an undefined tensor input has no metadata
  // for autograd to record.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const Nf4Tensor& w) {
    save_nf4(ctx, w);
    return at::linear(x, w.dequantize(x.scalar_type()));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const at::Tensor& dy = grad_out[0];  // [..., out]
    const Nf4Tensor w = saved_nf4(ctx);
    return {at::matmul(dy, w.dequantize(dy.scalar_type())), at::Tensor()};
  }
};

}  // namespace

at::Tensor nf4_linear(const at::Tensor& x, const Nf4Tensor& w, const at::Tensor& bias) {
  MT_CHECK(w.shape.size() == 2 && x.dim() >= 1 && x.size(-1) == w.shape[1], "nf4_linear: x ", x.sizes(),
           " does not match an NF4 weight of ", at::IntArrayRef(w.shape));
  MT_CHECK(!bias.defined() || !bias.requires_grad(), "nf4_linear: the bias of an NF4 weight is frozen too");
  MT_CHECK(x.device() == w.device(), "nf4_linear: x on ", x.device(), ", the NF4 weight on ", w.device());
  // The dtype at::linear would compute in: autocast's for this device type where it is on and x is a float
  // it casts; x's own otherwise. The cast is recorded by autograd, so an fp32 x gets an fp32 gradient.
  at::Tensor xc = x;
  const auto dev = x.device().type();
  if (at::autocast::is_autocast_enabled(dev) && x.is_floating_point()) {
    const auto dt = at::autocast::get_autocast_dtype(dev);
    if (x.scalar_type() != dt) xc = x.to(dt);
  }
  auto y = Nf4Linear::apply(xc, w);
  return bias.defined() ? y + bias.to(y.scalar_type()) : y;
}

}  // namespace meshtrain::model

#include "model/linear/linear_params.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/core/DeviceGuard.h>

#include "meshtrain/model/kernels/column_sum.h"
#include "meshtrain/model/kernels/lt_matmul.h"

namespace meshtrain::model {

bool takes_param(const at::Tensor& p, const at::Tensor& xc) {
  if (!p.defined()) return true;
  if (p.device() != xc.device()) return false;
  if (p.scalar_type() == xc.scalar_type()) return true;
  return p.scalar_type() == at::kFloat && xc.is_cuda() && at::autocast::is_autocast_enabled(at::kCUDA) &&
         at::autocast::get_autocast_dtype(at::kCUDA) == xc.scalar_type();
}

std::vector<int64_t> output_shape(const at::Tensor& x, int64_t out) {
  auto shape = x.sizes().vec();
  shape.back() = out;
  return shape;
}

at::Tensor bias_or_none(const at::Tensor& b, const at::Tensor& w) {
  return b.defined() ? b.contiguous() : at::empty({0}, w.options());
}

at::Tensor compute_copy(const at::Tensor& p, at::ScalarType dt) { return p.defined() ? p.to(dt) : p; }

at::Tensor add_product(const at::Tensor& x, const at::Tensor& wc, const at::Tensor& b, const at::Tensor& r) {
  auto y = at::empty_like(r);
  if (b.numel() == 0) {
    if (lt::run({.a = x, .b = wc, .trans_b = true, .out = y, .c = r})) return y;
  } else {
    if (lt::run({.a = x, .b = wc, .trans_b = true, .out = y, .epilogue = lt::Epilogue::kBias, .bias = b, .c = r}))
      return y;
    y = r + b;  // no bias epilogue for this output: r + b first, the product added onto it
    if (lt::run({.a = x, .b = wc, .trans_b = true, .out = y, .c = y})) return y;
  }
  const auto product = at::mm(x, wc.t()).to(r.scalar_type());  // no cuBLASLt kernel: the composite
  return b.numel() > 0 ? r + product + b : r + product;
}

at::Tensor weight_grad(const at::Tensor& dy, const at::Tensor& x, at::ScalarType dtype) {
  auto dw = at::empty({dy.size(1), x.size(1)}, dy.options().dtype(dtype));
  if (lt::run({.a = dy, .trans_a = true, .b = x, .out = dw})) return dw;
  return dy.t().mm(x).to(dtype);  // no cuBLASLt kernel (or an empty reduction): the GEMM in ∂y's dtype, then a cast
}

at::Tensor bias_grad(const at::Tensor& dy, at::ScalarType dtype) { return column_sum(dy, dtype); }

std::pair<at::Tensor, at::Tensor> linear_param_grads(const at::Tensor& dy, const at::Tensor& x,
                                                     const ParamGrads& want) {
  if (want.weight && want.bias && want.bias_epilogue && want.weight_dtype == want.bias_dtype) {
    // ∂W = ∂yᵀ·x with Σ_rows ∂y reduced from the same reads of ∂y (lt_matmul.h: BGRADB).
    auto dw = at::empty({dy.size(1), x.size(1)}, dy.options().dtype(want.weight_dtype));
    auto db = at::empty({dy.size(1)}, dw.options());
    if (lt::run({.a = dy, .trans_a = true, .b = x, .out = dw, .epilogue = lt::Epilogue::kBGradB, .bias = db}))
      return {dw, db};
  }
  return {want.weight ? weight_grad(dy, x, want.weight_dtype) : at::Tensor(),
          want.bias ? bias_grad(dy, want.bias_dtype) : at::Tensor()};
}

void save_linear(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& wc,
                 const at::Tensor& w, const at::Tensor& b) {
  ctx->save_for_backward({x, wc});
  ctx->saved_data["w_dtype"] = static_cast<int64_t>(w.scalar_type());
  ctx->saved_data["b_dtype"] = static_cast<int64_t>(b.scalar_type());
  ctx->saved_data["biased"] = b.numel() > 0;
}

torch::autograd::variable_list linear_backward(torch::autograd::AutogradContext* ctx, const at::Tensor& grad_y,
                                               bool bias_epilogue) {
  auto saved = ctx->get_saved_variables();
  const at::Tensor &x = saved[0], &wc = saved[1];
  const c10::DeviceGuard guard(x.device());
  const auto dy = grad_y.to(x.scalar_type()).contiguous();         // [N, out]
  auto dx = ctx->needs_input_grad(0) ? dy.mm(wc) : at::Tensor();  // [N, in]
  auto [dw, db] = linear_param_grads(
      dy, x,
      {.weight = ctx->needs_input_grad(1),
       .bias = ctx->needs_input_grad(2) && ctx->saved_data["biased"].toBool(),
       .weight_dtype = static_cast<at::ScalarType>(ctx->saved_data["w_dtype"].toInt()),
       .bias_dtype = static_cast<at::ScalarType>(ctx->saved_data["b_dtype"].toInt()),
       .bias_epilogue = bias_epilogue});
  return {dx, dw, db};
}

}  // namespace meshtrain::model

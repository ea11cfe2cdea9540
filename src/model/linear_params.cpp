#include "linear_params.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>

#include "meshtrain/model/column_sum.h"
#include "meshtrain/model/lt_matmul.h"

namespace meshtrain::model {

bool takes_param(const at::Tensor& p, const at::Tensor& xc) {
  if (!p.defined()) return true;
  if (p.device() != xc.device()) return false;
  if (p.scalar_type() == xc.scalar_type()) return true;
  return p.scalar_type() == at::kFloat && xc.is_cuda() && at::autocast::is_autocast_enabled(at::kCUDA) &&
         at::autocast::get_autocast_dtype(at::kCUDA) == xc.scalar_type();
}

at::Tensor compute_copy(const at::Tensor& p, at::ScalarType dt) { return p.defined() ? p.to(dt) : p; }

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

}  // namespace meshtrain::model

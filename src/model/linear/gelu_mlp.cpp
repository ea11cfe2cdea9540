#include "meshtrain/model/linear/gelu_mlp.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/custom_function.h>

#include "model/kernels/cuda_kernel_call.h"
#include "model/linear/linear_params.h"
#include "meshtrain/core/error.h"
#include "meshtrain/model/kernels/lt_matmul.h"

namespace meshtrain::model {
namespace {

#if MESHTRAIN_CUDA_KERNELS
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using lt::Epilogue;

// fc: h = gelu(pre), pre = x·W_fcᵀ + b_fc, both [N, F].
std::pair<at::Tensor, at::Tensor> fc_forward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  auto pre = at::empty({x.size(0), w.size(0)}, x.options()), h = at::empty_like(pre);
  if (lt::run({.a = x, .b = w, .trans_b = true, .out = h, .epilogue = Epilogue::kGeluAuxBias, .bias = b, .aux = pre}))
    return {h, pre};
  pre = at::addmm(b, x, w.t());
  return {at::gelu(pre, "tanh"), pre};
}

// out = a·b(ᵀ) + bias, with the bias in the epilogue.
at::Tensor biased_mm(const at::Tensor& a, const at::Tensor& w, const at::Tensor& b) {
  auto y = at::empty({a.size(0), w.size(0)}, a.options());
  if (lt::run({.a = a, .b = w, .trans_b = true, .out = y, .epilogue = Epilogue::kBias, .bias = b})) return y;
  return at::addmm(b, a, w.t());
}

// ∂pre = (∂y·W_proj) ⊙ gelu'(pre) from one GEMM where cuBLASLt can (DGELU), and ∂b_fc = Σ_rows ∂pre in
// `b_dtype` from the column sum. DGELU_BGRAD, the bias gradient in the same epilogue, ran at 2.3-2.5× the time
// of DGELU + the column sum on an H200 (fused_kernels_bench, mlp_gelu_dgrad).
std::pair<at::Tensor, at::Tensor> gelu_input_grad(const at::Tensor& dy, const at::Tensor& w_proj,
                                                  const at::Tensor& pre, at::ScalarType b_dtype) {
  auto dpre = at::empty_like(pre);
  if (!lt::run({.a = dy, .b = w_proj, .out = dpre, .epilogue = Epilogue::kDGelu, .aux = pre}))
    dpre = at::gelu_backward(dy.mm(w_proj), pre, "tanh");
  return {dpre, bias_grad(dpre, b_dtype)};
}

// The parameters' own dtypes, in forward's argument order (w_fc, b_fc, w_proj, b_proj), as ctx keeps them.
c10::List<int64_t> dtypes_of(std::initializer_list<at::Tensor> ps) {
  c10::List<int64_t> out;
  for (const auto& p : ps) out.push_back(static_cast<int64_t>(p.scalar_type()));
  return out;
}

class LtGeluMlp : public torch::autograd::Function<LtGeluMlp> {
 public:
  // x: [N, D] contiguous in the compute dtype; weights and biases contiguous, each fp32 (a master under
  // autocast) or of x's dtype; r: [N, D'] contiguous in x's dtype or fp32, or [0] for no residual; one CUDA
  // device. The parameters are cast inside (the 16-bit weights kept for the backward), their gradients
  // returned in their own dtypes. With r, proj's GEMM writes r + h·W_projᵀ + b_proj in r's dtype (C = r).
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w_fc,
                               const at::Tensor& b_fc, const at::Tensor& w_proj, const at::Tensor& b_proj,
                               const at::Tensor& r) {
    const c10::DeviceGuard guard(x.device());
    const auto dt = x.scalar_type();
    const auto w1 = compute_copy(w_fc, dt), w2 = compute_copy(w_proj, dt);
    auto [h, pre] = fc_forward(x, w1, compute_copy(b_fc, dt));
    ctx->save_for_backward({x, w1, w2, pre, h});
    ctx->saved_data["dtypes"] = dtypes_of({w_fc, b_fc, w_proj, b_proj});
    if (r.numel() > 0) return {add_product(h, w2, b_proj.to(r.scalar_type()), r)};
    return {biased_mm(h, w2, compute_copy(b_proj, dt))};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w_fc = saved[1], &w_proj = saved[2], &pre = saved[3], &h = saved[4];
    const c10::DeviceGuard guard(x.device());
    const auto dtypes = ctx->saved_data["dtypes"].toIntList();
    const auto dtype = [&](size_t i) { return static_cast<at::ScalarType>(dtypes.get(i)); };
    const auto dy = grad_out[0].to(x.scalar_type()).contiguous();  // [N, D']
    auto dr = ctx->needs_input_grad(5) ? grad_out[0] : at::Tensor();  // ∂r = ∂y as it is
    // proj's ∂W and ∂b: the GEMM and the column sum (BGRADB, the bias gradient in the GEMM's epilogue, ran
    // 15-16 % slower on an H200: fused_kernels_bench, mlp_proj_param_grads).
    auto [dw_proj, db_proj] = linear_param_grads(dy, h,
                                                 {.weight = ctx->needs_input_grad(3),
                                                  .bias = ctx->needs_input_grad(4),
                                                  .weight_dtype = dtype(2),
                                                  .bias_dtype = dtype(3)});
    if (!ctx->needs_input_grad(0) && !ctx->needs_input_grad(1) && !ctx->needs_input_grad(2))
      return {at::Tensor(), at::Tensor(), at::Tensor(), dw_proj, db_proj, dr};
    auto [dpre, db_fc] = gelu_input_grad(dy, w_proj, pre, dtype(1));
    auto dx = ctx->needs_input_grad(0) ? dpre.mm(w_fc) : at::Tensor();                  // [N, D]
    auto dw_fc = ctx->needs_input_grad(1) ? weight_grad(dpre, x, dtype(0)) : at::Tensor();  // [F, D]
    return {dx, dw_fc, ctx->needs_input_grad(2) ? db_fc : at::Tensor(), dw_proj, db_proj, dr};
  }
};

bool any_requires_grad(std::initializer_list<at::Tensor> ts) {
  for (const auto& t : ts)
    if (t.requires_grad()) return true;
  return false;
}
#endif

}  // namespace

at::Tensor gelu_mlp(const at::Tensor& x, const at::Tensor& w_fc, const at::Tensor& b_fc, const at::Tensor& w_proj,
                    const at::Tensor& b_proj, const at::Tensor& r) {
  MT_CHECK(w_fc.dim() == 2 && x.dim() >= 1 && x.size(-1) == w_fc.size(1), "gelu_mlp: x ", x.sizes(),
           " does not match fc's weight ", w_fc.sizes());
  MT_CHECK(w_proj.dim() == 2 && w_proj.size(1) == w_fc.size(0), "gelu_mlp: proj's weight ", w_proj.sizes(),
           " does not take fc's ", w_fc.size(0), " outputs");
  MT_CHECK(b_fc.defined() && b_fc.dim() == 1 && b_fc.size(0) == w_fc.size(0) && b_proj.defined() &&
               b_proj.dim() == 1 && b_proj.size(0) == w_proj.size(0),
           "gelu_mlp: biases of ", w_fc.size(0), " and ", w_proj.size(0), " expected");
  const auto out_shape = output_shape(x, w_proj.size(0));
  MT_CHECK(!r.defined() || r.sizes() == at::IntArrayRef(out_shape), "gelu_mlp: residual ", r.sizes(),
           " does not match the output ", out_shape);
  const auto plus_r = [&](const at::Tensor& y) { return r.defined() ? r + y : y; };
#if MESHTRAIN_CUDA_KERNELS
  if (x.is_cuda() && x.numel() > 0) {
    const auto xc = cuda::compute_cast(x);
    if (cuda::kernel_ready({xc}) && takes_param(w_fc, xc) && takes_param(b_fc, xc) && takes_param(w_proj, xc) &&
        takes_param(b_proj, xc)) {
      const auto x2 = as_rows(xc);
      if (!at::GradMode::is_enabled() || !any_requires_grad({x, w_fc, b_fc, w_proj, b_proj, r})) {
        // Nothing needs the pre-activation: bias and GELU both in fc's epilogue, on autocast's cached casts.
        using cuda::compute_cast;
        const auto h = at::_addmm_activation(compute_cast(b_fc), x2, compute_cast(w_fc).t(), 1, 1, /*use_gelu=*/true);
        return plus_r(at::addmm(compute_cast(b_proj), h, compute_cast(w_proj).t()).view(out_shape));
      }
      // The residual goes into proj's GEMM where it is fp32 (the residual stream) or the compute dtype.
      const bool in_gemm = r.defined() && r.device() == x.device() &&
                           (r.scalar_type() == at::kFloat || r.scalar_type() == xc.scalar_type());
      const auto y = LtGeluMlp::apply(x2, w_fc.contiguous(), b_fc.contiguous(), w_proj.contiguous(),
                                      b_proj.contiguous(), in_gemm ? as_rows(r) : at::empty({0}, xc.options()))[0];
      return in_gemm ? y.view(out_shape) : plus_r(y.view(out_shape));
    }
  }
#endif
  return plus_r(at::linear(at::gelu(at::linear(x, w_fc, b_fc), "tanh"), w_proj, b_proj));
}

}  // namespace meshtrain::model

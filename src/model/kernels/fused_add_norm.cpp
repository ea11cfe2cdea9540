#include "meshtrain/model/kernels/fused_add_norm.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/custom_function.h>

#include <tuple>

#include "model/kernels/cuda_kernel_call.h"
#include "meshtrain/core/error.h"

#if MESHTRAIN_CUDA_KERNELS
#include "model/kernels/fused_add_norm_cuda.h"
#endif

namespace meshtrain::model {
namespace {

at::Tensor composite_norm(const at::Tensor& h, const at::Tensor& weight, const at::Tensor& bias, bool rms,
                          double eps) {
  const int64_t D = h.size(-1);
  if (rms) return at::rms_norm(h, {D}, weight, eps);
  return at::layer_norm(h, {D}, weight, bias, eps);
}

#if MESHTRAIN_CUDA_KERNELS
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::ScalarType scalar_of(cuda::DType t) { return t == cuda::DType::kBF16 ? at::kBFloat16 : at::kFloat; }

// The backward both functions share. h: the norm's input [rows, D]; gamma: [D], fp32 or bf16, contiguous;
// mean (undefined for RMSNorm), rstd: fp32 [rows]; dy: ∂y; dh_out: ∂h from h's other uses, or undefined.
// → {∂h (h's dtype), ∂γ in w_type, ∂β in b_type (undefined for RMSNorm)}: each weight's gradient in its own
// parameter's dtype, summed in fp32 and rounded once.
std::tuple<at::Tensor, at::Tensor, at::Tensor> norm_backward(const at::Tensor& h, const at::Tensor& gamma,
                                                             const at::Tensor& mean, const at::Tensor& rstd,
                                                             const at::Tensor& dy_in, const at::Tensor& dh_out_in,
                                                             bool rms, at::ScalarType w_type, at::ScalarType b_type) {
  const c10::DeviceGuard guard(h.device());
  const int64_t rows = h.size(0), D = h.size(1);
  const auto dy = dy_in.scalar_type() == at::kBFloat16 ? dy_in.contiguous() : dy_in.to(at::kFloat).contiguous();
  const auto dh_out = dh_out_in.defined() ? dh_out_in.to(h.scalar_type()).contiguous() : at::Tensor();
  auto dh = at::empty_like(h);
  cuda::AddNormBackward a{.h_type = cuda::dtype_of(h), .y_type = cuda::dtype_of(dy),
                          .w_type = cuda::dtype_of(gamma), .dy = dy.const_data_ptr(),
                          .dh_out = dh_out.defined() ? dh_out.const_data_ptr() : nullptr, .h = h.const_data_ptr(),
                          .gamma = gamma.const_data_ptr(), .mean = rms ? nullptr : mean.const_data_ptr<float>(),
                          .rstd = rstd.const_data_ptr<float>(), .dh = dh.mutable_data_ptr(), .dgamma_part = nullptr,
                          .dbeta_part = nullptr, .rows = rows, .dim = D, .chunks = 0, .rms = rms};
  a.chunks = cuda::add_norm_weight_chunks(a);
  const auto f32 = h.options().dtype(at::kFloat);
  auto dgamma_part = at::empty({a.chunks, D}, f32);
  auto dbeta_part = rms ? at::Tensor() : at::empty({a.chunks, D}, f32);
  a.dgamma_part = dgamma_part.mutable_data_ptr<float>();
  a.dbeta_part = rms ? nullptr : dbeta_part.mutable_data_ptr<float>();
  cuda::check_launch(cuda::add_norm_backward(a, cuda::stream_of(h)), "fused norm backward");
  // The second stage of the weight gradients: the chunks' partial sums added up.
  auto dgamma = dgamma_part.sum(0).to(w_type);
  auto dbeta = rms ? at::Tensor() : dbeta_part.sum(0).to(b_type);
  return {dh, dgamma, dbeta};
}

// What both forwards share: the norm's γ and β as the kernel reads them, the per-row statistics the backward
// reads, and the kernel's arguments over them. x: [rows, D]; r: the residual added to x, with h = x + r its
// output, or both undefined (the norm alone: the kernel reads x); y: the output; weight, bias: [D] (bias not read
// for RMSNorm). The arguments point into the tensors held here, which the caller keeps until the launch.
struct NormLaunch {
  at::Tensor gamma, beta, mean, rstd;  // beta and mean undefined for RMSNorm
  cuda::AddNormForward args;
};

NormLaunch norm_launch(const at::Tensor& x, const at::Tensor& r, const at::Tensor& h, const at::Tensor& y,
                       const at::Tensor& weight, const at::Tensor& bias, bool rms, double eps) {
  const int64_t rows = x.size(0), D = x.size(1);
  const auto f32 = x.options().dtype(at::kFloat);
  NormLaunch n;
  // The kernel reads γ and β in one type: the parameters themselves where they share it (no copy: a bf16
  // model's norms cost no cast kernel a step), else both widened to fp32, which rounds neither.
  const bool one_type = rms || bias.scalar_type() == weight.scalar_type();
  const auto w_type = one_type ? weight.scalar_type() : at::kFloat;
  n.gamma = weight.to(w_type).contiguous();
  n.beta = rms ? at::Tensor() : bias.to(w_type).contiguous();
  n.mean = rms ? at::Tensor() : at::empty({rows}, f32);
  n.rstd = at::empty({rows}, f32);
  const auto xt = cuda::dtype_of(x);
  n.args = cuda::AddNormForward{.x_type = xt, .r_type = r.defined() ? cuda::dtype_of(r) : xt,
                                .y_type = cuda::dtype_of(y), .w_type = cuda::dtype_of(n.gamma),
                                .x = x.const_data_ptr(),
                                .r = r.defined() ? r.const_data_ptr() : nullptr,
                                .h = h.defined() ? h.mutable_data_ptr() : nullptr, .y = y.mutable_data_ptr(),
                                .gamma = n.gamma.const_data_ptr(),
                                .beta = rms ? nullptr : n.beta.const_data_ptr(),
                                .mean = rms ? nullptr : n.mean.mutable_data_ptr<float>(),
                                .rstd = n.rstd.mutable_data_ptr<float>(), .rows = rows, .dim = D,
                                .eps = static_cast<float>(eps), .rms = rms};
  return n;
}

class FusedAddNorm : public torch::autograd::Function<FusedAddNorm> {
 public:
  // x, r: contiguous [rows, D]; weight, bias: [D] (bias empty for RMSNorm, not read); y_type: y's dtype.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& r,
                               const at::Tensor& weight, const at::Tensor& bias, bool rms, double eps,
                               at::ScalarType y_type) {
    const c10::DeviceGuard guard(x.device());
    const int64_t rows = x.size(0), D = x.size(1);
    const auto ht = cuda::sum_dtype(cuda::dtype_of(x), cuda::dtype_of(r));
    auto h = at::empty({rows, D}, x.options().dtype(scalar_of(ht)));
    auto y = at::empty({rows, D}, x.options().dtype(y_type));
    const NormLaunch n = norm_launch(x, r, h, y, weight, bias, rms, eps);
    cuda::check_launch(cuda::add_norm_forward(n.args, cuda::stream_of(x)), "fused add + norm forward");
    // mean is undefined for RMSNorm: saved as such, and never read there.
    ctx->save_for_backward({h, n.gamma, n.mean, n.rstd});
    ctx->saved_data["rms"] = rms;
    ctx->saved_data["x_type"] = x.scalar_type();
    ctx->saved_data["r_type"] = r.scalar_type();
    ctx->saved_data["w_type"] = weight.scalar_type();
    ctx->saved_data["b_type"] = bias.scalar_type();
    return {h, y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor& h = saved[0];
    // Gradients are materialised (zeros) when an output went unused, so both are defined here.
    auto [dh, dgamma, dbeta] = norm_backward(h, saved[1], saved[2], saved[3], grad_out[1], grad_out[0],
                                             ctx->saved_data["rms"].toBool(), ctx->saved_data["w_type"].toScalarType(),
                                             ctx->saved_data["b_type"].toScalarType());
    // x + r passes ∂h to both addends, each in its own dtype (a no-op where it is h's).
    auto dx = dh.to(ctx->saved_data["x_type"].toScalarType());
    auto dr = dh.to(ctx->saved_data["r_type"].toScalarType());
    return {dx, dr, dgamma, dbeta, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// The norm alone (no add): the same kernels with r absent; y in the autocast dtype as above, so the bf16 copy
// a linear would make of an fp32 output (and that copy's backward) never happens. With `pass`, x is also an
// output (the same values on a new autograd edge) whose gradient the backward kernel adds to the norm's, where
// autograd would sum the two in a separate kernel. With `rows` (x is those rows of an embedding table), the
// table and the ids are kept in x's place and the backward gathers x again: the first block's input then lives
// only as long as its forward uses it, as torch.compile's partitioner arranges by recomputing the embedding.
class FusedNorm : public torch::autograd::Function<FusedNorm> {
 public:
  // x: contiguous [rows, D]; weight, bias: [D] (bias empty for RMSNorm, not read); y_type: y's dtype.
  // → {y}, or with pass {x, y}.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                               const at::Tensor& bias, bool rms, double eps, at::ScalarType y_type, bool pass,
                               const TableRows* rows) {
    const c10::DeviceGuard guard(x.device());
    auto y = at::empty({x.size(0), x.size(1)}, x.options().dtype(y_type));
    const NormLaunch n = norm_launch(x, at::Tensor(), at::Tensor(), y, weight, bias, rms, eps);
    cuda::check_launch(cuda::add_norm_forward(n.args, cuda::stream_of(x)), "fused norm forward");
    if (rows) {
      MT_CHECK(rows->table.dim() == 2 && rows->table.size(1) == x.size(1) && rows->ids.numel() == x.size(0) &&
                   rows->table.scalar_type() == x.scalar_type(),
               "fused norm: x [", x.sizes(), "] ", x.scalar_type(), " is not the rows ", rows->ids.sizes(),
               " of the table [", rows->table.sizes(), "] ", rows->table.scalar_type());
      ctx->save_for_backward({at::Tensor(), n.gamma, n.mean, n.rstd, rows->table, rows->ids});
    } else {
      ctx->save_for_backward({x, n.gamma, n.mean, n.rstd, at::Tensor(), at::Tensor()});
    }
    ctx->saved_data["rms"] = rms;
    ctx->saved_data["w_type"] = weight.scalar_type();
    ctx->saved_data["b_type"] = bias.scalar_type();
    ctx->saved_data["pass"] = pass;
    if (pass) return {x, y};
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const bool pass = ctx->saved_data["pass"].toBool();
    const at::Tensor dx_out = pass ? grad_out[0] : at::Tensor();
    const at::Tensor x = saved[0].defined() ? saved[0] : at::embedding(saved[4], saved[5]).view({-1, saved[4].size(1)});
    auto [dx, dgamma, dbeta] = norm_backward(x, saved[1], saved[2], saved[3], grad_out[pass ? 1 : 0], dx_out,
                                             ctx->saved_data["rms"].toBool(), ctx->saved_data["w_type"].toScalarType(),
                                             ctx->saved_data["b_type"].toScalarType());
    return {dx, dgamma, dbeta, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// y's dtype: autocast's where it is on for CUDA (the linear layers that read y would cast it to that),
// else h's.
at::ScalarType norm_output_type(const at::Tensor& x, const at::Tensor& r) {
  if (at::autocast::is_autocast_enabled(at::kCUDA)) {
    const auto t = at::autocast::get_autocast_dtype(at::kCUDA);
    if (t == at::kBFloat16 || t == at::kFloat) return t;
  }
  return at::promote_types(x.scalar_type(), r.scalar_type());
}

// RMSNorm's stand-in for the bias: an empty tensor, never read. autograd functions record every tensor input's
// device and dtype (torch::autograd::VariableInfo), which an undefined tensor does not have.
at::Tensor no_bias(const at::Tensor& weight) { return at::empty({0}, weight.options()); }

bool is_kernel_type(const at::Tensor& t) { return t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16; }
#endif

}  // namespace

std::pair<at::Tensor, at::Tensor> fused_add_norm(const at::Tensor& x, const at::Tensor& r, const at::Tensor& weight,
                                                 const at::Tensor& bias, bool rms, double eps) {
  MT_CHECK(x.sizes() == r.sizes(), "fused_add_norm: x and r differ in shape: ", x.sizes(), " vs ", r.sizes());
  MT_CHECK(x.dim() >= 1 && weight.dim() == 1 && weight.size(0) == x.size(-1), "fused_add_norm: weight ",
           weight.sizes(), " does not match the last dim of x ", x.sizes());
  MT_CHECK(rms || (bias.defined() && bias.sizes() == weight.sizes()), "fused_add_norm: LayerNorm needs a bias of ",
           weight.sizes());
#if MESHTRAIN_CUDA_KERNELS
  // One device for all; each tensor fp32 or bf16 on its own (the residual stream is fp32 under autocast,
  // the branch's output bf16).
  const bool ready = x.is_cuda() && r.device() == x.device() && weight.device() == x.device() &&
                     (rms || bias.device() == x.device()) && is_kernel_type(x) && is_kernel_type(r) &&
                     is_kernel_type(weight) && (rms || is_kernel_type(bias)) && x.numel() > 0;
  if (ready) {
    const int64_t D = x.size(-1);
    auto out = FusedAddNorm::apply(x.reshape({-1, D}).contiguous(), r.reshape({-1, D}).contiguous(), weight,
                                   rms ? no_bias(weight) : bias, rms, eps, norm_output_type(x, r));
    return {out[0].view(x.sizes()), out[1].view(x.sizes())};
  }
#endif
  auto h = x + r;
  return {h, composite_norm(h, weight, bias, rms, eps)};
}

namespace {

void check_norm_args(const char* what, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                     bool rms) {
  MT_CHECK(x.dim() >= 1 && weight.dim() == 1 && weight.size(0) == x.size(-1), what, ": weight ", weight.sizes(),
           " does not match the last dim of x ", x.sizes());
  MT_CHECK(rms || (bias.defined() && bias.sizes() == weight.sizes()), what, ": LayerNorm needs a bias of ",
           weight.sizes());
}

#if MESHTRAIN_CUDA_KERNELS
bool norm_kernel_ready(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, bool rms) {
  return x.is_cuda() && weight.device() == x.device() && (rms || bias.device() == x.device()) && is_kernel_type(x) &&
         is_kernel_type(weight) && (rms || is_kernel_type(bias)) && x.numel() > 0;
}

variable_list fused_norm_apply(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, bool rms,
                               double eps, bool pass, const TableRows* rows) {
  const int64_t D = x.size(-1);
  auto out = FusedNorm::apply(x.reshape({-1, D}).contiguous(), weight, rms ? no_bias(weight) : bias, rms, eps,
                              norm_output_type(x, x), pass, rows);
  for (auto& t : out) t = t.view(x.sizes());
  return out;
}
#endif

}  // namespace

at::Tensor fused_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, bool rms, double eps) {
  check_norm_args("fused_norm", x, weight, bias, rms);
#if MESHTRAIN_CUDA_KERNELS
  if (norm_kernel_ready(x, weight, bias, rms)) return fused_norm_apply(x, weight, bias, rms, eps, false, nullptr)[0];
#endif
  return composite_norm(x, weight, bias, rms, eps);
}

std::pair<at::Tensor, at::Tensor> fused_norm_pass(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                                  bool rms, double eps, const TableRows* rows) {
  check_norm_args("fused_norm_pass", x, weight, bias, rms);
#if MESHTRAIN_CUDA_KERNELS
  if (norm_kernel_ready(x, weight, bias, rms)) {
    auto out = fused_norm_apply(x, weight, bias, rms, eps, true, rows);
    return {out[0], out[1]};
  }
#endif
  return {x, composite_norm(x, weight, bias, rms, eps)};
}

}  // namespace meshtrain::model

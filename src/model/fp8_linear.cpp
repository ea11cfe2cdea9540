#include "meshtrain/model/fp8_linear.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#include "meshtrain/core/error.h"
#include "meshtrain/model/linear.h"
#include "meshtrain/model/transformer.h"

namespace meshtrain::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr at::ScalarType kE4M3 = at::kFloat8_e4m3fn, kE5M2 = at::kFloat8_e5m2;

double fp8_max(at::ScalarType fmt) { return fmt == kE4M3 ? 448.0 : 57344.0; }

struct Quantized {
  at::Tensor q;          // FP8
  at::Tensor inv_scale;  // fp32: q · inv_scale ≈ the input; () tensorwise, [rows, 1] rowwise
};

// t [R, C] → FP8 with one scale per tensor or (rowwise) per row, taken from the absolute maximum. The scale
// is rounded to t's dtype before the multiply (no fp32 copy of a bf16 tensor), and the inverse is taken of
// that rounded scale: the one the GEMM undoes is the one that was applied.
Quantized quantize(const at::Tensor& t, Fp8Scaling scaling, at::ScalarType fmt) {
  auto amax = scaling == Fp8Scaling::rowwise ? t.abs().amax({1}, /*keepdim=*/true) : t.abs().max();
  auto scale = (fp8_max(fmt) / amax.to(at::kFloat).clamp_min(1e-12)).to(t.scalar_type());
  auto q = (t * scale).clamp(-fp8_max(fmt), fp8_max(fmt)).to(fmt);
  return {q, scale.to(at::kFloat).reciprocal()};
}

at::ScalarType result_dtype(const at::Tensor& x) {
  return at::autocast::is_autocast_enabled(at::kCUDA) ? at::autocast::get_autocast_dtype(at::kCUDA) : x.scalar_type();
}

class Fp8Linear : public torch::autograd::Function<Fp8Linear> {
 public:
  // x2: [M, K] in the compute dtype; w: [N, K] (the parameter, any float dtype). y = x2 · wᵀ.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x2, const at::Tensor& w, int64_t scaling) {
    const auto s = static_cast<Fp8Scaling>(scaling);
    // Fast accumulation (fewer fp32 promotions inside the GEMM) forward only, as is usual for FP8 training:
    // the gradients' sums are the ones that lose most to it.
    auto y = fp8_matmul(x2, w.t(), s, kE4M3, kE4M3, x2.scalar_type(), /*fast_accum=*/true);
    ctx->save_for_backward({x2, w});
    ctx->saved_data["scaling"] = scaling;
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x2 = saved[0], &w = saved[1];
    const auto s = static_cast<Fp8Scaling>(ctx->saved_data["scaling"].toInt());
    const auto g_fmt = s == Fp8Scaling::rowwise ? kE4M3 : kE5M2;
    const auto dy = grad[0].to(x2.scalar_type());
    auto dx = fp8_matmul(dy, w, s, g_fmt, kE4M3, x2.scalar_type());
    auto dw = fp8_matmul(dy.t(), x2, s, g_fmt, kE4M3, at::kFloat).to(w.scalar_type());
    return {dx, dw, at::Tensor()};
  }
};

}  // namespace

at::Tensor fp8_matmul(const at::Tensor& a, const at::Tensor& b, Fp8Scaling scaling, at::ScalarType a_fmt,
                      at::ScalarType b_fmt, at::ScalarType out_dtype, bool fast_accum) {
  MT_CHECK(scaling != Fp8Scaling::off, "fp8_matmul: scaling off");
  MT_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "fp8_matmul: a [M, K], b [K, N]; got ", a.sizes(),
           ", ", b.sizes());
  const bool rowwise = scaling == Fp8Scaling::rowwise;
  MT_CHECK(!rowwise || (a_fmt == kE4M3 && b_fmt == kE4M3), "fp8_matmul: rowwise scaling takes e4m3 operands");
  // The left operand row-major, scaled per row; the right one column-major, i.e. bᵀ row-major scaled per row
  // (= per column of b). Both reductions run along K, the summed dimension.
  const Quantized qa = quantize(a.contiguous(), scaling, a_fmt);
  const Quantized qbt = quantize(b.t().contiguous(), scaling, b_fmt);
  // Rowwise GEMMs write bf16 only; tensorwise ones write what they are asked.
  const auto gemm_out = rowwise ? at::kBFloat16 : out_dtype;
  auto y = at::_scaled_mm(qa.q, qbt.q.t(), qa.inv_scale, rowwise ? qbt.inv_scale.t() : qbt.inv_scale, std::nullopt,
                          std::nullopt, gemm_out, fast_accum);
  return y.scalar_type() == out_dtype ? y : y.to(out_dtype);
}

bool fp8_applies(const at::Tensor& x, const at::Tensor& w) {
  if (!x.is_cuda() || w.dim() != 2 || x.size(-1) != w.size(1)) return false;
  const int64_t rows = x.numel() / std::max<int64_t>(1, x.size(-1));
  return rows % 16 == 0 && w.size(0) % 16 == 0 && w.size(1) % 16 == 0 && rows > 0;
}

at::Tensor fp8_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, Fp8Scaling scaling) {
  const auto dt = result_dtype(x);
  auto x2 = x.reshape({-1, x.size(-1)}).to(dt);
  // The bias add stays outside the function: autograd does it (and a custom function must not be given an
  // undefined tensor where a layer has no bias).
  auto y = Fp8Linear::apply(x2, w, static_cast<int64_t>(scaling))[0];
  if (b.defined()) y = y + b.to(y.scalar_type());
  auto shape = x.sizes().vec();
  shape.back() = w.size(0);
  return y.view(shape);
}

bool fp8_matmul_available(const c10::Device& device) {
  if (!device.is_cuda()) return false;
  try {
    auto a = at::ones({16, 16}, at::TensorOptions(at::kBFloat16).device(device));
    (void)fp8_matmul(a, a, Fp8Scaling::tensorwise, kE4M3, kE4M3, at::kBFloat16);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

void use_fp8(TransformerImpl& net, Fp8Scaling scaling) {
  for (const auto& m : net.blocks->modules(/*include_self=*/false))
    if (auto* lin = dynamic_cast<LinearImpl*>(m.get())) lin->set_fp8(scaling);
}

}  // namespace meshtrain::model

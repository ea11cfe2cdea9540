#include "meshtrain/model/linear/fp8_linear.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <memory>
#include <unordered_set>
#include <vector>

#include "model/linear/linear_params.h"
#include "meshtrain/core/error.h"
#include "meshtrain/model/attention.h"
#include "meshtrain/model/kernels/fp8_cast.h"
#include "meshtrain/model/linear/fp8_amax_history.h"
#include "meshtrain/model/linear/fp8_shared_input.h"
#include "meshtrain/model/linear/linear.h"
#include "meshtrain/model/mlp.h"
#include "meshtrain/model/transformer.h"

namespace meshtrain::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr at::ScalarType kE4M3 = at::kFloat8_e4m3fn, kE5M2 = at::kFloat8_e5m2;

// a · btᵀ for FP8 a [M, K] and bt [N, K], both row-major (_scaled_mm's right operand is btᵀ, column-major);
// the inverse scales as fp8_cast gives them: () each, or a's [M, 1] and bt's [N, 1] (rowwise).
at::Tensor scaled_mm(const at::Tensor& a, const at::Tensor& a_inv, const at::Tensor& bt, const at::Tensor& bt_inv,
                     bool rowwise, at::ScalarType out_dtype, bool fast_accum) {
  // Rowwise GEMMs write bf16 only; tensorwise ones write what they are asked.
  const auto gemm_out = rowwise ? at::kBFloat16 : out_dtype;
  auto y = at::_scaled_mm(a, bt.t(), a_inv, rowwise ? bt_inv.t() : bt_inv, std::nullopt, std::nullopt, gemm_out,
                          fast_accum);
  return y.scalar_type() == out_dtype ? y : y.to(out_dtype);
}

// t's two copies (row-major and transposed) as `s` asks: scaled from t's own amax, or under delayed scaling from
// the amaxes `site` recorded before.
Fp8Cast cast_both(const at::Tensor& t, Fp8Scaling s, at::ScalarType fmt, Fp8AmaxHistory* site) {
  if (s != Fp8Scaling::delayed) return fp8_cast(t, s, fmt, Fp8Copies::both);
  MT_CHECK(site != nullptr, "fp8_linear: delayed scaling without the layer's amax histories");
  return site->cast(t, fmt, Fp8Copies::both);
}

at::ScalarType result_dtype(const at::Tensor& x) {
  return at::autocast::is_autocast_enabled(at::kCUDA) ? at::autocast::get_autocast_dtype(at::kCUDA) : x.scalar_type();
}

// y = x2 · wᵀ, ∂x = ∂y · w, ∂W = ∂yᵀ · x2. Each operand is cast once for both of its products: x2's and w's
// FP8 copies come with their transposes, which are all the backward keeps of them (half of x2's bytes), and
// the backward casts ∂y and ∂yᵀ in one go. Rowwise, a transpose is scaled per row of itself (per column of
// the tensor), as the GEMM's K is then the other dimension. x2 is cast in its own dtype (no copy to the
// compute dtype first); y and ∂y are in the compute dtype, ∂x in x2's. Under delayed scaling w and ∂y are cast
// at the layer's sites (`sites`, kept for the backward as a capsule in the saved data).
class Fp8Linear : public torch::autograd::Function<Fp8Linear> {
 public:
  // x2: [M, K]; w: [N, K] (the parameter, any float dtype); cx: x2's casts (fp8_cast(x2, ..., both)); sites: the
  // layer's amax histories under delayed scaling, else null.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x2, const at::Tensor& w, int64_t scaling,
                               const std::shared_ptr<const Fp8Cast>& cx, int64_t out_dtype,
                               const c10::intrusive_ptr<Fp8LinearHistories>& sites) {
    const auto s = static_cast<Fp8Scaling>(scaling);
    const bool rowwise = s == Fp8Scaling::rowwise;
    const Fp8Cast cw = cast_both(w, s, kE4M3, sites ? &sites->weight : nullptr);
    // Fast accumulation (fewer fp32 promotions inside the GEMM) forward only, as is usual for FP8 training:
    // the gradients' sums are the ones that lose most to it.
    auto y = scaled_mm(cx->q, cx->inv_scale, cw.q, cw.inv_scale, rowwise, static_cast<at::ScalarType>(out_dtype),
                       /*fast_accum=*/true);
    ctx->save_for_backward({cx->qt, cx->inv_scale_t, cw.qt, cw.inv_scale_t});
    ctx->saved_data["scaling"] = scaling;
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x2.scalar_type());
    ctx->saved_data["w_dtype"] = static_cast<int64_t>(w.scalar_type());
    if (sites) ctx->saved_data["sites"] = c10::IValue::make_capsule(sites);
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &xt = saved[0], &xt_inv = saved[1], &wt = saved[2], &wt_inv = saved[3];
    const auto s = static_cast<Fp8Scaling>(ctx->saved_data["scaling"].toInt());
    const auto x_dtype = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const auto w_dtype = static_cast<at::ScalarType>(ctx->saved_data["w_dtype"].toInt());
    const bool rowwise = s == Fp8Scaling::rowwise;
    c10::intrusive_ptr<Fp8LinearHistories> sites;
    if (s == Fp8Scaling::delayed)
      sites = c10::static_intrusive_pointer_cast<Fp8LinearHistories>(ctx->saved_data["sites"].toCapsule());
    const Fp8Cast cdy = cast_both(grad[0], s, rowwise ? kE4M3 : kE5M2, sites ? &sites->grad_output : nullptr);
    auto dx = scaled_mm(cdy.q, cdy.inv_scale, wt, wt_inv, rowwise, x_dtype, false);
    auto dw = scaled_mm(cdy.qt, cdy.inv_scale_t, xt, xt_inv, rowwise, at::kFloat, false).to(w_dtype);
    return {dx, dw, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor fp8_matmul(const at::Tensor& a, const at::Tensor& b, Fp8Scaling scaling, at::ScalarType a_fmt,
                      at::ScalarType b_fmt, at::ScalarType out_dtype, bool fast_accum) {
  MT_CHECK(scaling == Fp8Scaling::tensorwise || scaling == Fp8Scaling::rowwise, "fp8_matmul: scaling ", scaling,
           " (tensorwise or rowwise: delayed scaling keeps a history per layer, fp8_linear)");
  MT_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "fp8_matmul: a [M, K], b [K, N]; got ", a.sizes(),
           ", ", b.sizes());
  const bool rowwise = scaling == Fp8Scaling::rowwise;
  MT_CHECK(!rowwise || (a_fmt == kE4M3 && b_fmt == kE4M3), "fp8_matmul: rowwise scaling takes e4m3 operands");
  // The left operand row-major, scaled per row; the right one column-major, i.e. bᵀ row-major scaled per row
  // (= per column of b). Both reductions run along K, the summed dimension.
  const Fp8Cast qa = fp8_cast(a, scaling, a_fmt, Fp8Copies::rowmajor);
  const Fp8Cast qb = fp8_cast(b, scaling, b_fmt, Fp8Copies::transposed);
  return scaled_mm(qa.q, qa.inv_scale, qb.qt, qb.inv_scale_t, rowwise, out_dtype, fast_accum);
}

bool fp8_applies(const at::Tensor& x, const at::Tensor& w) {
  if (!x.is_cuda() || w.dim() != 2 || x.size(-1) != w.size(1)) return false;
  const int64_t rows = x.numel() / std::max<int64_t>(1, x.size(-1));
  return rows % 16 == 0 && w.size(0) % 16 == 0 && w.size(1) % 16 == 0 && rows > 0;
}

at::Tensor fp8_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, Fp8Scaling scaling,
                      Fp8SharedInput* shared, const c10::intrusive_ptr<Fp8LinearHistories>& sites) {
  auto x2 = x.reshape({-1, x.size(-1)});
  auto cx = shared != nullptr
                ? shared->cast(x2, scaling)
                : std::make_shared<const Fp8Cast>(cast_both(x2, scaling, kE4M3, sites ? &sites->input : nullptr));
  // The bias add stays outside the function: autograd does it (and a custom function must not be given an
  // undefined tensor where a layer has no bias).
  auto y = Fp8Linear::apply(x2, w, static_cast<int64_t>(scaling), cx, static_cast<int64_t>(result_dtype(x)),
                            sites)[0];
  if (b.defined()) y = y + b.to(y.scalar_type());
  return y.view(output_shape(x, w.size(0)));
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

namespace {

// Sets FP8 on `readers`, layers that read one input, where fp8_pays for them together (their outputs summed), else
// bf16; several share the input's FP8 casts (model/linear/fp8_shared_input.h). → the layers set to FP8.
int64_t set_readers(const std::vector<LinearImpl*>& readers, Fp8Scaling scaling, int64_t min_width) {
  int64_t out = 0;
  for (const LinearImpl* l : readers) out += l->weight.size(0);
  const bool on = scaling != Fp8Scaling::off && fp8_pays(readers.front()->weight.size(1), out, min_width);
  auto shared = on && readers.size() > 1 ? std::make_shared<Fp8SharedInput>(int(readers.size())) : nullptr;
  for (LinearImpl* l : readers) l->set_fp8(on ? scaling : Fp8Scaling::off, shared);
  return on ? static_cast<int64_t>(readers.size()) : 0;
}

}  // namespace

bool fp8_pays(int64_t in, int64_t out, int64_t min_width) {
  MT_CHECK(in > 0 && out > 0 && min_width >= 0, "fp8_pays: in ", in, ", out ", out, ", min_width ", min_width);
  return in * out >= min_width * (in + out);
}

Fp8Layers use_fp8(TransformerImpl& net, Fp8Scaling scaling, int64_t min_width) {
  std::vector<std::vector<LinearImpl*>> groups;
  std::unordered_set<const LinearImpl*> grouped;
  const auto modules = net.blocks->modules(/*include_self=*/false);
  for (const auto& m : modules) {
    if (auto* a = dynamic_cast<AttentionImpl*>(m.get())) groups.push_back({a->wq.get(), a->wk.get(), a->wv.get()});
    auto* mlp = dynamic_cast<MlpImpl*>(m.get());
    if (mlp != nullptr && mlp->gate) groups.push_back({mlp->gate.get(), mlp->up.get()});  // SwiGLU; GPT-2 has none
  }
  for (const auto& g : groups) grouped.insert(g.begin(), g.end());
  for (const auto& m : modules)
    if (auto* lin = dynamic_cast<LinearImpl*>(m.get()); lin != nullptr && !grouped.count(lin)) groups.push_back({lin});
  Fp8Layers n;
  for (const auto& g : groups) {
    n.fp8 += set_readers(g, scaling, min_width);
    n.layers += static_cast<int64_t>(g.size());
  }
  return n;
}

}  // namespace meshtrain::model

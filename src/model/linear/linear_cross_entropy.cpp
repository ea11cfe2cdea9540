#include "meshtrain/model/linear/linear_cross_entropy.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#include "meshtrain/core/error.h"

namespace meshtrain::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class LinearCrossEntropy : public torch::autograd::Function<LinearCrossEntropy> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                               const at::Tensor& targets, int64_t chunk_rows, int64_t vocab_multiple,
                               at::ScalarType compute) {
    const int64_t N = x.size(0), V = weight.size(0);
    const int64_t Vp = (V + vocab_multiple - 1) / vocab_multiple * vocab_multiple;
    const bool want_grad = x.requires_grad() || weight.requires_grad();
    // Autocast is resolved once above (`compute`); inside, every op's dtype is explicit.
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto xc = x.to(compute);
    const auto wc = weight.to(compute);
    // Zero rows to Vp: their logits are 0 and left out of the softmax below; their gradient rows are 0 and
    // dropped at the end.
    const auto wp = Vp == V ? wc : at::constant_pad_nd(wc, {0, 0, 0, Vp - V});
    const auto acc = at::promote_types(compute, at::kFloat);  // softmax, loss and ∂W: fp32 at least
    at::Tensor loss = at::zeros({}, x.options().dtype(acc));
    // Targets of -100 take no loss (masked); the mean is over the others (a device count: no host sync).
    const auto valid_all = targets.ne(-100);
    const auto n_valid = valid_all.sum().to(acc);
    at::Tensor gx, gw, gp;  // gp: one chunk's logit gradient padded to Vp columns (the padding stays 0)
    if (want_grad) {
      gx = at::empty_like(xc);
      gw = at::zeros({Vp, weight.size(1)}, weight.options().dtype(acc));
      if (Vp != V) gp = at::zeros({std::min(chunk_rows, N), Vp}, xc.options());
    }
    for (int64_t r0 = 0; r0 < N; r0 += chunk_rows) {
      const int64_t n = std::min(chunk_rows, N - r0);
      auto xi = xc.narrow(0, r0, n);
      auto vi = valid_all.narrow(0, r0, n).unsqueeze(1);              // [n, 1]
      auto ti = targets.narrow(0, r0, n).unsqueeze(1).clamp_min(0);  // [n, 1]; masked rows read class 0
      // The same kernels as cross_entropy's forward and backward, on one chunk: log-softmax in fp32, the
      // target's −log p, then ∂(mean loss)/∂logits = softmax − onehot/N through log-softmax's backward.
      auto logits = at::mm(xi, wp.t());  // [n, Vp]
      if (Vp != V) logits = logits.narrow(1, 0, V);
      auto logp = at::_log_softmax(logits.to(acc).contiguous(), 1, /*half_to_float=*/false);  // [n, V]
      logits.reset();
      loss -= logp.gather(1, ti).masked_fill(vi.logical_not(), 0).sum();
      if (!want_grad) continue;
      // −1/N_valid at each unmasked row's target; a masked row's incoming gradient is all zeros, so its
      // log-softmax backward is zero too.
      auto go = at::zeros_like(logp).scatter_(1, ti, vi.to(acc) * (-1.0 / n_valid));
      // In fp32, then cast: CUDA's log-softmax backward converts to a narrower type only from fp16, not bf16.
      auto g = at::_log_softmax_backward_data(go, logp, 1, acc);  // [n, V]
      logp.reset();
      go.reset();
      if (Vp != V) {
        auto gpi = gp.narrow(0, 0, n);
        gpi.narrow(1, 0, V).copy_(g);  // the cast to the compute dtype in the same pass
        g = gpi;
      } else {
        g = g.to(compute);
      }
      auto gxi = gx.narrow(0, r0, n);
      at::mm_out(gxi, g, wp);
      gw.add_(at::mm(g.t(), xi));
    }
    if (want_grad) ctx->save_for_backward({gx, Vp == V ? gw : gw.narrow(0, 0, V)});
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["w_dtype"] = static_cast<int64_t>(weight.scalar_type());
    return {loss / n_valid};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const auto& go = grad_out[0];  // scalar
    auto gx = (saved[0] * go.to(saved[0].scalar_type())).to(static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt()));
    auto gw = (saved[1] * go).to(static_cast<at::ScalarType>(ctx->saved_data["w_dtype"].toInt()));
    return {gx, gw, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor linear_cross_entropy(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& targets,
                                int64_t chunk_rows, int64_t vocab_multiple) {
  MT_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1) && targets.dim() == 1 &&
               targets.size(0) == x.size(0),
           "linear_cross_entropy: x [N, d], weight [V, d], targets [N]; got ", x.sizes(), ", ", weight.sizes(), ", ",
           targets.sizes());
  const auto dev = x.device().type();
  const at::ScalarType compute = at::autocast::is_autocast_enabled(dev) ? at::autocast::get_autocast_dtype(dev)
                                                                         : x.scalar_type();
  MT_CHECK(chunk_rows > 0, "linear_cross_entropy: chunk_rows must be > 0");
  MT_CHECK(vocab_multiple > 0, "linear_cross_entropy: vocab_multiple must be > 0");
  if (x.size(0) == 0) return at::zeros({}, x.options().dtype(at::kFloat));
  return LinearCrossEntropy::apply(x, weight, targets, chunk_rows, vocab_multiple, compute)[0];
}

}  // namespace meshtrain::model

#include "meshtrain/train/host_adamw.h"

#include <c10/util/BFloat16.h>

#include <cmath>

namespace meshtrain::train {

AdamWScalars AdamWScalars::make(double lr, double beta1, double beta2, double eps, double weight_decay,
                                double step, double clip) {
  const double bc1 = 1 - std::pow(beta1, step), bc2 = 1 - std::pow(beta2, step);
  return {.decay_factor = static_cast<float>(1 - lr * weight_decay),
          .clip = static_cast<float>(clip),
          .one_minus_beta1 = static_cast<float>(1 - beta1),
          .beta2 = static_cast<float>(beta2),
          .one_minus_beta2 = static_cast<float>(1 - beta2),
          .step_size = static_cast<float>(lr / bc1),
          .bias_correction2_sqrt = static_cast<float>(std::sqrt(bc2)),
          .eps = static_cast<float>(eps)};
}

namespace {

// The loop of both entry points: `Grad` is float or c10::BFloat16; with `kOut`, `out` receives the new
// parameter in `Grad`'s type (a template argument, so the plain loop carries no test per element).
template <class Grad, bool kOut>
inline void update(float* __restrict param, const Grad* __restrict grad, float* __restrict exp_avg,
                   float* __restrict exp_avg_sq, int64_t n, const AdamWScalars& s, Grad* __restrict out) {
  // Copies in locals: the compiler then knows no store below changes them, and the loop vectorizes.
  const float decay = s.decay_factor, clip = s.clip, w1 = s.one_minus_beta1, b2 = s.beta2, w2 = s.one_minus_beta2;
  const float step_size = s.step_size, bc2s = s.bias_correction2_sqrt, eps = s.eps;
  for (int64_t i = 0; i < n; ++i) {
    const float g = static_cast<float>(grad[i]) * clip;
    const float m = exp_avg[i] + w1 * (g - exp_avg[i]);
    const float v = b2 * exp_avg_sq[i] + w2 * g * g;
    const float denom = std::sqrt(v) / bc2s + eps;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    const float p = param[i] * decay - step_size * m / denom;
    param[i] = p;
    if constexpr (kOut) out[i] = Grad(p);
  }
}

}  // namespace

void adamw_update_span(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                       const AdamWScalars& s) {
  update<float, false>(param, grad, exp_avg, exp_avg_sq, n, s, nullptr);
}

void adamw_update_span_cast(float* param, const void* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                            const AdamWScalars& s, bool bf16, void* param_out) {
  if (bf16) {
    update<c10::BFloat16, true>(param, static_cast<const c10::BFloat16*>(grad), exp_avg, exp_avg_sq, n, s,
           static_cast<c10::BFloat16*>(param_out));
  } else {
    update<float, true>(param, static_cast<const float*>(grad), exp_avg, exp_avg_sq, n, s,
                        static_cast<float*>(param_out));
  }
}

}  // namespace meshtrain::train

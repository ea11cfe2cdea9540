#include "meshtrain/train/host_adamw.h"

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

void adamw_update_span(float* __restrict param, const float* __restrict grad, float* __restrict exp_avg,
                       float* __restrict exp_avg_sq, int64_t n, const AdamWScalars& s) {
  // Copies in locals: the compiler then knows no store below changes them, and the loop vectorizes.
  const float decay = s.decay_factor, clip = s.clip, w1 = s.one_minus_beta1, b2 = s.beta2, w2 = s.one_minus_beta2;
  const float step_size = s.step_size, bc2s = s.bias_correction2_sqrt, eps = s.eps;
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * clip;
    const float m = exp_avg[i] + w1 * (g - exp_avg[i]);
    const float v = b2 * exp_avg_sq[i] + w2 * g * g;
    const float denom = std::sqrt(v) / bc2s + eps;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    param[i] = param[i] * decay - step_size * m / denom;
  }
}

}  // namespace meshtrain::train

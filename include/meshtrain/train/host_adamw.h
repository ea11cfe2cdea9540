// AdamW over contiguous fp32 spans in host memory: the arithmetic of the offloaded optimizer
// (train/offloaded_adamw.h). Plain loops over restrict pointers, compiled with -O3 -fno-math-errno
// (CMakeLists.txt) so the compiler vectorizes them; callers split large tensors into spans across threads.
//
// The math is ATen's fused AdamW on the CPU (what train/adamw.h runs), element by element:
//   p ← p·(1 − lr·wd)                            (decoupled weight decay; wd = 0 for the no-decay group)
//   g ← g·clip                                   (the global-norm clip coefficient, 1 when not clipping)
//   m ← m + (1 − β1)·(g − m)                     (lerp)
//   v ← β2·v + (1 − β2)·g²
//   p ← p − (lr / (1 − β1^t)) · m / (√v / √(1 − β2^t) + ε)
// Scalars are formed in double and rounded to float once, as the fused kernel does.
#pragma once

#include <cstdint>

namespace meshtrain::train {

// The per-step scalars of one parameter group, as floats.
struct AdamWScalars {
  float decay_factor;  // 1 − lr·wd
  float clip;          // gradient scale (global-norm clipping)
  float one_minus_beta1, beta2, one_minus_beta2;
  float step_size;              // lr / (1 − β1^t)
  float bias_correction2_sqrt;  // √(1 − β2^t)
  float eps;

  // `step` is the step number after incrementing (1 on the first update).
  static AdamWScalars make(double lr, double beta1, double beta2, double eps, double weight_decay, double step,
                           double clip);
};

// One update of n elements in place: param, exp_avg, exp_avg_sq; grad is read only.
void adamw_update_span(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                       const AdamWScalars& s);

// The same update with the gradient given in the device parameter's dtype, which also receives the new
// parameter in that dtype (`bf16`: bfloat16 for both, the cast rounding to nearest even as a tensor cast does;
// else fp32): the held-gradient step (train/chunked_update.h) reads a chunk of gradient and writes the chunk
// that goes back up.
void adamw_update_span_cast(float* param, const void* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                            const AdamWScalars& s, bool bf16, void* param_out);

}  // namespace meshtrain::train

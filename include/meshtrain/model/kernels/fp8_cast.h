// The FP8 cast of one matmul operand for train.fp8 (model/linear/fp8_linear.h): t [R, C] scaled so that its largest
// absolute value (of the tensor, or of each row) lands on the format's largest, saturated, rounded to FP8,
// written row-major, transposed, or both at once: a linear layer's backward multiplies by the transposes of
// the tensors its forward multiplied by, and _scaled_mm takes its right operand column-major only.
//
//   auto c = fp8_cast(x, Fp8Scaling::rowwise, at::kFloat8_e4m3fn, Fp8Copies::both);
//   // c.q [R, C] with c.inv_scale [R, 1]; c.qt = FP8 of tᵀ, [C, R], with c.inv_scale_t [C, 1]
//
// On CUDA (fp32 or bf16, a build with the fused kernels) two passes over t: one for the maxima (of the
// tensor, or of every row and every column at once) and one that writes both copies, each scale computed on
// the device from its maximum; a row-scaled row-major copy alone (an inference GEMM's input) is one kernel.
// Elsewhere the composite ATen ops run (fp8_cast_composite), which define the result: both give the same bytes.
// Under delayed scaling (fp8_cast_delayed) the scale comes from earlier casts' amaxes and the cast is one pass.
#pragma once

#include <ATen/core/Tensor.h>

#include "meshtrain/core/config_enums.h"

namespace meshtrain::model {

enum class Fp8Copies { rowmajor, transposed, both };

struct Fp8Cast {
  at::Tensor q, inv_scale;      // t in FP8 [R, C], row-major; q · inv_scale ≈ t; inv_scale () or [R, 1] (rowwise)
  at::Tensor qt, inv_scale_t;   // tᵀ in FP8 [C, R], row-major; qt · inv_scale_t ≈ tᵀ; () or [C, 1] (rowwise)
};

// The absolute maxima of t [R, C] as fp32: of the whole tensor (), of each row [R], of each column [C];
// undefined where not asked for. NaN propagates.
struct Fp8Amax {
  at::Tensor tensor, rows, cols;
};
Fp8Amax fp8_amax(const at::Tensor& t, bool tensor, bool rows, bool cols);

// t [R, C] → the copies asked for in `fmt` (float8_e4m3fn or float8_e5m2), scaled per tensor (tensorwise: both
// copies share the scale) or per row of each copy (rowwise: per row of t, and per column of t for qt).
// The scale is fmt_max / amax rounded to t's dtype; its inverse is taken of the rounded scale.
Fp8Cast fp8_cast(const at::Tensor& t, Fp8Scaling scaling, at::ScalarType fmt, Fp8Copies copies);
// The same through composite ATen ops on any device: the reference of the CUDA kernels.
Fp8Cast fp8_cast_composite(const at::Tensor& t, Fp8Scaling scaling, at::ScalarType fmt, Fp8Copies copies);

// Delayed scaling (train.fp8=delayed): the copies scaled per tensor from the amaxes of the casts before this one
// at the same site — the largest finite one of the last 16 — and t's own amax recorded for the casts after it,
// all in `state` (int32 [fp8_delayed_state_size()] on t's device, zeros before the site's first cast, which is
// scaled from t's own amax; `first` says it is that cast, so that nothing reads the state back to the host);
// model/linear/fp8_amax_history.h keeps one per site. On CUDA (a build with the fused kernels) one pass over t
// where tensorwise takes two; elsewhere the composite, which defines the result (and checks `first`).
Fp8Cast fp8_cast_delayed(const at::Tensor& t, at::ScalarType fmt, Fp8Copies copies, const at::Tensor& state,
                         bool first);
Fp8Cast fp8_cast_delayed_composite(const at::Tensor& t, at::ScalarType fmt, Fp8Copies copies, const at::Tensor& state,
                                   bool first);
int64_t fp8_delayed_state_size();

}  // namespace meshtrain::model

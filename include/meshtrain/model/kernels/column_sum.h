// Column sums of a matrix, Σ over its rows, in a chosen dtype: the bias gradient of a linear layer
// (Σ_rows ∂y) written straight into the bias's own dtype (an fp32 master bias: fp32 from bf16 ∂y, no cast
// kernel after it). On CUDA in a build with MESHTRAIN_CUDA_KERNELS: meshtrain's two-stage kernel
// (column_sum.cu: fp32 partial sums per chunk of rows, then one pass over the partials; deterministic, math in
// fp32, one rounding at the store). Elsewhere, and for dtypes it does not take: at::sum in fp32, then cast.
#pragma once

#include <ATen/core/Tensor.h>

namespace meshtrain::model {

// x: [rows, cols] (fp32, bf16 or fp16; any strides) → [cols] in out_dtype (fp32, bf16 or fp16).
at::Tensor column_sum(const at::Tensor& x, at::ScalarType out_dtype);

}  // namespace meshtrain::model

// CUDA launchers of the column sum (column_sum.cu; used by column_sum.cpp): out[j] = Σ_i x[i][j] of a
// [rows, cols] contiguous matrix, in two stages so that the result is deterministic (no atomics): each chunk
// of kChunkRows rows writes its fp32 partial column sums, then one pass adds the partials up. Math in fp32.
#pragma once

#include "model/kernels/cuda_kernel.h"

namespace meshtrain::model::cuda {

// Row chunks of the first stage: the rows of `part` that column_sum_partials writes.
int64_t column_sum_chunks(int64_t rows);

// part[c][j] = Σ over chunk c's rows of x[·][j] (fp32). x: fp32, bf16 or fp16. Vectorised (16-byte loads)
// where x's address and cols allow, element by element otherwise.
LaunchError column_sum_partials(DType x_type, const void* x, int64_t rows, int64_t cols, float* part, void* stream);

// out[j] = Σ_c part[c][j], stored in out_type (fp32, bf16 or fp16) with one rounding.
LaunchError column_sum_finish(const float* part, int64_t chunks, int64_t cols, DType out_type, void* out,
                              void* stream);

}  // namespace meshtrain::model::cuda

// CUDA launchers of the FP8 casts behind train.fp8 (fp8_cast.cu; used by fp8_cast.cpp): the absolute maximum
// of a [rows, cols] tensor in one pass (of the whole tensor, of each row, of each column, any of them at once),
// and the scaled, saturated cast to FP8 in one more pass, writing the row-major copy, the transposed one or
// both. Each scale is computed on the device from its amax exactly as the composite ATen ops do
// (fp8_cast.cpp), so the bytes agree with them: no host sync, no rounding of its own.
#pragma once

#include "model/kernels/cuda_kernel.h"
#include "model/kernels/fp8_delayed_state.h"

namespace meshtrain::model::cuda {

enum class Fp8Format { kE4M3, kE5M2 };

// The maxima to write (null: not wanted), each zeroed first: tensor [1], rows [rows], cols [cols]; fp32.
struct Fp8Amax {
  float* tensor = nullptr;
  float* rows = nullptr;
  float* cols = nullptr;
};

// One FP8 output of fp8_cast: q (null: not wanted) and its inverse scale (q · inv ≈ the input), scaled from
// `amax`: one value for the tensor, or (per_line) one per row of the row-major copy, one per column of the
// input for the transposed copy (= one per row of the transposed copy).
struct Fp8Out {
  void* q = nullptr;           // [rows, cols] row-major, or [cols, rows] for the transposed copy; 1 byte each
  float* inv_scale = nullptr;  // [1] or [lines]
  const float* amax = nullptr; // [1] or [lines], from fp8_amax
  bool per_line = false;
};

// Delayed scaling: one cast site's state (fp8_delayed_state.h) on the device.
struct Fp8Delayed {
  int* state = nullptr;  // null: the scales come from Fp8Out::amax
  bool include_current = false;
};

// x [rows, cols] contiguous, fp32 or bf16.
LaunchError fp8_amax(DType dt, const void* x, int64_t rows, int64_t cols, Fp8Amax out, void* stream);

// scale = round_to_dtype(fmt_max / max(amax, 1e-12)), inv_scale = 1 / scale,
// q = fp8(round_to_dtype(x · scale)) saturated at ±fmt_max; row-major into `rowmajor`, transposed into
// `transposed` (either may be left out), from one read of x. With `delayed`, amax is the window's (both copies
// one scale; Fp8Out::amax unread) and x's own amax is recorded.
LaunchError fp8_cast(DType dt, Fp8Format fmt, const void* x, int64_t rows, int64_t cols, Fp8Out rowmajor,
                     Fp8Out transposed, void* stream, Fp8Delayed delayed = {});

// The row-major copy alone, scaled per row, in one launch: for each row of x, its absolute maximum, then
// inv_scale[r] and q[r] as fp8_amax + fp8_cast compute them (the same bytes).
LaunchError fp8_cast_rows(DType dt, Fp8Format fmt, const void* x, int64_t rows, int64_t cols, void* q,
                          float* inv_scale, void* stream);

}  // namespace meshtrain::model::cuda

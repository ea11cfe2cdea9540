// CUDA launchers of the fused residual add + LayerNorm / RMSNorm (fused_add_norm.cu; used by
// fused_add_norm.cpp). Rows of `dim` contiguous elements; per-row statistics and the weight-gradient partials
// in fp32; γ and β in their own type (fp32 or bf16, read as the model holds them: a bf16 model's norms make
// no fp32 copy of their weights each step); math in fp32, each stored value rounded once to its buffer's type.
#pragma once

#include "model/kernels/cuda_kernel.h"

namespace meshtrain::model::cuda {

// The sum's type: fp32 if either addend is, else bf16 (PyTorch's type promotion of x + r).
inline DType sum_dtype(DType x, DType r) { return x == DType::kF32 || r == DType::kF32 ? DType::kF32 : DType::kBF16; }

struct AddNormForward {
  DType x_type, r_type, y_type;  // h's type is sum_dtype(x_type, r_type)
  DType w_type;                  // γ's and β's (fp32 or bf16)
  const void* x;                 // [rows, dim]
  const void* r;                 // [rows, dim], the residual branch added to x; null = no add (y = norm(x))
  void* h;                       // [rows, dim] out: x + r; unused without r
  void* y;                       // [rows, dim] out: norm(h)·γ (+ β)
  const void* gamma;             // [dim]
  const void* beta;              // [dim]; null for RMSNorm
  float* mean;                   // [rows] out; null for RMSNorm
  float* rstd;                   // [rows] out: 1 / sqrt(var + eps) (RMSNorm: 1 / sqrt(mean(h²) + eps))
  int64_t rows, dim;
  float eps;
  bool rms;
};

// h = x + r, y = norm(h) (without r: y = norm(x)): one block per row, which holds the row in registers where
// the size and alignment allow (fused_add_norm.cu says when).
LaunchError add_norm_forward(const AddNormForward& a, void* stream);

struct AddNormBackward {
  DType h_type, y_type;
  DType w_type;        // γ's (fp32 or bf16)
  const void* dy;      // [rows, dim] ∂y
  const void* dh_out;  // [rows, dim] ∂h from h's other uses (h's type); null = none
  const void* h;       // [rows, dim] the saved sum (the norm's input: x where there was no add)
  const void* gamma;   // [dim]
  const float* mean;   // [rows]; null for RMSNorm
  const float* rstd;   // [rows]
  void* dh;            // [rows, dim] out (h's type): ∂h_out + the norm's input gradient (= ∂x = ∂r)
  float* dgamma_part;  // [chunks, dim] out: Σ over each chunk's rows of ∂y·ĥ
  float* dbeta_part;   // [chunks, dim] out: Σ over each chunk's rows of ∂y; null for RMSNorm
  int64_t rows, dim;
  int64_t chunks;      // add_norm_weight_chunks(*this)
  bool rms;
};

// Row chunks of the weight gradients' first stage, for a's sizes, dtypes and pointers (the partials aside:
// fresh allocations, 32-byte aligned); the caller sums the [chunks, dim] partials over chunks.
int64_t add_norm_weight_chunks(const AddNormBackward& a);

// ∂h and the weight-gradient partials: one kernel that walks a chunk of rows per block where the row fits
// in registers, else a block per row and a second kernel for the partials. An error where a.chunks is not
// add_norm_weight_chunks(a).
LaunchError add_norm_backward(const AddNormBackward& a, void* stream);

}  // namespace meshtrain::model::cuda

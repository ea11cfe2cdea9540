// One GEMM through cuBLASLt with the epilogue that takes a bias, a GELU or a bias gradient out of its own
// kernel (used by model/linear/bias_linear.h and model/linear/gelu_mlp.h), or with an fp32 output from 16-bit operands (the
// weight gradients of fp32 master weights: model/linear/master_linear.h). It runs in a build with MESHTRAIN_CUDA_KERNELS
// (elsewhere run() returns false), on LibTorch's cuBLASLt handle, workspace and current stream, so it orders
// with every ATen op around it.
//
// Everything here is row-major, as ATen's tensors are: out[M, N] = op(a)[M, K] · op(b)[K, N], op(t) = t or
// tᵀ. cuBLASLt is column-major, so the call is made as outᵀ = op(b)ᵀ · op(a)ᵀ: cuBLASLt's A is our b and its
// B our a, its rows (m) are our N and its columns (n) our M. The epilogues in these terms:
//   kBias        out = op(a)·op(b) + bias[N] (one value per output column, added to every row)
//   kGeluAuxBias aux = op(a)·op(b) + bias[N], out = gelu_tanh(aux); aux [M, N] is what the backward reads
//   kDGeluBGrad  out = (op(a)·op(b)) ⊙ gelu_tanh'(aux), bias[N] = Σ over out's rows (written)
//   kDGelu       out = (op(a)·op(b)) ⊙ gelu_tanh'(aux), no bias
//   kBGradB      out = op(a)·op(b), bias[M] = Σ over K of op(a) (written): with a = ∂y [rows, out] taken
//                transposed and b = x [rows, in], out is the weight gradient and bias the bias gradient
//                (cuBLASLt's BGRADB: our a is its B operand)
//
// Tensors: 2-D, contiguous, on one CUDA device. Dtypes (layout_ok's rules):
//   a, b       one dtype: fp32, bf16 or fp16 (math and accumulation in fp32; TF32 where ATen allows it for
//              fp32 matmuls)
//   out        a's dtype, or fp32 where a and b are bf16/fp16 (cuBLASLt: compute 32F, scale 32F, A/B 16BF or
//              16F, C/D 32F): a weight gradient written straight into an fp32 master's dtype, no bf16 result
//              to convert afterwards
//   bias, aux  out's dtype
// c: out = c + op(a)·op(b) (+ bias) — cuBLASLt's C with beta 1; c is out's shape and dtype, and may be out itself
// (out +=) — with kNone or kBias only: the fp32 residual stream added to a projection inside its GEMM, instead of
// by an add kernel after it.
//
// Which kernel runs: cuBLASLt's heuristic ranks its kernels for a problem; its first pick is not always the
// fastest (fp32-output weight gradients with a long reduction). With set_tuning(true) the first run of each
// problem (shape, dtypes, epilogue, alignments) times the heuristic's first few answers on the device and keeps
// the fastest for the rest of the process (torch's TunableOp does the same for its GEMMs). The choice rests on
// timings, so two processes may choose differently and their results differ in the last bits: off by default,
// bit-exact resume needs it off (train.gemm_tuning).
//
// Requirements cuBLASLt states: aux's leading dimension (N) divisible by 8; alignment of every pointer is
// passed to the algorithm search, which answers only with kernels that accept it. Where a requirement fails,
// a size is 0 or the search finds no kernel (fp32 epilogues on some GPUs), run() writes nothing and returns
// false: the caller runs its composite ops instead.
#pragma once

#include <ATen/core/Tensor.h>

namespace meshtrain::model::lt {

enum class Epilogue { kNone, kBias, kGeluAuxBias, kDGeluBGrad, kDGelu, kBGradB };

struct Gemm {
  at::Tensor a;  // [M, K], or [K, M] with trans_a
  bool trans_a = false;
  at::Tensor b;  // [K, N], or [N, K] with trans_b
  bool trans_b = false;
  at::Tensor out;  // [M, N], allocated by the caller
  Epilogue epilogue = Epilogue::kNone;
  at::Tensor bias;  // kBias, kGeluAuxBias: read, [N]; kDGeluBGrad: written, [N]; kBGradB: written, [M]
  at::Tensor aux;   // kGeluAuxBias: written, [M, N]; kDGeluBGrad, kDGelu: read, [M, N]
  at::Tensor c;     // kNone, kBias: read, [M, N] like out (or out itself), added to the product
};

// Whether g's layout keeps cuBLASLt's rules for its epilogue (shapes, dtypes, devices, aux's leading
// dimension); says nothing of whether a kernel exists, which only run() finds out.
bool layout_ok(const Gemm& g);

// Enqueues g on the current stream of its device. False, with nothing written, where !layout_ok(g) or
// cuBLASLt has no algorithm for it; a failure of cuBLASLt itself throws meshtrain::Error.
bool run(const Gemm& g);

// Time the heuristic's answers and keep the fastest per problem (see above); process-wide, off by default.
void set_tuning(bool on);
bool tuning();

}  // namespace meshtrain::model::lt

// FP8 matmuls for training (train.fp8): a linear layer's three matmuls — y = x·Wᵀ forward, ∂x = ∂y·W and
// ∂W = ∂yᵀ·x backward — run through at::_scaled_mm on FP8 copies of their operands. Tensorwise: one scale per
// operand, from its own absolute maximum at the moment of the cast (dynamic scaling), so the largest value lands
// on the format's largest; activations and weights in e4m3 (more mantissa), gradients in e5m2 (more range).
// Rowwise: one scale per row of the left operand and per column of the right one, everything in e4m3. Delayed:
// tensorwise, but each operand scaled from the amaxes its site recorded at the casts before
// (model/linear/fp8_amax_history.h): one pass over it instead of two. The master weights, the bias add, norms,
// attention, the head and the loss stay in their own precision; ∂W comes back in the weight's dtype.
//
//   use_fp8(*net, Fp8Scaling::tensorwise, cfg.train.fp8_min_width);  // the blocks' layers wide enough to gain
//   if (!fp8_matmul_available(device)) ...          // a GPU without FP8 matmuls (compute capability < 8.9)
//
// The casts run as CUDA kernels (model/kernels/fp8_cast.h): each operand once for both of its products, x's shared by
// the layers that read it (model/linear/fp8_shared_input.h).
//
// A layer whose sizes FP8 GEMMs cannot take (rows, in or out features not multiples of 16), or a CPU tensor,
// runs the ordinary matmul: the switch is a request, never an error mid-run.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/util/intrusive_ptr.h>

#include "meshtrain/core/config_enums.h"

namespace meshtrain::model {

class Fp8SharedInput;
class TransformerImpl;
struct Fp8LinearHistories;

// a [M, K] · b [K, N] with both operands cast to FP8 as `scaling` says (tensorwise or rowwise; a's and b's formats:
// `a_fmt`, `b_fmt`, e4m3 or e5m2, rowwise takes e4m3 only); the product in `out_dtype`. Sizes must be multiples of
// 16.
// `fast_accum`: the GEMM's faster, less precise accumulation.
at::Tensor fp8_matmul(const at::Tensor& a, const at::Tensor& b, Fp8Scaling scaling, at::ScalarType a_fmt,
                      at::ScalarType b_fmt, at::ScalarType out_dtype, bool fast_accum = false);

// Whether fp8_linear would run FP8 matmuls for input x and weight w (CUDA, sizes multiples of 16).
bool fp8_applies(const at::Tensor& x, const at::Tensor& w);
// x [..., in] · w [out, in]ᵀ + b (b may be undefined), differentiable in x, w and b, in FP8 as described
// above. The result takes autocast's dtype when autocast is on, else x's. `shared`: x's casts shared with
// the other layers that read x (model/linear/fp8_shared_input.h); null: cast here. `sites`: the layer's amax
// histories, which delayed scaling needs (unused otherwise).
at::Tensor fp8_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, Fp8Scaling scaling,
                      Fp8SharedInput* shared = nullptr, const c10::intrusive_ptr<Fp8LinearHistories>& sites = {});

// Tries one small FP8 matmul on `device`: false where the GPU (or this build) has none.
bool fp8_matmul_available(const c10::Device& device);
// Whether FP8 matmuls gain on a linear layer of `in` → `out` features, or on layers that read one input and share
// its casts (`out` their outputs together): in·out / (in + out) ≥ min_width. A step's three matmuls grow with
// tokens·in·out and gain from FP8's rate, while the casts that pay for it pass over x and ∂y, tokens·(in + out)
// elements: the ratio is that harmonic width. Measured on an H200 (docs/PERFORMANCE.md): GPT-2 124M, whose layers
// are 576–614 wide, ran 0.85× bf16 with FP8; the Llama 3.2 1B (q/k/v together 1,229, o 1,024, the MLP 1,638) 1.18×
// and the 3.1 8B shape 1.26×. train.fp8_min_width's default, 1024, lies between. min_width 0: every layer.
bool fp8_pays(int64_t in, int64_t out, int64_t min_width);

// Sets `scaling` on the linear layers of net's blocks where fp8_pays (attention's q, k, v and SwiGLU's gate and up
// judged as groups, which share their input's casts); the others, the head and the embedding stay as they are.
// Fp8Scaling::off sets every block layer back.
struct Fp8Layers {
  int64_t fp8 = 0;     // layers set to FP8
  int64_t layers = 0;  // the blocks' linear layers
};
Fp8Layers use_fp8(TransformerImpl& net, Fp8Scaling scaling, int64_t min_width);

}  // namespace meshtrain::model

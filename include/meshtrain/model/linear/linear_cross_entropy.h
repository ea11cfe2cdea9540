// The output head and the loss in one step, chunked over tokens: mean cross-entropy of (x · Wᵀ) against
// targets without ever holding the full [tokens, vocab] logits.
//
// Plain `cross_entropy(linear(x, W).float(), t)` keeps the bf16 logits, their fp32 copy and the fp32
// log-softmax alive until backward: 3 × tokens × vocab values — 21 GB of a Llama 3.2 1B step at batch 8 ×
// 2048 (vocab 128,256), most of that step's activation memory. Here each chunk of rows computes its logits,
// its fp32 log-sum-exp and loss, and right away its gradients (∂x for its rows, ∂W accumulated in fp32);
// backward only scales them by the incoming gradient. Same FLOPs (the head's backward matmuls move into the
// forward), one chunk of logits in memory.
//
// Precision follows autocast: under bf16 autocast the matmuls run in bf16 with fp32 accumulation, softmax
// and the loss in fp32 (as autocast runs cross_entropy); without autocast everything stays in x's dtype.
#pragma once

#include <ATen/core/Tensor.h>

namespace meshtrain::model {

// x: [N, d], weight: [V, d], targets: [N] int64 → scalar mean loss (fp32; fp64 for fp64 inputs) over the
// targets that are not -100 (masked; NaN when all are, as PyTorch).
// `chunk_rows` rows per chunk (> 0). Differentiable w.r.t. x and weight.
// `vocab_multiple` (> 0): the matmuls see the weight padded with zero rows to a multiple of it — an odd
// vocabulary (GPT-2's 50257) makes the logits' leading dimension odd, and cuBLAS then falls back to unaligned
// kernels several times slower; the softmax and the loss take the first V columns only, so the loss and the
// gradients are those of the unpadded weight.
at::Tensor linear_cross_entropy(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& targets,
                                int64_t chunk_rows = 0, int64_t vocab_multiple = 1);

}  // namespace meshtrain::model

// Mean softmax cross-entropy of logits against targets, fused on CUDA (llm.c's "fused classifier"): one
// kernel reads each row of logits once and writes its log-sum-exp and loss in fp32; backward writes
// ∂logits = (softmax − onehot)·∂loss/N_valid straight from the logits — into the logits' own buffer when
// `in_place`. Eager `cross_entropy(logits.float(), t)` instead makes an fp32 copy and an fp32 log-softmax
// of the [N, V] logits, keeps both for backward and spends five more passes there: for GPT-2 124M at
// 32 × 1024 tokens that is 13 GB of memory and most of the loss's time.
//
// Elsewhere (CPU, other dtypes, a CPU-only build) the composite ATen cross-entropy runs; the value is the
// same within rounding, the memory is not.
#pragma once

#include <ATen/core/Tensor.h>

namespace meshtrain::model {

// logits: [N, V] fp32 or bf16; targets: [N] int64 → scalar fp32 loss, averaged over the rows whose target
// is not `ignore_index` (NaN when there are none, as PyTorch). Differentiable w.r.t. logits.
// `in_place`: backward overwrites `logits` with its gradient — only for logits that nothing else reads
// after the loss (the model's own head output), and a graph that is not run backward twice. A target
// outside [0, V) gives a NaN loss on CUDA (no device-side assert), an error on CPU.
// `classes` (0 < classes ≤ V; 0 = V): only the first `classes` columns are logits; the rest are padding that
// keeps the head's GEMM aligned (transformer.cpp pads an odd vocabulary to a multiple of 64), left out of the
// softmax and given gradient 0.
at::Tensor fused_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index = -100,
                               bool in_place = false, int64_t classes = 0);

}  // namespace meshtrain::model

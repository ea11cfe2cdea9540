// Documents: where the documents of a packed micro-batch start, so that positions restart at each document
// and attention never crosses one (block-causal).
//
// Packing puts several short documents (instruction examples) into one sequence instead of padding each to
// the sequence length. Each token then sees only the earlier tokens of its own document, at the position it
// would have alone: the loss and gradients equal those of the documents run one by one. On CUDA with bf16 /
// fp16 activations attention runs as variable-length flash attention over the cumulative document lengths
// (no mask is formed); elsewhere SDPA runs with the block-causal mask.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace meshtrain::model {

struct Documents {
  at::Tensor positions;   // [B, T] int64, on the tokens' device: each token's position within its document
  at::Tensor cu_seqlens;  // [n_docs + 1] int32, same device: document starts over the flattened B·T tokens,
                          // then B·T (every row starts a document)
  int64_t max_len = 0;    // the longest document's length (host: flash attention sizes its grid by it)
  at::Tensor mask;        // [B, 1, T, T] bool block-causal mask; the model fills it where SDPA needs it

  bool packed() const { return positions.defined(); }
};

// The block-causal mask of `positions` [B, T] (a document starts where the position is 0, and at every row's
// start): [B, 1, T, T] bool, true where query i may attend key j (same document, j ≤ i).
at::Tensor block_causal_mask(const at::Tensor& positions);

// Documents from positions [B, T] (host or device): cu_seqlens and max_len computed on the host. For tests and
// callers without the data loader's host-side boundaries.
Documents documents_from_positions(const at::Tensor& positions);

}  // namespace meshtrain::model

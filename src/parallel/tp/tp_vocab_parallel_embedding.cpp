#include "meshtrain/parallel/tp/tp_vocab_parallel_embedding.h"

#include <ATen/ATen.h>

#include "meshtrain/core/error.h"
#include "meshtrain/parallel/tp/tp_regions.h"

namespace meshtrain::parallel {

VocabBlock vocab_block(int64_t vocab, int rank, int size) {
  MT_CHECK(size > 0 && rank >= 0 && rank < size, "vocab_block: rank ", rank, " of ", size);
  return {vocab * rank / size, vocab * (rank + 1) / size, (vocab + size - 1) / size};
}

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(at::Tensor weight, VocabBlock block, comm::CommPtr tp)
    : EmbeddingImpl(weight.size(0), weight.size(1), weight.options().device(at::kMeta)),
      block_(block),
      tp_(std::move(tp)) {
  MT_CHECK(weight.size(0) == block.rows(), "VocabParallelEmbedding: weight has ", weight.size(0), " rows, block ",
           block.rows());
  replace_parameter("weight", std::move(weight));
}

at::Tensor VocabParallelEmbeddingImpl::forward(const at::Tensor& ids) {
  auto outside = ids.lt(block_.start).logical_or_(ids.ge(block_.end));  // [...] bool
  auto local = (ids - block_.start).masked_fill_(outside, 0);
  // Rows of tokens another rank holds are zeroed, so the sum over ranks is the plain lookup (and their
  // gradient, masked the same way, never reaches row 0).
  auto rows = at::embedding(weight, local).masked_fill(outside.unsqueeze(-1), 0.0);  // [..., dim]
  return reduce_from_tp_region(rows, tp_);
}

}  // namespace meshtrain::parallel

// VocabParallelEmbedding: the token embedding with its vocabulary rows split over the tensor-parallel group
// (Megatron's VocabParallelEmbedding). Rank r holds rows [start, end) (vocab_block below); a token outside
// them looks up row 0 and is zeroed, and reduce_from_tp_region sums the ranks' rows so every rank ends with
// every token's embedding. Its rows are also the output head's block when embeddings are tied.
#pragma once

#include "meshtrain/comm/communicator.h"
#include "meshtrain/model/linear/linear.h"

namespace meshtrain::parallel {

// Rows [start, end) of a vocabulary of `vocab` split over `size` ranks as evenly as possible (block sizes
// differ by at most one, so any vocabulary size works, e.g. GPT-2's 50257). `max_rows`: the largest block.
struct VocabBlock {
  int64_t start, end, max_rows;
  int64_t rows() const { return end - start; }
};
VocabBlock vocab_block(int64_t vocab, int rank, int size);

class VocabParallelEmbeddingImpl : public model::EmbeddingImpl {
 public:
  // weight: [end - start, dim], this rank's rows.
  VocabParallelEmbeddingImpl(at::Tensor weight, VocabBlock block, comm::CommPtr tp);
  at::Tensor forward(const at::Tensor& ids) override;  // ids: [...] int64 (global ids) → [..., dim]
  // Its rows come out of an all-reduce over the tensor-parallel ranks: no local lookup to repeat.
  std::optional<model::TableRows> rows(const at::Tensor&) const override { return std::nullopt; }

  const VocabBlock& block() const { return block_; }

 private:
  VocabBlock block_;
  comm::CommPtr tp_;
};

}  // namespace meshtrain::parallel

#include "meshtrain/parallel/fsdp/dim0_shard.h"

#include "meshtrain/core/error.h"

namespace meshtrain::parallel {

Dim0Shard::Dim0Shard(std::vector<int64_t> shape, int64_t rank, int64_t world) : global_shape(std::move(shape)) {
  MT_CHECK(world >= 1 && rank >= 0 && rank < world, "Dim0Shard: rank ", rank, " of ", world);
  MT_CHECK(!global_shape.empty(), "Dim0Shard: a 0-dim tensor cannot be split by rows");
  rows = global_shape[0];
  for (size_t d = 1; d < global_shape.size(); ++d) row_numel *= global_shape[d];
  rows_per_rank = (rows + world - 1) / world;
  row_begin = std::min(rows, rank * rows_per_rank);
  local_rows = std::min(rows, row_begin + rows_per_rank) - row_begin;
}

std::vector<int64_t> Dim0Shard::local_shape() const {
  std::vector<int64_t> s = global_shape;
  s[0] = local_rows;
  return s;
}

std::vector<int64_t> Dim0Shard::offsets() const {
  std::vector<int64_t> o(global_shape.size(), 0);
  o[0] = row_begin;
  return o;
}

}  // namespace meshtrain::parallel

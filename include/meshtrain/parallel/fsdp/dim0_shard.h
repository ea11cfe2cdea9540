// Dim0Shard: how one parameter is split over the W ranks of a sharding group (FSDP2 / ZeRO): by rows of
// dim 0, rank r holding rows [r·c, min(n, (r+1)·c)) with c = ceil(n / W) — possibly none. Every rank's piece
// is padded to c rows in the flat buffers, so all ranks exchange equal-sized chunks, and the piece is a
// rectangular block of the global tensor (core/sharded_tensor.h) that checkpoints can save and reshard.
#pragma once

#include <cstdint>
#include <vector>

namespace meshtrain::parallel {

struct Dim0Shard {
  std::vector<int64_t> global_shape;  // the whole parameter
  int64_t rows = 0;                   // global_shape[0]
  int64_t row_numel = 1;              // elements per row (product of the other dims)
  int64_t rows_per_rank = 0;          // c = ceil(rows / W): the padded piece every rank holds
  int64_t row_begin = 0;              // this rank's first row
  int64_t local_rows = 0;             // this rank's real rows (≤ rows_per_rank; 0 on trailing ranks)

  // `shape` has at least one dim (every parameter of our models does).
  Dim0Shard(std::vector<int64_t> shape, int64_t rank, int64_t world);

  int64_t padded_numel() const { return rows_per_rank * row_numel; }  // this piece in a flat buffer
  int64_t local_numel() const { return local_rows * row_numel; }
  // Shape of this rank's block: [local_rows, rest...].
  std::vector<int64_t> local_shape() const;
  std::vector<int64_t> offsets() const;  // {row_begin, 0, ...}
};

}  // namespace meshtrain::parallel

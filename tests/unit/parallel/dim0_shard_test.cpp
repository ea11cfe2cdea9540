#include "meshtrain/parallel/fsdp/dim0_shard.h"

#include <gtest/gtest.h>

using meshtrain::parallel::Dim0Shard;

TEST(Dim0Shard, RowsSplitWithTrailingEmptyRanks) {
  // 5 rows over 4 ranks: c = 2 → [0,2) [2,4) [4,5) [5,5).
  const int64_t begin[] = {0, 2, 4, 5}, rows[] = {2, 2, 1, 0};
  for (int r = 0; r < 4; ++r) {
    Dim0Shard s({5, 3}, r, 4);
    EXPECT_EQ(s.rows_per_rank, 2);
    EXPECT_EQ(s.row_begin, begin[r]) << r;
    EXPECT_EQ(s.local_rows, rows[r]) << r;
    EXPECT_EQ(s.padded_numel(), 6);
    EXPECT_EQ(s.local_shape(), (std::vector<int64_t>{rows[r], 3}));
    EXPECT_EQ(s.offsets(), (std::vector<int64_t>{begin[r], 0}));
  }
}

TEST(Dim0Shard, BlocksCoverEveryRowOnce) {
  for (int64_t n : {1, 2, 7, 64, 67}) {
    for (int64_t w : {1, 2, 3, 4, 8}) {
      int64_t next = 0;
      for (int64_t r = 0; r < w; ++r) {
        Dim0Shard s({n}, r, w);
        EXPECT_EQ(s.row_begin, next) << n << "/" << w;
        next += s.local_rows;
        EXPECT_LE(s.local_rows, s.rows_per_rank);
      }
      EXPECT_EQ(next, n) << n << "/" << w;
    }
  }
}

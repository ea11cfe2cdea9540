#include "meshtrain/parallel/parallel_groups.h"

#include <gtest/gtest.h>

using namespace meshtrain;

TEST(MeshCoords, InnermostDimLast) {
  ParallelConfig p;
  p.dp = 2;
  p.fsdp = 2;
  p.tp = 2;
  p.order = "pp-dp-fsdp-tp";
  const auto m = parallel::mesh_coords(p, 8);
  // rank = dp·4 + fsdp·2 + tp
  EXPECT_EQ(m.coord(5, "dp"), 1);
  EXPECT_EQ(m.coord(5, "fsdp"), 0);
  EXPECT_EQ(m.coord(5, "tp"), 1);
  // Groups: ranks sharing all other coordinates have one colour.
  EXPECT_EQ(m.group_color(5, "dp"), 1);   // {1, 5}
  EXPECT_EQ(m.group_color(1, "dp"), 1);
  EXPECT_EQ(m.group_color(5, "tp"), 4);   // {4, 5}
  EXPECT_EQ(m.group_color(7, "fsdp"), 5); // {5, 7}
}

#include "meshtrain/parallel/parallel_groups.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "meshtrain/core/error.h"
#include "support/rank_threads.h"

using namespace meshtrain;

// The groups come from comm::Mesh: on 8 ranks of dp 2 × fsdp 2 × tp 2 (tp innermost) each group has the mesh's
// size, this rank's index in it, and exactly the members the mesh names — checked by summing the members'
// world ranks over each group.
TEST(ParallelGroups, FromTheMesh) {
  Config cfg;
  cfg.parallel.dp = 2;
  cfg.parallel.fsdp = 2;
  cfg.parallel.tp = 2;
  const auto errors = testing_support::run_rank_threads(8, "groups", {}, [&](int r, comm::CommPtr world) {
    comm::Mesh mesh(cfg, world);
    const auto g = parallel::make_parallel_groups(mesh);
    EXPECT_EQ(g.world, world);
    for (auto [dim, c] : {std::pair{Dim::dp, g.dp}, {Dim::fsdp, g.fsdp}, {Dim::tp, g.tp}}) {
      SCOPED_TRACE(cat("rank ", r, " ", dim_name(dim)));
      ASSERT_EQ(c->size(), 2);
      EXPECT_EQ(c->rank(), mesh.coord(dim));
      auto t = at::full({1}, static_cast<float>(r), at::kFloat);
      c->all_reduce(t, comm::ReduceOp::Sum)->wait();
      int want = 0;
      for (int m : mesh.shape().group(r, dim)) want += m;
      EXPECT_EQ(t.item<float>(), static_cast<float>(want));
    }
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

// MeshShape: the arithmetic of a device mesh (coordinates, groups, split colors/keys) and its one-line errors
// on parallel.order and the world-size product, which validate() reports as they are (config_validate_test.cpp).
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/core/mesh_shape.h"
#include "support/parallel_dims.h"
#include "support/test_support.h"

using namespace meshtrain;
using meshtrain::testing_support::parallel_dims;
using meshtrain::testing_support::user_error;

TEST(MeshShape, DefaultOrderPutsTpInnermost) {
  MeshShape s = MeshShape::from_config(parallel_dims(1, 2, 1, 4), 8);
  EXPECT_EQ(s.world_size(), 8);
  EXPECT_EQ(s.order_string(), "pp-dp-fsdp-tp");
  EXPECT_EQ(s.describe(), "pp1 × dp2 × fsdp1 × tp4 (order pp-dp-fsdp-tp)");
  EXPECT_EQ(s.group(5, Dim::tp), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(s.group(5, Dim::dp), (std::vector<int>{1, 5}));
  EXPECT_EQ(s.coord(5)[static_cast<int>(Dim::dp)], 1);
  EXPECT_EQ(s.coord(5)[static_cast<int>(Dim::tp)], 1);
  EXPECT_EQ(s.group_index(5, Dim::tp), 1);
  EXPECT_EQ(s.index_in_group(5, Dim::tp), 1);
  EXPECT_EQ(s.group_index(6, Dim::dp), 2);
  EXPECT_EQ(s.index_in_group(6, Dim::dp), 1);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(s.rank_of(s.coord(r)), r);
}

TEST(MeshShape, DerivesDpAndCombinesDims) {
  MeshShape s = MeshShape::from_config(parallel_dims(2, 0, 2, 2), 16);  // dp = 16 / 8 = 2
  EXPECT_EQ(s.size(Dim::dp), 2);
  // HSDP: replicate (dp) × shard (fsdp) group of rank 0 in pp2·dp2·fsdp2·tp2: stride tp over dp·fsdp.
  EXPECT_EQ(s.group(0, {Dim::dp, Dim::fsdp}), (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(s.group(9, {Dim::dp, Dim::fsdp}), (std::vector<int>{9, 11, 13, 15}));
  EXPECT_EQ(s.size({Dim::dp, Dim::fsdp}), 4);
  EXPECT_EQ(s.group(3, Dim::pp), (std::vector<int>{3, 11}));
}

TEST(MeshShape, EveryGroupPartitionsTheWorld) {
  MeshShape s = MeshShape::from_config(parallel_dims(2, 3, 1, 2, "tp-pp-fsdp-dp"), 12);
  for (DimSet dims : {DimSet{Dim::tp}, DimSet{Dim::dp}, DimSet{Dim::pp}, DimSet{Dim::dp, Dim::tp}}) {
    std::set<int> seen;
    for (int r = 0; r < 12; ++r) {
      auto g = s.group(r, dims);
      ASSERT_EQ(static_cast<int>(g.size()), s.size(dims));
      EXPECT_EQ(g[static_cast<std::size_t>(s.index_in_group(r, dims))], r);
      for (int m : g) EXPECT_EQ(s.group_index(m, dims), s.group_index(r, dims));  // same color
      if (s.index_in_group(r, dims) == 0) seen.insert(g.begin(), g.end());
    }
    EXPECT_EQ(static_cast<int>(seen.size()), 12);
  }
  // tp outermost: tp partners are world/2 apart.
  EXPECT_EQ(s.group(1, Dim::tp), (std::vector<int>{1, 7}));
}

TEST(MeshShape, ErrorsShowTheArithmetic) {
  EXPECT_EQ(user_error([] { MeshShape::from_config(parallel_dims(1, 2, 1, 4), 6); }),
            "parallel: dp(2) × fsdp(1) × tp(4) × pp(1) = 8 ≠ world size 6");
  EXPECT_EQ(user_error([] { MeshShape::from_config(parallel_dims(1, 0, 1, 4), 6); }),
            "parallel: world size 6 is not divisible by pp(1) × fsdp(1) × tp(4) = 4 (dp = 0 takes dp = world size / "
            "that)");
  const std::string head = "'; valid a permutation of pp, dp, fsdp, tp joined by '-' (default pp-dp-fsdp-tp): ";
  EXPECT_EQ(user_error([] { MeshShape::from_config(parallel_dims(1, 0, 1, 1, "pp-dp-tp"), 1); }),
            "parallel.order: given 'pp-dp-tp" + head + "it names 3 of the 4 dims");
  EXPECT_EQ(user_error([] { MeshShape::parse_order("pp-dp-dp-tp"); }),
            "parallel.order: given 'pp-dp-dp-tp" + head + "'dp' appears twice");
  EXPECT_EQ(user_error([] { MeshShape::parse_order("pp-ep-fsdp-tp"); }),
            "parallel.order: given 'pp-ep-fsdp-tp" + head + "'ep' is not a mesh dim");
  EXPECT_EQ(user_error([] { MeshShape::parse_order("pp-dp-fsdp-tp-"); }),
            "parallel.order: given 'pp-dp-fsdp-tp-" + head + "it ends in '-'");
  EXPECT_EQ(user_error([] { MeshShape::parse_order(""); }), "parallel.order: given '" + head + "it names 0 of the 4 dims");
  EXPECT_EQ(MeshShape::parse_order("tp-fsdp-dp-pp"), (std::vector<Dim>{Dim::tp, Dim::fsdp, Dim::dp, Dim::pp}));
}

// Built in code, a shape is the caller's contract: a broken one is a bug (Error), not the user's mistake.
TEST(MeshShape, ABrokenShapeInCodeIsABug) {
  const auto bug = [](const std::function<void()>& fn) {
    try {
      fn();
    } catch (const UserError&) {
      return false;
    } catch (const Error&) {
      return true;
    }
    return false;
  };
  EXPECT_TRUE(bug([] { MeshShape({Dim::pp, Dim::dp, Dim::tp}, {1, 1, 1, 1}); }));
  EXPECT_TRUE(bug([] { MeshShape({Dim::pp, Dim::dp, Dim::fsdp, Dim::tp}, {1, 0, 1, 1}); }));
}

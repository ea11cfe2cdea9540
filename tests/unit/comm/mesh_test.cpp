// MeshShape arithmetic (coordinates, groups, split colors/keys, config errors with the arithmetic) and Mesh
// over real CPU communicators, ranks as threads: each group's all_reduce sums exactly its members.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <functional>
#include <set>
#include <thread>

#include "meshtrain/comm/cpu_communicator.h"
#include "meshtrain/comm/mesh.h"
#include "meshtrain/core/error.h"
#include "support/test_support.h"

using namespace meshtrain;
using namespace meshtrain::comm;
using namespace std::chrono_literals;
using meshtrain::testing_support::user_error;

namespace {

ParallelConfig par(int64_t pp, int64_t dp, int64_t fsdp, int64_t tp, std::string order = "pp-dp-fsdp-tp") {
  ParallelConfig p;
  p.pp = pp;
  p.dp = dp;
  p.fsdp = fsdp;
  p.tp = tp;
  p.order = std::move(order);
  return p;
}

}  // namespace

TEST(MeshShape, DefaultOrderPutsTpInnermost) {
  MeshShape s = MeshShape::from_config(par(1, 2, 1, 4), 8);
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
  MeshShape s = MeshShape::from_config(par(2, 0, 2, 2), 16);  // dp = 16 / 8 = 2
  EXPECT_EQ(s.size(Dim::dp), 2);
  // HSDP: replicate (dp) × shard (fsdp) group of rank 0 in pp2·dp2·fsdp2·tp2: stride tp over dp·fsdp.
  EXPECT_EQ(s.group(0, {Dim::dp, Dim::fsdp}), (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(s.group(9, {Dim::dp, Dim::fsdp}), (std::vector<int>{9, 11, 13, 15}));
  EXPECT_EQ(s.size({Dim::dp, Dim::fsdp}), 4);
  EXPECT_EQ(s.group(3, Dim::pp), (std::vector<int>{3, 11}));
}

TEST(MeshShape, EveryGroupPartitionsTheWorld) {
  MeshShape s = MeshShape::from_config(par(2, 3, 1, 2, "tp-pp-fsdp-dp"), 12);
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
  EXPECT_EQ(user_error([] { MeshShape::from_config(par(1, 2, 1, 4), 6); }),
            "parallel: pp(1) × dp(2) × fsdp(1) × tp(4) = 8 ≠ world size 6");
  EXPECT_EQ(user_error([] { MeshShape::from_config(par(1, 0, 1, 4), 6); }),
            "parallel: world size 6 is not divisible by pp(1) × fsdp(1) × tp(4) = 4 (dp = 0 takes dp = world size / "
            "that)");
  EXPECT_NE(user_error([] { MeshShape::from_config(par(1, 0, 1, 1, "pp-dp-tp"), 1); }).find("permutation"),
            std::string::npos);
  EXPECT_NE(user_error([] { MeshShape::from_config(par(1, 0, 1, 1, "pp-dp-dp-tp"), 1); }).find("appears twice"),
            std::string::npos);
  EXPECT_NE(user_error([] { MeshShape::from_config(par(1, 0, 1, 1, "pp-ep-fsdp-tp"), 1); }).find("'ep' is not"),
            std::string::npos);
}

TEST(Mesh, WorldOfOneNeedsNoSplit) {
  CommPtr w = make_cpu_communicator(c10::make_intrusive<c10d::HashStore>(), 0, 1, "mesh1", 5000ms);
  Config cfg;
  Mesh m(cfg, w);
  EXPECT_EQ(m.comm(Dim::tp), w);
  EXPECT_EQ(m.comm("dp-fsdp"), w);
  EXPECT_EQ(m.describe(), "rank 0: pp0 dp0 fsdp0 tp0 of pp1 × dp1 × fsdp1 × tp1 (order pp-dp-fsdp-tp)");
  EXPECT_NE(user_error([&] { m.comm("ep"); }).find("'ep' is not a mesh dim"), std::string::npos);
  cfg.parallel.tp = 2;
  EXPECT_EQ(user_error([&] { Mesh bad(cfg, w); }), "parallel: world size 1 is not divisible by pp(1) × fsdp(1) × "
                                                   "tp(2) = 2 (dp = 0 takes dp = world size / that)");
}

// 8 ranks as threads: pp1 × dp2 × fsdp2 × tp2. Each rank contributes 1 << rank to every group's all_reduce, so
// the sum names exactly the members.
TEST(Mesh, GroupsReduceOverExactlyTheirMembers) {
  constexpr int n = 8;
  auto store = c10::make_intrusive<c10d::HashStore>();
  CpuCommOptions opts;
  opts.timeout = 30s;
  opts.host = "127.0.0.1";
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        Config cfg;
        cfg.parallel = par(1, 2, 2, 2);
        Mesh mesh(cfg, make_cpu_communicator(store, r, n, "meshtest", opts));
        const MeshShape& s = mesh.shape();
        // Same order on every rank (the collective contract), including a combined dim set and a cached repeat.
        for (DimSet dims : {DimSet{Dim::tp}, DimSet{Dim::dp}, DimSet{Dim::fsdp}, DimSet{Dim::dp, Dim::fsdp},
                            DimSet{Dim::tp}, DimSet{Dim::pp}}) {
          CommPtr c = mesh.comm(dims);
          MT_CHECK(c->size() == s.size(dims) && c->rank() == s.index_in_group(r, dims), "group rank");
          at::Tensor x = at::full({3}, int64_t{1} << r, at::kLong);
          c->all_reduce(x, ReduceOp::Sum)->wait();
          int64_t want = 0;
          for (int m : s.group(r, dims)) want |= int64_t{1} << m;
          MT_CHECK(x[2].item<int64_t>() == want, "rank ", r, ": group sum ", x[2].item<int64_t>(), " != ", want);
        }
        MT_CHECK(mesh.comm(Dim::tp) == mesh.comm("tp"), "not cached");
        MT_CHECK(mesh.comm(Dim::pp)->size() == 1, "pp group of one");
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
}

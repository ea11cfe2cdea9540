// Mesh over real CPU communicators, ranks as threads: each group's all_reduce sums exactly its members (the
// shape's arithmetic alone: tests/unit/core/mesh_shape_test.cpp).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <functional>
#include <thread>

#include "meshtrain/comm/cpu_communicator.h"
#include "meshtrain/comm/mesh.h"
#include "meshtrain/core/error.h"
#include "support/parallel_dims.h"
#include "support/test_support.h"

using namespace meshtrain;
using namespace meshtrain::comm;
using namespace std::chrono_literals;
using meshtrain::testing_support::parallel_dims;
using meshtrain::testing_support::user_error;

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
        cfg.parallel = parallel_dims(1, 2, 2, 2);
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

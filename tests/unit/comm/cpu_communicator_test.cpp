// CpuCommunicator in one process: world size 1 (no sockets), argument errors, and several ranks as threads
// sharing one in-process store (ring and direct paths, timeouts, a peer that goes away).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <functional>
#include <thread>

#include "comm/cpu/ring.h"
#include "comm/cpu/transfer.h"
#include "meshtrain/comm/cpu_communicator.h"
#include "meshtrain/core/error.h"
#include "support/rank_threads.h"

using namespace meshtrain;
using namespace meshtrain::comm;
using namespace std::chrono_literals;

namespace {

CommPtr single() { return make_cpu_communicator(c10::make_intrusive<c10d::HashStore>(), 0, 1, "solo", 5000ms); }

// Runs body(rank, comm) on `n` threads, one communicator each, all in group `group`.
void run_ranks(int n, const std::string& group, const std::function<void(int, Communicator&)>& body,
               CpuCommOptions opts = {}) {
  if (opts.timeout == CpuCommOptions{}.timeout) opts.timeout = 20s;
  const auto errors = testing_support::run_rank_threads(n, group, opts, [&](int r, CommPtr c) { body(r, *c); });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
}

}  // namespace

TEST(CpuCommunicator, WorldSizeOneIsTheIdentity) {
  CommPtr c = single();
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  EXPECT_EQ(c->backend_name(), "cpu");
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
    at::Tensor x = at::arange(10, at::kBFloat16);
    c->all_reduce(x, op)->wait();
    EXPECT_TRUE(at::equal(x, at::arange(10, at::kBFloat16)));
  }
  at::Tensor in = at::arange(7, at::kInt), out = at::zeros({7}, at::kInt);
  c->all_gather_into(out, in)->wait();
  EXPECT_TRUE(at::equal(out, in));
  out.zero_();
  c->reduce_scatter_into(out, in, ReduceOp::Sum)->wait();
  EXPECT_TRUE(at::equal(out, in));
  out.zero_();
  c->all_to_all(out, in)->wait();
  EXPECT_TRUE(at::equal(out, in));
  c->broadcast(in, 0)->wait();
  c->barrier();
  at::Tensor empty = at::empty({0}, at::kFloat);
  c->all_reduce(empty, ReduceOp::Sum)->wait();
  auto sub = c->split(3, 0);
  ASSERT_TRUE(sub);
  EXPECT_EQ(sub->size(), 1);
  EXPECT_EQ(c->split(-1, 0), nullptr);
}

TEST(CpuCommunicator, WaitIsIdempotent) {
  CommPtr c = single();
  at::Tensor x = at::ones({3});
  WorkPtr w = c->all_reduce(x, ReduceOp::Sum);
  w->wait();
  w->wait();
  EXPECT_TRUE(w->is_completed());
}

TEST(CpuCommunicator, ArgumentErrorsAreUserErrors) {
  CommPtr c = single();
  at::Tensor d = at::ones({4}, at::kDouble);
  EXPECT_THROW(c->all_reduce(d, ReduceOp::Sum), UserError);
  at::Tensor nc = at::ones({4, 4}).t();
  EXPECT_THROW(c->all_reduce(nc, ReduceOp::Sum), UserError);
  at::Tensor in = at::ones({4}), out = at::ones({5});
  EXPECT_THROW(c->all_gather_into(out, in), UserError);
  EXPECT_THROW(c->reduce_scatter_into(out, in, ReduceOp::Sum), UserError);
  at::Tensor i32 = at::ones({4}, at::kInt);
  at::Tensor f = at::ones({4});
  EXPECT_THROW(c->all_gather_into(i32, f), UserError);
  EXPECT_THROW(c->broadcast(f, 1), UserError);
  EXPECT_THROW(c->send(f, 0), UserError);  // to itself
  EXPECT_THROW(c->recv(f, 1), UserError);
  EXPECT_THROW(make_cpu_communicator(nullptr, 0, 2, "g", 1000ms), UserError);
  EXPECT_THROW(make_cpu_communicator(c10::make_intrusive<c10d::HashStore>(), 2, 2, "g", 1000ms), UserError);
}

TEST(Ring, ChunksPartitionUnevenSizes) {
  for (std::size_t numel : {0u, 1u, 7u, 10u, 1000003u}) {
    for (int parts : {1, 2, 3, 4, 8}) {
      std::size_t next = 0;
      for (int c = 0; c < parts; ++c) {
        auto ch = ring::chunk(numel, parts, c);
        EXPECT_EQ(ch.begin, next);
        EXPECT_LE(ch.count, ring::chunk(numel, parts, 0).count);
        next += ch.count;
      }
      EXPECT_EQ(next, numel);
    }
  }
}

class CpuCommunicatorThreads : public ::testing::TestWithParam<int> {};

TEST_P(CpuCommunicatorThreads, AllReduceSmallAndLargeEveryDtype) {
  const int n = GetParam();
  run_ranks(n, "t_allreduce", [n](int r, Communicator& c) {
    for (auto t : {at::kFloat, at::kBFloat16, at::kHalf, at::kInt, at::kLong}) {
      for (int64_t numel : {int64_t{0}, int64_t{1}, int64_t{n - 1}, int64_t{100003}}) {
        at::Tensor b = at::arange(numel, at::kLong).remainder(11).add_(1);
        at::Tensor x = (b * (r + 1)).to(t);
        c.all_reduce(x, ReduceOp::Sum)->wait();
        MT_CHECK(at::equal(x, (b * (n * (n + 1) / 2)).to(t)), "sum ", c10::toString(t), " n=", numel);
        x = (b * (r + 1)).to(t);
        c.all_reduce(x, ReduceOp::Max)->wait();
        MT_CHECK(at::equal(x, (b * n).to(t)), "max ", c10::toString(t), " n=", numel);
      }
    }
  });
}

TEST_P(CpuCommunicatorThreads, SplitMakesIndependentGroups) {
  const int n = GetParam();
  run_ranks(n, "t_split", [](int r, Communicator& c) {
    auto sub = c.split(r % 2, r);
    at::Tensor x = at::ones({5}, at::kLong);
    sub->all_reduce(x, ReduceOp::Sum)->wait();
    MT_CHECK(x[0].item<int64_t>() == sub->size(), "split group sum");
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, CpuCommunicatorThreads, ::testing::Values(2, 3));

TEST(CpuCommunicatorTcp, AllReduceOverTcp) {
  CpuCommOptions opts;
  opts.same_host_unix = false;
  run_ranks(3, "t_tcp", [](int r, Communicator& c) {
    at::Tensor x = at::full({300001}, static_cast<double>(r + 1), at::kFloat);
    c.all_reduce(x, ReduceOp::Sum)->wait();
    MT_CHECK(at::equal(x, at::full({300001}, 6.0, at::kFloat)), "tcp all_reduce");
  }, opts);
}

TEST(CpuCommunicatorTimeout, SkippedCollectiveTimesOutNamingThePeer) {
  CpuCommOptions opts;
  opts.timeout = 500ms;
  opts.same_host_unix = false;  // TCP here; the other threaded tests use Unix sockets
  run_ranks(2, "t_timeout", [](int r, Communicator& c) {
    if (r == 1) {
      std::this_thread::sleep_for(1500ms);  // skips the all_reduce but keeps its sockets open
      return;
    }
    at::Tensor x = at::ones({4});
    auto t0 = std::chrono::steady_clock::now();
    try {
      c.all_reduce(x, ReduceOp::Sum)->wait();
      FAIL() << "all_reduce completed without rank 1";
    } catch (const CommTimeoutError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("all_reduce(sum) seq 0 in group 't_timeout' (rank 0 of 2): timed out after 500 ms"),
                std::string::npos) << msg;
      EXPECT_NE(msg.find("waiting for rank(s) 1"), std::string::npos) << msg;
    }
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 1400ms);
    // Broken afterwards: the next op fails at once instead of reading a desynchronised stream.
    at::Tensor y = at::ones({4});
    EXPECT_THROW(c.all_reduce(y, ReduceOp::Sum)->wait(), Error);
  }, opts);
}

TEST(CpuCommunicatorTimeout, PeerThatGoesAwayIsAnErrorNotAHang) {
  CpuCommOptions opts;
  opts.timeout = 10s;
  run_ranks(2, "t_gone", [](int r, Communicator& c) {
    if (r == 1) return;  // destroys its communicator: its sockets close
    std::this_thread::sleep_for(200ms);
    at::Tensor x = at::ones({1 << 20});
    auto t0 = std::chrono::steady_clock::now();
    try {
      c.all_reduce(x, ReduceOp::Sum)->wait();
      FAIL() << "all_reduce completed without rank 1";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  }, opts);
}

TEST(CpuCommunicatorCheck, MismatchedOpsAreNamedNotMixedUp) {
  CpuCommOptions opts;
  opts.timeout = 5s;
  opts.check_ops = true;
  std::string errors[2];
  auto store = c10::make_intrusive<c10d::HashStore>();
  opts.host = "127.0.0.1";
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      CommPtr c = make_cpu_communicator(store, r, 2, "t_check", opts);
      at::Tensor x = at::ones({64});
      c->all_reduce(x, ReduceOp::Sum)->wait();  // matched: fine
      MT_CHECK(x[0].item<float>() == 2.0f, "checked all_reduce");
      try {
        if (r == 0) c->all_reduce(x, ReduceOp::Sum)->wait();
        else c->broadcast(x, 0)->wait();
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_NE(errors[0].find("ops out of step with rank 1: this rank runs 'all_reduce(sum) Float[64]' (seq 1), "
                           "rank 1 runs 'broadcast(root 0) Float[64]' (seq 1)"),
            std::string::npos)
      << errors[0];
  EXPECT_NE(errors[1].find("ops out of step with rank 0"), std::string::npos) << errors[1];
}

// comm_worker: the multi-process test of the CPU communicator. Started once per rank by meshrun (or torchrun,
// or by hand with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT), it runs every op for every dtype and several sizes
// (0, 1, 7, world_size-1, 1000003) and checks closed-form results; values are small integers so that bf16 and
// fp16 results are exact. Exit 0 when every check passes.
//   comm_worker                 all ops, dtypes, sizes; split; concurrent ops on two groups
//   comm_worker --timeout-test  the last rank skips a collective: the others must fail with the timeout error
//                               within the timeout (they exit 1, printing "expected timeout: ...")
//   --backend cpu|nccl|auto     which Communicator (default cpu); nccl runs on cuda:LOCAL_RANK and exits 77
//                               (skipped) when this build has no NCCL or fewer GPUs than local ranks are visible
#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "meshtrain/comm/comm_timeout_error.h"
#include "meshtrain/comm/communicator_factory.h"
#include "meshtrain/comm/cpu_communicator.h"
#include "meshtrain/comm/store.h"
#include "meshtrain/core/crash_handler.h"
#include "meshtrain/comm/world_info.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"

using namespace meshtrain;
using namespace meshtrain::comm;

namespace {

int g_checks = 0;
at::Device g_dev{at::kCPU};  // where the tensors handed to the communicator live
bool g_nccl = false;

// x on the communicator's device.
at::Tensor dev(const at::Tensor& x) { return x.to(g_dev); }

const std::vector<at::ScalarType> kDtypes = {at::kFloat, at::kBFloat16, at::kHalf, at::kInt, at::kLong};

bool is_half(at::ScalarType t) { return t == at::kBFloat16 || t == at::kHalf; }

// b(i): a position-dependent pattern small enough to stay exact in bf16 after summing over 4 ranks.
at::Tensor pattern(int64_t n, at::ScalarType t) {
  return at::arange(n, at::kLong).remainder(is_half(t) ? 13 : 1009).add_(1);
}

// `approx`: NCCL's average of floats pre-scales by 1/size, which is inexact for sizes other than powers of 2.
void expect_equal(const at::Tensor& got_any, const at::Tensor& want_any, const std::string& what, bool approx = false) {
  ++g_checks;
  const at::Tensor got = got_any.cpu();
  const at::Tensor want = want_any.cpu();  // expectations built with *_like(result) live on the GPU
  if (got.scalar_type() == want.scalar_type() && got.sizes() == want.sizes() && at::equal(got, want)) return;
  const double rtol = got.scalar_type() == at::kFloat ? 1e-6 : 1e-2;
  if (approx && got.sizes() == want.sizes() && at::allclose(got.to(at::kDouble), want.to(at::kDouble), rtol, 0)) {
    return;
  }
  std::string detail;
  if (got.numel() == want.numel() && got.numel() > 0) {
    auto bad = got.to(at::kDouble).ne(want.to(at::kDouble)).nonzero();
    if (bad.numel() > 0) {
      int64_t i = bad[0][0].item<int64_t>();
      detail = cat(" (", bad.size(0), " mismatches; first at ", i, ": got ", got[i].item<double>(), ", want ",
                   want[i].item<double>(), ")");
    }
  }
  throw Error(cat("check failed: ", what, detail));
}

std::string tag(const char* op, at::ScalarType t, int64_t n) { return cat(op, " ", c10::toString(t), " n=", n); }

void check_all_reduce(Communicator& c, at::ScalarType t, int64_t n) {
  const int64_t P = c.size(), r = c.rank();
  const at::Tensor b = pattern(n, t);
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
    at::Tensor x = dev((b * (r + 1)).to(t));
    c.all_reduce(x, op)->wait();
    at::Tensor want;
    switch (op) {
      case ReduceOp::Sum: want = b * (P * (P + 1) / 2); break;
      case ReduceOp::Max: want = b * P; break;
      case ReduceOp::Min: want = b.clone(); break;
      case ReduceOp::Avg:
        want = at::isFloatingType(t) ? b.to(at::kDouble) * ((P + 1) / 2.0)
                                     : at::div(b * (P * (P + 1) / 2), P, "trunc");
        break;
    }
    expect_equal(x, want.to(t), tag(cat("all_reduce(", static_cast<int>(op), ")").c_str(), t, n),
                 g_nccl && op == ReduceOp::Avg && at::isFloatingType(t));
  }
}

void check_all_gather(Communicator& c, at::ScalarType t, int64_t n) {
  const int64_t P = c.size(), r = c.rank();
  const at::Tensor b = pattern(n, t);
  at::Tensor in = dev((b * (r + 1)).to(t));
  at::Tensor out = dev(at::full({P * n}, -1, t));
  c.all_gather_into(out, in)->wait();
  at::Tensor want = at::cat({b.unsqueeze(0) * at::arange(1, P + 1, at::kLong).unsqueeze(1)}).reshape({P * n});
  expect_equal(out, want.to(t), tag("all_gather", t, n));
}

void check_reduce_scatter(Communicator& c, at::ScalarType t, int64_t n) {
  const int64_t P = c.size(), r = c.rank();
  const at::Tensor b = pattern(P * n, t);
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
    at::Tensor in = dev((b * (r + 1)).to(t));
    at::Tensor out = dev(at::full({n}, -1, t));
    c.reduce_scatter_into(out, in, op)->wait();
    at::Tensor mine = b.slice(0, r * n, (r + 1) * n);
    at::Tensor want = op == ReduceOp::Sum   ? mine * (P * (P + 1) / 2)
                      : op == ReduceOp::Max ? mine * P
                      : at::isFloatingType(t) ? mine.to(at::kDouble) * ((P + 1) / 2.0)
                                              : at::div(mine * (P * (P + 1) / 2), P, "trunc");
    expect_equal(out, want.to(t), tag(cat("reduce_scatter(", static_cast<int>(op), ")").c_str(), t, n),
                 g_nccl && op == ReduceOp::Avg && at::isFloatingType(t));
  }
}

void check_broadcast(Communicator& c, at::ScalarType t, int64_t n) {
  const at::Tensor b = pattern(n, t);
  for (int root = 0; root < c.size(); ++root) {
    at::Tensor x = dev(c.rank() == root ? (b * (root + 1)).to(t) : at::full({n}, -1, t));
    c.broadcast(x, root)->wait();
    expect_equal(x, (b * (root + 1)).to(t), tag(cat("broadcast(root ", root, ")").c_str(), t, n));
  }
}

void check_send_recv(Communicator& c, at::ScalarType t, int64_t n) {
  const int P = c.size(), r = c.rank();
  const int right = (r + 1) % P, left = (r + P - 1) % P;
  const at::Tensor b = pattern(n, t);
  at::Tensor out = dev((b * (r + 1)).to(t));
  at::Tensor in = dev(at::full({n}, -1, t));
  // Send and recv are blocking and in order (no group calls): alternate so that the ring cannot deadlock.
  if (r % 2 == 0) {
    c.send(out, right)->wait();
    c.recv(in, left)->wait();
  } else {
    c.recv(in, left)->wait();
    c.send(out, right)->wait();
  }
  expect_equal(in, (b * (left + 1)).to(t), tag("send/recv", t, n));
}

void check_all_to_all(Communicator& c, at::ScalarType t, int64_t n) {
  const int64_t P = c.size(), r = c.rank();
  // chunk j of rank s's input: (s*P + j + 1) + 16 * (i % m), exact in bf16 for P ≤ 4.
  auto chunk_val = [&](int64_t s, int64_t j) {
    return at::arange(n, at::kLong).remainder(is_half(t) ? 4 : 1009).mul_(16).add_(s * P + j + 1);
  };
  std::vector<at::Tensor> mine, want;
  for (int64_t j = 0; j < P; ++j) mine.push_back(chunk_val(r, j));
  for (int64_t s = 0; s < P; ++s) want.push_back(chunk_val(s, r));
  at::Tensor in = dev(at::cat(mine).to(t));
  at::Tensor out = dev(at::full({P * n}, -1, t));
  c.all_to_all(out, in)->wait();
  expect_equal(out, at::cat(want).to(t), tag("all_to_all", t, n));
}

void check_async_order(Communicator& c) {
  // Many ops in flight at once: they must complete in issue order with the right results.
  const int64_t P = c.size();
  std::vector<at::Tensor> xs;
  std::vector<WorkPtr> ws;
  for (int i = 0; i < 16; ++i) {
    xs.push_back(dev(at::full({i % 2 ? 300001 : 5}, static_cast<double>(i + c.rank()), at::kFloat)));
    ws.push_back(c.all_reduce(xs.back(), ReduceOp::Sum));
  }
  for (auto& w : ws) w->wait();
  for (int i = 0; i < 16; ++i) {
    const double want = static_cast<double>(i * P + P * (P - 1) / 2);
    expect_equal(xs[i], at::full_like(xs[i], want), cat("async all_reduce #", i));
  }
}

void check_split(Communicator& world) {
  const int P = world.size(), r = world.rank();
  const int color = r % 2;
  auto sub = world.split(color, -r);  // key -rank: reversed order inside each group
  MT_CHECK(sub, "split returned null for color ", color);
  std::vector<int> members;
  for (int p = P - 1; p >= 0; --p) {
    if (p % 2 == color) members.push_back(p);
  }
  const int want_rank = static_cast<int>(std::find(members.begin(), members.end(), r) - members.begin());
  ++g_checks;
  MT_CHECK(sub->size() == static_cast<int>(members.size()) && sub->rank() == want_rank, "split: got rank ",
           sub->rank(), " of ", sub->size(), ", want ", want_rank, " of ", members.size());
  // Concurrent ops on both groups: each group's thread orders its own ops.
  at::Tensor a = dev(at::full({100003}, static_cast<double>(r), at::kLong));
  at::Tensor w = dev(at::full({1000}, 1.0, at::kFloat));
  auto wa = sub->all_reduce(a, ReduceOp::Sum);
  auto ww = world.all_reduce(w, ReduceOp::Sum);
  wa->wait();
  ww->wait();
  int64_t sum = 0;
  for (int m : members) sum += m;
  expect_equal(a, at::full({100003}, sum, at::kLong), "split all_reduce");
  expect_equal(w, at::full({1000}, static_cast<double>(P), at::kFloat), "world all_reduce beside split");
  auto none = world.split(r == 0 ? -1 : 0, r);
  ++g_checks;
  MT_CHECK((r == 0) == (none == nullptr), "split with color -1 must return nullptr exactly on that rank");
  if (none) {
    at::Tensor x = dev(at::ones({7}, at::kInt));
    none->all_reduce(x, ReduceOp::Sum)->wait();
    expect_equal(x, at::full({7}, P - 1, at::kInt), "split excluding rank 0");
  }
}

int run_all(Communicator& c) {
  const int64_t P = c.size();
  std::vector<int64_t> sizes = {0, 1, 7, P - 1, 1000003};
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  const auto t0 = std::chrono::steady_clock::now();
  for (at::ScalarType t : kDtypes) {
    for (int64_t n : sizes) {
      check_all_reduce(c, t, n);
      check_all_gather(c, t, n);
      check_reduce_scatter(c, t, n);
      check_broadcast(c, t, n);
      if (P > 1) check_send_recv(c, t, n);
      check_all_to_all(c, t, n);
    }
    c.barrier();
  }
  check_async_order(c);
  if (P > 1) check_split(c);
  c.barrier();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("comm_worker rank %d/%d: %d checks passed in %.2f s\n", c.rank(), c.size(), g_checks, s);
  return 0;
}

int run_timeout_test(Communicator& c, std::chrono::milliseconds timeout) {
  c.barrier();
  if (c.rank() == c.size() - 1) {
    // Skip the collective and stay alive (an exited rank would be a closed connection, not a timeout).
    std::this_thread::sleep_for(timeout * 4);
    return 0;
  }
  at::Tensor x = dev(at::ones({16}, at::kFloat));
  const auto t0 = std::chrono::steady_clock::now();
  try {
    c.all_reduce(x, ReduceOp::Sum)->wait();
    // GPU: wait() only orders this rank's stream; the host learns of the timeout at its next blocking op.
    c.barrier();
  } catch (const CommTimeoutError& e) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
    std::fprintf(stderr, "comm_worker rank %d: expected timeout after %lld ms: %s\n", c.rank(),
                 static_cast<long long>(ms.count()), e.what());
    if (ms > timeout + std::chrono::milliseconds(1500)) {
      std::fprintf(stderr, "comm_worker rank %d: FAIL: the timeout fired late\n", c.rank());
      return 3;
    }
    // Stay up a moment: the skipping rank's progress board polls the store for the dump request about once
    // a second, and the launcher stops it as soon as this rank exits.
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    return 1;  // a rank whose collective timed out fails, as a training worker would
  }
  std::fprintf(stderr, "comm_worker rank %d: FAIL: all_reduce completed without the last rank\n", c.rank());
  return 4;
}

}  // namespace

int main(int argc, char** argv) {
  meshtrain::install_crash_handler("comm_worker");
  bool timeout_test = false;
  std::string backend = "cpu";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--timeout-test") == 0) {
      timeout_test = true;
    } else if (std::strcmp(argv[i], "--backend") == 0 && i + 1 < argc) {
      backend = argv[++i];
    } else {
      std::fprintf(stderr, "usage: comm_worker [--timeout-test] [--backend cpu|nccl|auto]\n");
      return 2;
    }
  }
  try {
    const WorldInfo world = world_info_from_env();
    log::init(log::Options{.rank = world.rank});
    at::set_num_threads(1);  // several ranks share the cores: intra-op thread pools would only oversubscribe them
    const auto timeout = std::chrono::milliseconds(timeout_test ? 2000 : 60000);
    const CommBackend asked = parse_enum<CommBackend>(backend, "--backend");
    const bool gpu = asked == CommBackend::nccl || (asked == CommBackend::automatic && nccl_built() && at::hasCUDA());
    if (gpu && (!nccl_built() || !at::hasCUDA() || static_cast<int>(at::getNumGPUs()) < world.local_world_size)) {
      std::printf("comm_worker: SKIP: --backend %s needs NCCL and %d GPU(s); this build %s NCCL, %d visible\n",
                  backend.c_str(), world.local_world_size, nccl_built() ? "has" : "lacks",
                  at::hasCUDA() ? static_cast<int>(at::getNumGPUs()) : 0);
      return 77;
    }
    StorePtr store = connect_store_from_env(std::chrono::milliseconds(60000));
    CommSetup setup;
    setup.backend = asked;
    setup.device = gpu ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(world.local_rank)) : at::Device(at::kCPU);
    setup.timeout = timeout;
    g_dev = setup.device;
    CommPtr comm = make_communicator(world, setup, store);
    g_nccl = comm->device().is_cuda();  // the GPU backend: its floating-point Avg is checked with a tolerance
    std::printf("comm_worker rank %d/%d: backend %s on %s\n", world.rank, world.world_size,
                comm->backend_name().c_str(), g_dev.str().c_str());
    return timeout_test ? run_timeout_test(*comm, timeout) : run_all(*comm);
  } catch (const UserError& e) {
    std::fprintf(stderr, "comm_worker: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "comm_worker: error: %s\n", e.what());
    return 1;
  }
}

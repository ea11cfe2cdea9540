// Collective benchmark; see bench.h.
#include "meshtrain/comm/bench.h"

#include <ATen/ATen.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"

namespace meshtrain::comm {

double bus_factor(const std::string& op, int n) {
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "all_gather" || op == "reduce_scatter") return static_cast<double>(n - 1) / n;
  if (op == "broadcast") return 1.0;
  throw UserError(cat("bench: unknown op '", op, "' (valid: all_reduce, all_gather, reduce_scatter, broadcast)"));
}

CommSetup bench_comm_setup(CommBackend backend, const WorldInfo& world) {
  const bool gpu = backend == CommBackend::nccl ||
                   (backend == CommBackend::automatic && nccl_built() && at::hasCUDA() && at::getNumGPUs() > 0);
  CommSetup setup;
  setup.backend = backend;
  setup.device =
      gpu ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(world.local_rank)) : c10::Device(c10::kCPU);
  setup.timeout = std::chrono::minutes(2);
  setup.group = "bench";
  setup.origin = "--backend";
  return setup;
}

namespace {

// GPU ops are asynchronous: a Work's wait() only orders the caller's stream, so a timed loop ends by waiting
// for that stream on the host. CPU ops are done when wait() returns.
void sync(const c10::Device& device) {
  if (device.is_cpu()) return;
  c10::impl::VirtualGuardImpl impl(device.type());
  impl.getStream(device).synchronize();
}

WorkPtr issue(Communicator& c, const std::string& op, at::Tensor& full, at::Tensor& part) {
  if (op == "all_reduce") return c.all_reduce(full, ReduceOp::Sum);
  if (op == "all_gather") return c.all_gather_into(full, part);
  if (op == "reduce_scatter") return c.reduce_scatter_into(part, full, ReduceOp::Sum);
  return c.broadcast(full, 0);
}

}  // namespace

std::vector<BenchResult> run_bench(Communicator& c, const BenchOptions& o) {
  std::vector<BenchResult> out;
  const int n = c.size();
  const std::size_t es = c10::elementSize(o.dtype);
  for (const std::string& op : o.ops) {
    const double factor = bus_factor(op, n);
    for (std::size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
      // Full buffer of `bytes`, rounded down to a multiple of size × element size so that every rank's part
      // is whole.
      const int64_t per_rank = static_cast<int64_t>(bytes / es / static_cast<std::size_t>(n));
      if (per_rank == 0) continue;
      const auto opts = at::TensorOptions().dtype(o.dtype).device(o.device);
      at::Tensor full = at::ones({per_rank * n}, opts);
      at::Tensor part = at::ones({per_rank}, opts);
      for (int i = 0; i < o.warmup; ++i) issue(c, op, full, part)->wait();
      sync(o.device);
      // Calibrate with 3 ops, then run the count rank 0 derives from them: every rank must issue exactly the
      // same ops (a rank deciding on its own clock would desynchronise the group).
      c.barrier();
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 3; ++i) issue(c, op, full, part)->wait();
      sync(o.device);
      const double per_op = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 3;
      at::Tensor it = at::full({1}, static_cast<int64_t>(std::max(3.0, o.min_seconds / std::max(per_op, 1e-9))),
                               at::TensorOptions().dtype(at::kLong).device(o.device));
      c.broadcast(it, 0)->wait();
      const int64_t target = std::min<int64_t>(it.item<int64_t>(), 100000);
      c.barrier();
      t0 = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < target; ++i) issue(c, op, full, part)->wait();
      sync(o.device);
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / target;
      at::Tensor t = at::full({1}, static_cast<int64_t>(secs * 1e9),
                              at::TensorOptions().dtype(at::kLong).device(o.device));  // ns: max over ranks
      c.all_reduce(t, ReduceOp::Max)->wait();
      secs = static_cast<double>(t.item<int64_t>()) * 1e-9;
      BenchResult r;
      r.op = op;
      r.bytes = static_cast<std::size_t>(per_rank * n) * es;
      r.iters = static_cast<int>(target);
      r.seconds = secs;
      r.algbw_gbs = static_cast<double>(r.bytes) / secs / 1e9;
      r.busbw_gbs = r.algbw_gbs * factor;
      out.push_back(r);
    }
  }
  return out;
}

std::string bench_table(const std::vector<BenchResult>& rows) {
  std::string s = log::sprintf("%-16s %12s %7s %12s %10s %10s\n", "op", "bytes", "iters", "time(us)",
                               "algbw GB/s", "busbw GB/s");
  for (const auto& r : rows) {
    s += log::sprintf("%-16s %12zu %7d %12.1f %10.3f %10.3f\n", r.op.c_str(), r.bytes, r.iters, r.seconds * 1e6,
                      r.algbw_gbs, r.busbw_gbs);
  }
  return s;
}

std::string bench_json(const std::vector<BenchResult>& rows, const std::string& backend, int world_size) {
  std::string s = log::sprintf("{\"backend\": \"%s\", \"world_size\": %d, \"results\": [", backend.c_str(), world_size);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    s += log::sprintf("%s\n  {\"op\": \"%s\", \"bytes\": %zu, \"iters\": %d, \"time_us\": %.3f, \"algbw_gbs\": %.4f, "
                      "\"busbw_gbs\": %.4f}",
                      i ? "," : "", r.op.c_str(), r.bytes, r.iters, r.seconds * 1e6, r.algbw_gbs, r.busbw_gbs);
  }
  return s + "\n]}\n";
}

}  // namespace meshtrain::comm

// Collective benchmark in nccl-tests' spirit, for any Communicator: for each op and size, the mean time per
// op, algbw = bytes / time and busbw = algbw × the op's bus factor (all_reduce 2(n-1)/n, all_gather and
// reduce_scatter (n-1)/n, broadcast 1), with `bytes` the size of the full (gathered / unscattered) buffer.
// Collective: every rank must call run_bench with the same options.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstddef>
#include <string>
#include <vector>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/comm/communicator_factory.h"

namespace meshtrain::comm {

struct BenchOptions {
  std::vector<std::string> ops = {"all_reduce", "all_gather", "reduce_scatter"};  // also "broadcast"
  std::size_t min_bytes = std::size_t(1) << 10;   // sizes from min_bytes to max_bytes, ×2 each step
  std::size_t max_bytes = std::size_t(64) << 20;
  c10::ScalarType dtype = c10::ScalarType::Float;
  c10::Device device{c10::kCPU};  // where the buffers live (the communicator's device: cuda:i for nccl)
  int warmup = 2;  // untimed iterations per size
  double min_seconds = 0.2;  // iterate each size at least this long (and at least 3 times)
};

struct BenchResult {
  std::string op;
  std::size_t bytes = 0;  // full buffer size (see above)
  int iters = 0;
  double seconds = 0;     // mean time per op, max over ranks
  double algbw_gbs = 0;   // GB/s (1e9)
  double busbw_gbs = 0;
};

double bus_factor(const std::string& op, int world_size);

// The communicator `meshtrain bench comm --backend B` measures: nccl (or auto where NCCL is built and a GPU is
// visible) on this rank's GPU, cuda:LOCAL_RANK, as the trainer places ranks; else the CPU backend on the CPU.
CommSetup bench_comm_setup(CommBackend backend, const WorldInfo& world);

std::vector<BenchResult> run_bench(Communicator& comm, const BenchOptions& opts);

// A fixed-width table (op, bytes, iters, time us, algbw, busbw) and a JSON array of the same rows.
std::string bench_table(const std::vector<BenchResult>& rows);
std::string bench_json(const std::vector<BenchResult>& rows, const std::string& backend, int world_size);

}  // namespace meshtrain::comm

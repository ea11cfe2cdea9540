// comm_bench: the C++ side of scripts/bench_comm_gloo.py. One process per rank (meshrun, torchrun or by hand);
// rank 0 prints the table and writes JSON.
//   comm_bench [--min-bytes B] [--max-bytes B] [--ops all_reduce,all_gather,...] [--json FILE]
#include <ATen/ATen.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "meshtrain/comm/bench.h"
#include "meshtrain/comm/cpu_communicator.h"
#include "meshtrain/comm/store.h"
#include "meshtrain/comm/world_info.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"

using namespace meshtrain;
using namespace meshtrain::comm;

int main(int argc, char** argv) {
  try {
    BenchOptions o;
    std::string json_path;
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      MT_USER_CHECK(i + 1 < argc, "comm_bench: ", a, " needs a value");
      std::string v = argv[++i];
      if (a == "--min-bytes") o.min_bytes = std::stoull(v);
      else if (a == "--max-bytes") o.max_bytes = std::stoull(v);
      else if (a == "--min-seconds") o.min_seconds = std::stod(v);
      else if (a == "--json") json_path = v;
      else if (a == "--ops") {
        o.ops.clear();
        std::stringstream ss(v);
        for (std::string op; std::getline(ss, op, ',');) o.ops.push_back(op);
      } else {
        throw UserError(cat("comm_bench: unknown flag ", a));
      }
    }
    const WorldInfo world = world_info_from_env();
    log::init(log::Options{.rank = world.rank});
    at::set_num_threads(1);
    StorePtr store = connect_store_from_env(std::chrono::minutes(2));
    CommPtr comm = make_cpu_communicator(store, world.rank, world.world_size, "bench", std::chrono::minutes(2));
    auto rows = run_bench(*comm, o);
    if (world.rank == 0) {
      std::fputs(bench_table(rows).c_str(), stdout);
      if (!json_path.empty()) std::ofstream(json_path) << bench_json(rows, "meshtrain-cpu", world.world_size);
    }
    return 0;
  } catch (const UserError& e) {
    std::fprintf(stderr, "comm_bench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "comm_bench: error: %s\n", e.what());
    return 1;
  }
}

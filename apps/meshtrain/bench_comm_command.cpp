// meshtrain bench comm [options]: collective bandwidth per op and size, one process per rank.
#include <ATen/Parallel.h>

#include <cstdio>
#include <sstream>

#include "cli.h"
#include "commands.h"
#include "meshtrain/comm/bench.h"
#include "meshtrain/comm/communicator_factory.h"
#include "meshtrain/comm/world_info.h"
#include "meshtrain/core/byte_size.h"
#include "meshtrain/core/enum_names.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"

namespace meshtrain::cli {
namespace {

comm::BenchOptions bench_options(const cxxopts::ParseResult& r) {
  comm::BenchOptions bo;
  bo.ops.clear();
  std::stringstream ss(r["ops"].as<std::string>());
  for (std::string op; std::getline(ss, op, ',');) bo.ops.push_back(op);
  bo.min_bytes = parse_bytes("--min-bytes", r["min-bytes"].as<std::string>());
  bo.max_bytes = parse_bytes("--max-bytes", r["max-bytes"].as<std::string>());
  bo.min_seconds = r["min-seconds"].as<double>();
  MT_USER_CHECK(bo.min_bytes <= bo.max_bytes, "--min-bytes must not exceed --max-bytes");
  return bo;
}

}  // namespace

int cmd_bench_comm(int argc, char** argv) {
  cxxopts::Options o("meshtrain bench comm",
                     "Collective benchmark in nccl-tests' spirit: for each op and size (×2 steps), time, algbw and "
                     "busbw. Run one process per rank under meshrun or torchrun; rank 0 prints the table.");
  o.add_options()("backend", "auto | nccl | cpu (auto: nccl where built with it and a GPU is visible, else cpu)",
                  cxxopts::value<std::string>()->default_value("auto"))(
      "ops", "comma-separated: all_reduce, all_gather, reduce_scatter, broadcast",
                  cxxopts::value<std::string>()->default_value("all_reduce,all_gather,reduce_scatter"))(
      "min-bytes", "smallest buffer (K/M/G suffixes)", cxxopts::value<std::string>()->default_value("1K"))(
      "max-bytes", "largest buffer", cxxopts::value<std::string>()->default_value("64M"))(
      "min-seconds", "time each size at least this long", cxxopts::value<double>()->default_value("0.2"))(
      "json", "also write the rows as JSON to FILE (rank 0)", cxxopts::value<std::string>())(
      "h,help", "show this help")("what", "", cxxopts::value<std::vector<std::string>>());
  o.parse_positional({"what"});
  o.positional_help("comm");
  auto r = parse(o, argc, argv);
  comm::BenchOptions bo = bench_options(r);

  const auto world = comm::world_info_from_env();
  log::init({.rank = world.world_size > 1 ? world.rank : -1});
  at::set_num_threads(1);  // one intra-op thread per rank, as torch.distributed benchmarks run
  const CommBackend backend = parse_enum<CommBackend>(r["backend"].as<std::string>(), "--backend");
  const comm::CommSetup setup = comm::bench_comm_setup(backend, world);
  auto c = comm::make_communicator(world, setup);
  bo.device = setup.device;
  auto rows = comm::run_bench(*c, bo);
  if (world.rank != 0) return 0;
  std::printf("# backend %s on %s, %d ranks, fp32\n%s", c->backend_name().c_str(), setup.device.str().c_str(),
              world.world_size, comm::bench_table(rows).c_str());
  write_json_option(r, comm::bench_json(rows, "meshtrain-" + c->backend_name(), world.world_size));
  return 0;
}

}  // namespace meshtrain::cli

// meshtrain bench ckpt [options]: checkpoint save/load throughput against the disk's own rates.
#include <cstdio>

#include "cli.h"
#include "commands.h"
#include "meshtrain/ckpt/ckpt_bench.h"
#include "meshtrain/core/byte_size.h"
#include "meshtrain/core/error.h"

namespace meshtrain::cli {

int cmd_bench_ckpt(int argc, char** argv) {
  cxxopts::Options o("meshtrain bench ckpt",
                     "Checkpoint save and load throughput (one process) against the disk's own sequential write "
                     "(with fsync) and cold read rates, measured in the same run and directory; async save's "
                     "blocking time.");
  o.add_options()("dir", "directory on the disk to measure", cxxopts::value<std::string>()->default_value("."))(
      "bytes", "total tensor bytes (K/M/G suffixes)", cxxopts::value<std::string>()->default_value("1G"))(
      "tensors", "number of tensors", cxxopts::value<int>()->default_value("64"))(
      "repeats", "best of N", cxxopts::value<int>()->default_value("2"))(
      "device", "where the tensors live: cpu | cuda", cxxopts::value<std::string>()->default_value("cpu"))(
      "json", "also write the rows as JSON to FILE", cxxopts::value<std::string>())("h,help", "show this help")(
      "what", "", cxxopts::value<std::vector<std::string>>());
  o.parse_positional({"what"});
  o.positional_help("ckpt");
  auto r = parse(o, argc, argv);
  ckpt::CkptBenchOptions bo{.dir = r["dir"].as<std::string>(),
                            .bytes = parse_bytes("--bytes", r["bytes"].as<std::string>()),
                            .tensors = r["tensors"].as<int>(), .repeats = r["repeats"].as<int>(),
                            .device = r["device"].as<std::string>()};
  MT_USER_CHECK(bo.repeats >= 1, "--repeats: given ", bo.repeats, "; valid: 1 or more");
  auto rows = ckpt::run_ckpt_bench(bo);
  std::printf("# checkpoint benchmark in %s, %d fp32 tensors on %s, best of %d\n%s", bo.dir.c_str(), bo.tensors,
              bo.device.c_str(), bo.repeats, ckpt::ckpt_bench_table(rows).c_str());
  write_json_option(r, ckpt::ckpt_bench_json(rows));
  return 0;
}

}  // namespace meshtrain::cli

// meshtrain: the worker and the tool box. CLI only — every subcommand calls into the library.
//   meshtrain train CONFIG [--set k=v]…     train (what meshrun runs for a config)
//   meshtrain config CONFIG [--set k=v]…    print the resolved config; exit 2 when invalid
//   meshtrain config --docs                 print the config reference (docs/config.md)
//   meshtrain prepare TEXT --out PREFIX     byte-level token shards from a text file
//   meshtrain generate CKPT --prompt TEXT   sample from a checkpoint
//   meshtrain bench comm [options]          collective benchmark (under meshrun, one process per rank)
//   meshtrain bench ckpt [options]          checkpoint save/load throughput vs the disk's
//   meshtrain export CKPT --format hf OUT   a checkpoint as a Hugging Face model directory
//   meshtrain import HF_DIR OUT_CKPT        a Hugging Face Llama/GPT-2 as a meshtrain checkpoint + config
#include <cxxopts.hpp>

#include <ATen/Parallel.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "meshtrain/ckpt/checkpoint.h"
#include "meshtrain/ckpt/ckpt_bench.h"
#include "meshtrain/ckpt/hf_files.h"
#include "meshtrain/comm/bench.h"
#include "meshtrain/comm/cpu_communicator.h"
#include "meshtrain/comm/store.h"
#include "meshtrain/comm/world_info.h"
#include "meshtrain/core/config.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"
#include "meshtrain/data/byte_tokens.h"
#include "meshtrain/data/prepare.h"
#include "meshtrain/model/generate.h"
#include "meshtrain/train/trainer.h"

using namespace meshtrain;

namespace {

constexpr const char* kUsage =
    "usage: meshtrain <command> [options]\n"
    "\n"
    "commands:\n"
    "  train CONFIG [--set section.key=value]...   train a model (meshrun runs this for each worker)\n"
    "  config CONFIG [--set section.key=value]...  print the resolved config; exit 2 if invalid\n"
    "  config --docs                               print the config reference (docs/config.md)\n"
    "  prepare TEXT --out PREFIX [--val-fraction F] write byte-level token shards PREFIX_{train,val}.bin\n"
    "  generate CHECKPOINT [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K] [--seed S]\n"
    "                                              sample text from a checkpoint (dir or its parent)\n"
    "  bench comm [--ops LIST] [--min-bytes N] [--max-bytes N] [--json FILE]\n"
    "                                              collective benchmark, one process per rank:\n"
    "                                              meshrun --nproc-per-node 4 --no-python meshtrain bench comm\n"
    "  bench ckpt [--dir DIR] [--bytes N] [--json FILE]\n"
    "                                              checkpoint save/load throughput vs the disk's own rate\n"
    "  export CHECKPOINT --format hf OUT_DIR [--dtype D] [--max-shard-size N]\n"
    "                                              write a Hugging Face model directory (Llama, GPT-2)\n"
    "  import HF_DIR OUT_DIR                       a Hugging Face Llama/GPT-2 as a meshtrain checkpoint\n"
    "                                              (OUT_DIR/step_00000000) + OUT_DIR/config.yaml\n"
    "\n"
    "Run `meshtrain <command> --help` for a command's options. Exit codes: 0 ok, 1 runtime error,\n"
    "2 invalid input (config, flag, file).\n";

// Parses CONFIG + repeated --set into a resolved, validated Config for `world_size` ranks.
Config load_resolved(const std::vector<std::string>& positional, const std::vector<std::string>& sets,
                     int world_size) {
  MT_USER_CHECK(positional.size() == 1, "expected exactly one CONFIG file (.yaml, .yml or .json), got ",
                positional.size());
  Config cfg = load_config(positional[0], sets);
  resolve(cfg, world_size);
  validate(cfg, world_size);
  check_inputs_exist(cfg);
  return cfg;
}

cxxopts::ParseResult parse(cxxopts::Options& o, int argc, char** argv) {
  auto r = o.parse(argc, argv);
  if (r.count("help")) {
    std::cout << o.help() << std::endl;
    std::exit(0);
  }
  return r;
}

int cmd_train(int argc, char** argv) {
  cxxopts::Options o("meshtrain train", "Train a model from a YAML/JSON config (see docs/config.md).");
  o.add_options()("set", "override a config value: section.key=value (repeatable)",
                  cxxopts::value<std::vector<std::string>>())("h,help", "show this help")(
      "config", "", cxxopts::value<std::vector<std::string>>());
  o.parse_positional({"config"});
  o.positional_help("CONFIG");
  auto r = parse(o, argc, argv);
  const auto world = comm::world_info_from_env();
  Config cfg = load_resolved(r.count("config") ? r["config"].as<std::vector<std::string>>() : std::vector<std::string>{},
                             r.count("set") ? r["set"].as<std::vector<std::string>>() : std::vector<std::string>{},
                             world.world_size);
  const auto result = train::run_training(cfg);
  // Stopped by a signal after checkpointing: report it the way the shell would (128 + signal).
  return result.stop_signal ? 128 + result.stop_signal : 0;
}

int cmd_config(int argc, char** argv) {
  cxxopts::Options o("meshtrain config", "Print the resolved config (every key, defaults filled in).");
  o.add_options()("set", "override a config value: section.key=value (repeatable)",
                  cxxopts::value<std::vector<std::string>>())("docs", "print the config reference in Markdown")(
      "world-size", "validate for this many ranks (default: WORLD_SIZE or 1)", cxxopts::value<int>())(
      "json", "print JSON instead of YAML")("h,help", "show this help")(
      "config", "", cxxopts::value<std::vector<std::string>>());
  o.parse_positional({"config"});
  o.positional_help("CONFIG");
  auto r = parse(o, argc, argv);
  if (r.count("docs")) {
    std::cout << config_reference_markdown();
    return 0;
  }
  const int world = r.count("world-size") ? r["world-size"].as<int>() : comm::world_info_from_env().world_size;
  Config cfg = load_resolved(r.count("config") ? r["config"].as<std::vector<std::string>>() : std::vector<std::string>{},
                             r.count("set") ? r["set"].as<std::vector<std::string>>() : std::vector<std::string>{},
                             world);
  std::cout << (r.count("json") ? to_json(cfg) + "\n" : to_yaml(cfg));
  return 0;
}

int cmd_prepare(int argc, char** argv) {
  cxxopts::Options o("meshtrain prepare", "Write byte-level (vocab 256) llm.c token shards from a text file.");
  o.add_options()("out", "output prefix: writes PREFIX_train.bin and PREFIX_val.bin", cxxopts::value<std::string>())(
      "val-fraction", "share of the text (its end) kept for validation",
      cxxopts::value<double>()->default_value("0.05"))("h,help", "show this help")(
      "text", "", cxxopts::value<std::vector<std::string>>());
  o.parse_positional({"text"});
  o.positional_help("TEXT");
  auto r = parse(o, argc, argv);
  MT_USER_CHECK(r.count("text") == 1, "meshtrain prepare: expected one TEXT file");
  MT_USER_CHECK(r.count("out"), "meshtrain prepare: --out PREFIX is required");
  auto res = data::prepare_bytes(r["text"].as<std::vector<std::string>>()[0], r["out"].as<std::string>(),
                                 r["val-fraction"].as<double>());
  std::printf("wrote %s (%lld tokens) and %s (%lld tokens)\n", res.train_path.c_str(),
              static_cast<long long>(res.train_tokens), res.val_path.c_str(), static_cast<long long>(res.val_tokens));
  return 0;
}

int cmd_generate(int argc, char** argv) {
  cxxopts::Options o("meshtrain generate", "Sample text from a checkpoint of a byte-level model.");
  o.add_options()("prompt", "text to continue", cxxopts::value<std::string>()->default_value("\n"))(
      "tokens", "tokens to generate", cxxopts::value<int64_t>()->default_value("200"))(
      "temperature", "sampling temperature; 0 = greedy", cxxopts::value<double>()->default_value("0.8"))(
      "top-k", "sample among the k most likely tokens; 0 = all", cxxopts::value<int64_t>()->default_value("40"))(
      "seed", "sampling seed", cxxopts::value<uint64_t>()->default_value("1337"))("h,help", "show this help")(
      "checkpoint", "", cxxopts::value<std::vector<std::string>>());
  o.parse_positional({"checkpoint"});
  o.positional_help("CHECKPOINT");
  auto r = parse(o, argc, argv);
  MT_USER_CHECK(r.count("checkpoint") == 1, "meshtrain generate: expected one CHECKPOINT directory");
  auto ck = ckpt::CheckpointManager::load(r["checkpoint"].as<std::vector<std::string>>()[0]);
  MT_USER_CHECK(ck.state.contains("config"), ck.path, ": checkpoint carries no config");
  Config cfg = parse_config(ck.state["config"].dump(), ck.path + "/meta.json", /*json=*/true);
  model::Transformer net(cfg.model);
  {
    at::NoGradGuard no_grad;
    for (auto& item : net->named_parameters()) item.value().copy_(ck.tensors.at("model." + item.key()));
  }
  auto out = model::generate(net, data::encode_bytes(r["prompt"].as<std::string>()),
                             {.max_new_tokens = r["tokens"].as<int64_t>(), .temperature = r["temperature"].as<double>(),
                              .top_k = r["top-k"].as<int64_t>(), .seed = r["seed"].as<uint64_t>()});
  std::cout << data::decode_bytes(out) << std::endl;
  return 0;
}

// "64K", "1M", "1G" or plain bytes.
size_t parse_bytes(const std::string& flag, const std::string& v) {
  size_t pos = 0;
  double x = 0;
  try {
    x = std::stod(v, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  const std::string unit = v.substr(pos);
  const double mult = unit.empty() || unit == "B" ? 1 : unit == "K" ? 1024.0 : unit == "M" ? 1048576.0
                    : unit == "G" ? 1073741824.0 : -1;
  MT_USER_CHECK(pos > 0 && mult > 0 && x >= 0, flag, ": given '", v, "'; valid: bytes, optionally with K, M or G");
  return static_cast<size_t>(x * mult);
}

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
  if (r.count("json")) {
    std::ofstream out(r["json"].as<std::string>());
    out << ckpt::ckpt_bench_json(rows);
    MT_USER_CHECK(out, "--json: cannot write ", r["json"].as<std::string>());
  }
  return 0;
}

int cmd_export(int argc, char** argv) {
  cxxopts::Options o("meshtrain export",
                     "Write a checkpoint (any layout) as a Hugging Face model directory: config.json + "
                     "model.safetensors, or model-0000K-of-0000N.safetensors + model.safetensors.index.json above "
                     "--max-shard-size. Loadable by transformers (LlamaForCausalLM, GPT2LMHeadModel), vLLM, TGI.");
  o.add_options()("format", "output format; valid: hf", cxxopts::value<std::string>())(
      "dtype", "tensor dtype: keep | fp32 | bf16 | fp16", cxxopts::value<std::string>()->default_value("keep"))(
      "max-shard-size", "largest safetensors file (K/M/G suffixes)",
      cxxopts::value<std::string>()->default_value("5G"))("h,help", "show this help")(
      "args", "", cxxopts::value<std::vector<std::string>>());
  o.parse_positional({"args"});
  o.positional_help("CHECKPOINT OUT_DIR");
  auto r = parse(o, argc, argv);
  const auto args = r.count("args") ? r["args"].as<std::vector<std::string>>() : std::vector<std::string>{};
  MT_USER_CHECK(args.size() == 2, "meshtrain export: expected CHECKPOINT and OUT_DIR, got ", args.size(),
                " arguments (see --help)");
  MT_USER_CHECK(r.count("format") && r["format"].as<std::string>() == "hf",
                "meshtrain export: --format hf is required (the only format)");
  const size_t shard = parse_bytes("--max-shard-size", r["max-shard-size"].as<std::string>());
  MT_USER_CHECK(shard > 0, "--max-shard-size must be > 0");
  auto res = ckpt::export_hf(args[0], args[1], {.dtype = r["dtype"].as<std::string>(), .max_shard_bytes = shard});
  std::printf("wrote %s: %lld tensors, %.1f MB in %d file(s)\n", args[1].c_str(), static_cast<long long>(res.tensors),
              static_cast<double>(res.bytes) / 1e6, res.files);
  return 0;
}

int cmd_import(int argc, char** argv) {
  cxxopts::Options o("meshtrain import",
                     "Turn a Hugging Face Llama or GPT-2 model directory (config.json + safetensors) into a "
                     "meshtrain checkpoint (fp32 weights) and a config YAML to fine-tune or sample from.");
  o.add_options()("h,help", "show this help")("args", "", cxxopts::value<std::vector<std::string>>());
  o.parse_positional({"args"});
  o.positional_help("HF_DIR OUT_DIR");
  auto r = parse(o, argc, argv);
  const auto args = r.count("args") ? r["args"].as<std::vector<std::string>>() : std::vector<std::string>{};
  MT_USER_CHECK(args.size() == 2, "meshtrain import: expected HF_DIR and OUT_DIR, got ", args.size(),
                " arguments (see --help)");
  auto res = ckpt::import_hf(args[0], args[1]);
  std::printf("imported %s (%s, %lld tensors) into %s; config: %s\n", args[0].c_str(), res.family.c_str(),
              static_cast<long long>(res.tensors), res.checkpoint.c_str(), res.config_yaml.c_str());
  return 0;
}

int cmd_bench(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "ckpt") return cmd_bench_ckpt(argc, argv);
  cxxopts::Options o("meshtrain bench comm",
                     "Collective benchmark in nccl-tests' spirit: for each op and size (×2 steps), time, algbw and "
                     "busbw. Run one process per rank under meshrun or torchrun; rank 0 prints the table.");
  o.add_options()("ops", "comma-separated: all_reduce, all_gather, reduce_scatter, broadcast",
                  cxxopts::value<std::string>()->default_value("all_reduce,all_gather,reduce_scatter"))(
      "min-bytes", "smallest buffer (K/M/G suffixes)", cxxopts::value<std::string>()->default_value("1K"))(
      "max-bytes", "largest buffer", cxxopts::value<std::string>()->default_value("64M"))(
      "min-seconds", "time each size at least this long", cxxopts::value<double>()->default_value("0.2"))(
      "json", "also write the rows as JSON to FILE (rank 0)", cxxopts::value<std::string>())(
      "h,help", "show this help")("what", "", cxxopts::value<std::vector<std::string>>());
  o.parse_positional({"what"});
  o.positional_help("comm");
  auto r = parse(o, argc, argv);
  MT_USER_CHECK(r.count("what") == 1 && r["what"].as<std::vector<std::string>>()[0] == "comm",
                "meshtrain bench: expected `meshtrain bench comm` or `meshtrain bench ckpt`");
  comm::BenchOptions bo;
  bo.ops.clear();
  std::stringstream ss(r["ops"].as<std::string>());
  for (std::string op; std::getline(ss, op, ',');) bo.ops.push_back(op);
  bo.min_bytes = parse_bytes("--min-bytes", r["min-bytes"].as<std::string>());
  bo.max_bytes = parse_bytes("--max-bytes", r["max-bytes"].as<std::string>());
  bo.min_seconds = r["min-seconds"].as<double>();
  MT_USER_CHECK(bo.min_bytes <= bo.max_bytes, "--min-bytes must not exceed --max-bytes");

  const auto world = comm::world_info_from_env();
  log::init({.rank = world.world_size > 1 ? world.rank : -1});
  at::set_num_threads(1);  // one intra-op thread per rank, as torch.distributed benchmarks run
  const auto timeout = std::chrono::minutes(2);
  auto c = comm::make_cpu_communicator(comm::connect_store_from_env(timeout), world.rank, world.world_size,
                                       "bench", timeout);
  auto rows = comm::run_bench(*c, bo);
  if (world.rank == 0) {
    std::printf("# backend %s, %d ranks, fp32\n%s", c->backend_name().c_str(), world.world_size,
                comm::bench_table(rows).c_str());
    if (r.count("json")) {
      std::ofstream out(r["json"].as<std::string>());
      out << comm::bench_json(rows, "meshtrain-" + c->backend_name(), world.world_size);
      MT_USER_CHECK(out, "--json: cannot write ", r["json"].as<std::string>());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  log::init({});
  if (argc < 2 || std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  try {
    if (cmd == "train") return cmd_train(argc - 1, argv + 1);
    if (cmd == "config") return cmd_config(argc - 1, argv + 1);
    if (cmd == "prepare") return cmd_prepare(argc - 1, argv + 1);
    if (cmd == "generate") return cmd_generate(argc - 1, argv + 1);
    if (cmd == "bench") return cmd_bench(argc - 1, argv + 1);
    if (cmd == "export") return cmd_export(argc - 1, argv + 1);
    if (cmd == "import") return cmd_import(argc - 1, argv + 1);
    std::fprintf(stderr, "meshtrain: unknown command '%s'\n%s", cmd.c_str(), kUsage);
    return 2;
  } catch (const UserError& e) {
    std::fprintf(stderr, "meshtrain: error: %s\n", e.what());
    return 2;
  } catch (const cxxopts::exceptions::exception& e) {
    std::fprintf(stderr, "meshtrain %s: %s (see --help)\n", cmd.c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "meshtrain: fatal: %s\n", e.what());
    return 1;
  }
}

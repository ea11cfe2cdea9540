// meshtrain: the worker and the tool box. CLI only — every subcommand calls into the library.
//   meshtrain train CONFIG [--set k=v]…     train (what meshrun runs for a config)
//   meshtrain config CONFIG [--set k=v]…    print the resolved config; exit 2 when invalid
//   meshtrain config --docs                 print the config reference (docs/config.md)
//   meshtrain prepare TEXT --out PREFIX     byte-level token shards from a text file
//   meshtrain generate CKPT --prompt TEXT   sample from a checkpoint
//   meshtrain bench comm [options]          collective benchmark (under meshrun, one process per rank)
//   meshtrain bench train [options]         training throughput on synthetic tokens
//   meshtrain topo [CONFIG] [options]       GPU link matrix, affinities, NVLink cliques and rank placement
//   meshtrain bench ckpt [options]          checkpoint save/load throughput vs the disk's
//   meshtrain export CKPT --format hf OUT   a checkpoint as a Hugging Face model directory
//   meshtrain import HF_DIR OUT_CKPT        a Hugging Face Llama/GPT-2 as a meshtrain checkpoint + config
#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "meshtrain/ckpt/checkpoint.h"
#include "meshtrain/ckpt/ckpt_bench.h"
#include "meshtrain/ckpt/hf_files.h"
#include "meshtrain/comm/bench.h"
#include "meshtrain/comm/communicator_factory.h"
#include "meshtrain/comm/placement.h"
#include "meshtrain/comm/store.h"
#include "meshtrain/comm/topology.h"
#include "meshtrain/comm/world_info.h"
#include "meshtrain/core/config.h"
#include "meshtrain/core/crash_handler.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"
#include "meshtrain/data/byte_tokens.h"
#include "meshtrain/data/prepare.h"
#include "meshtrain/model/generate.h"
#include "meshtrain/train/bench_train.h"
#include "meshtrain/train/trainer.h"

using namespace meshtrain;

namespace meshtrain::cli {
int cmd_eval(int argc, char** argv);  // eval_command.cpp
}

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
    "  bench comm [--backend B] [--ops LIST] [--min-bytes N] [--max-bytes N] [--json FILE]\n"
    "                                              collective benchmark, one process per rank:\n"
    "                                              meshrun --nproc-per-node 4 --no-python meshtrain bench comm\n"
    "  bench train [--preset P] [--seq T] [--batch B] [--layers L] [--steps N] [--json FILE]\n"
    "                                              training throughput (tokens/s, MFU, peak memory) on\n"
    "                                              synthetic tokens\n"
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
  // The config is meta.json's own (format 2); earlier trainers kept it in the state.
  const nlohmann::json& cj = !ck.config.empty() ? ck.config : ck.state.value("config", ck.config);
  MT_USER_CHECK(!cj.empty(), ck.path, ": checkpoint carries no config");
  Config cfg = parse_config(cj.dump(), ck.path + "/meta.json", /*json=*/true);
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

int cmd_bench_train(int argc, char** argv) {
  cxxopts::Options o("meshtrain bench train",
                     "Training throughput on synthetic tokens through the real training loop: median step time, "
                     "tokens/s, MFU and peak memory after warm-up. scripts/bench/train_compare.py runs it beside "
                     "PyTorch.");
  train::BenchTrainOptions d;
  o.add_options()("preset", "model preset (see docs/config.md model.preset)",
                  cxxopts::value<std::string>()->default_value(d.preset))(
      "seq", "tokens per sequence", cxxopts::value<int64_t>()->default_value(std::to_string(d.seq_len)))(
      "batch", "sequences per micro-batch", cxxopts::value<int64_t>()->default_value(std::to_string(d.micro_batch)))(
      "layers", "override the preset's layer count (0 keeps it)", cxxopts::value<int64_t>()->default_value("0"))(
      "steps", "timed steps", cxxopts::value<int64_t>()->default_value(std::to_string(d.steps)))(
      "warmup", "untimed steps first", cxxopts::value<int64_t>()->default_value(std::to_string(d.warmup)))(
      "activation-checkpointing", "recompute each block in backward")(
      "set", "any other config value: section.key=value (repeatable)", cxxopts::value<std::vector<std::string>>())(
      "json", "also write the result as JSON to FILE", cxxopts::value<std::string>())("h,help", "show this help")(
      "what", "", cxxopts::value<std::vector<std::string>>());
  o.parse_positional({"what"});
  o.positional_help("train");
  auto r = parse(o, argc, argv);
  train::BenchTrainOptions bo{.preset = r["preset"].as<std::string>(), .seq_len = r["seq"].as<int64_t>(),
                              .micro_batch = r["batch"].as<int64_t>(), .layers = r["layers"].as<int64_t>(),
                              .steps = r["steps"].as<int64_t>(), .warmup = r["warmup"].as<int64_t>(),
                              .activation_checkpointing = r.count("activation-checkpointing") > 0,
                              .overrides = r.count("set") ? r["set"].as<std::vector<std::string>>()
                                                          : std::vector<std::string>{}};
  const auto res = train::run_bench_train(bo);
  if (comm::world_info_from_env().rank != 0) return 0;
  std::printf("%s", train::bench_train_table(res).c_str());
  if (r.count("json")) {
    std::ofstream out(r["json"].as<std::string>());
    out << train::bench_train_json(res, bo) << "\n";
    MT_USER_CHECK(out, "--json: cannot write ", r["json"].as<std::string>());
  }
  return 0;
}

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
  const std::string asked = r["backend"].as<std::string>();
  // nccl (or auto on a GPU machine) runs on this rank's GPU: cuda:LOCAL_RANK, as the trainer places ranks.
  const bool gpu = asked == "nccl" || (asked == "auto" && comm::nccl_built() && at::hasCUDA() && at::getNumGPUs() > 0);
  comm::CommSetup setup;
  setup.backend = asked;
  setup.device = gpu ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(world.local_rank)) : c10::Device(c10::kCPU);
  setup.timeout = std::chrono::minutes(2);
  setup.group = "bench";
  setup.origin = "--backend";
  auto c = comm::make_communicator(world, setup);
  bo.device = setup.device;
  auto rows = comm::run_bench(*c, bo);
  if (world.rank == 0) {
    std::printf("# backend %s on %s, %d ranks, fp32\n%s", c->backend_name().c_str(), setup.device.str().c_str(),
                world.world_size,
                comm::bench_table(rows).c_str());
    if (r.count("json")) {
      std::ofstream out(r["json"].as<std::string>());
      out << comm::bench_json(rows, "meshtrain-" + c->backend_name(), world.world_size);
      MT_USER_CHECK(out, "--json: cannot write ", r["json"].as<std::string>());
    }
  }
  return 0;
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

int cmd_topo(int argc, char** argv) {
  cxxopts::Options o("meshtrain topo",
                     "Print this node's GPU link matrix (nvidia-smi topo style), NUMA and CPU affinity, the NVLink "
                     "cliques, and the local-rank → GPU placement a run would use: every tensor-parallel group "
                     "inside an NVLink clique, data-parallel across. Works without GPUs (then only a --fixture "
                     "has something to show).");
  o.add_options()("fixture", "read the topology from a JSON file (tests/fixtures/topology/*.json) instead of NVML",
                  cxxopts::value<std::string>())(
      "tp", "tensor-parallel size (default: the config's parallel.tp, else 1)", cxxopts::value<int>())(
      "nproc", "local ranks on the node (default: LOCAL_WORLD_SIZE, else the number of GPUs)", cxxopts::value<int>())(
      "nnodes", "nodes in the job (world size = nnodes × nproc)", cxxopts::value<int>()->default_value("1"))(
      "node", "which node to place (0 … nnodes-1)", cxxopts::value<int>()->default_value("0"))(
      "allow-slow-tp", "place tp groups over PCIe when no NVLink clique fits (parallel.allow_slow_tp)")(
      "set", "override a config value: section.key=value (repeatable)", cxxopts::value<std::vector<std::string>>())(
      "json", "print the topology and placement as JSON")(
      "save", "also write the topology as a JSON fixture to FILE", cxxopts::value<std::string>())(
      "h,help", "show this help")("config", "", cxxopts::value<std::vector<std::string>>());
  o.parse_positional({"config"});
  o.positional_help("[CONFIG]");
  auto r = parse(o, argc, argv);
  Config cfg;
  const auto configs = r.count("config") ? r["config"].as<std::vector<std::string>>() : std::vector<std::string>{};
  MT_USER_CHECK(configs.size() <= 1, "meshtrain topo: at most one CONFIG file, got ", configs.size());
  if (!configs.empty()) {
    cfg = load_config(configs[0], r.count("set") ? r["set"].as<std::vector<std::string>>() : std::vector<std::string>{});
  }
  if (r.count("tp")) cfg.parallel.tp = r["tp"].as<int>();
  if (r.count("allow-slow-tp")) cfg.parallel.allow_slow_tp = true;

  const comm::Topology topo = r.count("fixture") ? comm::load_topology(r["fixture"].as<std::string>())
                                                 : comm::detect_topology();
  if (r.count("save")) comm::save_topology(topo, r["save"].as<std::string>());
  const auto env_local = comm::env_int(comm::process_env(), "LOCAL_WORLD_SIZE");
  const int nproc = r.count("nproc") ? r["nproc"].as<int>()
                    : env_local      ? static_cast<int>(*env_local)
                                     : std::max(1, topo.num_gpus());
  const int nnodes = r["nnodes"].as<int>();
  MT_USER_CHECK(nproc >= 1 && nnodes >= 1, "meshtrain topo: --nproc and --nnodes must be ≥ 1");
  const int node = r["node"].as<int>();
  MT_USER_CHECK(node >= 0 && node < nnodes, "meshtrain topo: --node ", node, " is not in [0, ", nnodes, ")");
  const comm::MeshShape shape = comm::MeshShape::from_config(cfg.parallel, nproc * nnodes);

  if (!r.count("json")) {
    if (topo.num_gpus() == 0) {
      std::printf("No NVIDIA GPU on this machine: %s.\nShow a fixture instead: meshtrain topo --fixture "
                  "tests/fixtures/topology/dgx_a100.json --tp 4\n",
                  topo.source.c_str());
      return 0;
    }
    std::printf("%s  [%s]\n\n%s\n", topo.system.c_str(), topo.source.c_str(),
                comm::format_topology_matrix(topo).c_str());
    std::string cliques;
    for (const auto& c : topo.nvlink_cliques()) {
      std::string g;
      for (int i : c) g += cat(g.empty() ? "" : ",", i);
      cliques += cat(cliques.empty() ? "" : " ", "{", g, "}");
    }
    std::printf("NVLink cliques: %s (largest: %d GPUs)\n\n", cliques.c_str(), topo.largest_clique());
    std::printf("Placement for mesh %s, %d local rank(s) on node %d of %d:\n", shape.describe().c_str(), nproc, node,
                nnodes);
    std::fflush(stdout);  // the matrix stays visible above a placement error
  }
  const comm::Placement p = comm::place_tp(topo, shape, nproc, node, cfg.parallel.allow_slow_tp);
  if (r.count("json")) {
    std::string ranks, groups;
    for (int g : p.gpu_of_local_rank) ranks += cat(ranks.empty() ? "" : ", ", g);
    for (const auto& g : p.groups) {
      std::string m;
      for (int x : g) m += cat(m.empty() ? "" : ", ", x);
      groups += cat(groups.empty() ? "" : ", ", "[", m, "]");
    }
    std::printf("{\"topology\": %s, \"placement\": {\"mesh\": \"%s\", \"gpu_of_local_rank\": [%s], \"tp_groups\": [%s], "
                "\"tp_on_nvlink\": %s, \"note\": %s}}\n",
                comm::topology_to_json(topo).c_str(), shape.describe().c_str(), ranks.c_str(), groups.c_str(),
                p.groups_on_nvlink ? "true" : "false", nlohmann::json(p.note).dump().c_str());
    return 0;
  }
  std::printf("%s", p.describe(topo).c_str());
  for (int lr = 0; lr < nproc; ++lr) {
    const int gpu = p.gpu_of_local_rank[static_cast<std::size_t>(lr)];
    const auto& g = topo.gpus[static_cast<std::size_t>(gpu)];
    std::printf("local rank %d → GPU %d (%s), NUMA %d, CPUs %s\n", lr, gpu, g.pci_bus_id.c_str(), g.numa_node,
                g.cpus.empty() ? "N/A" : comm::format_cpu_list(g.cpus).c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  install_crash_handler("meshtrain");
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
    if (cmd == "bench") {
      const std::string what = argc > 2 ? argv[2] : "";
      if (what == "comm") return cmd_bench_comm(argc - 1, argv + 1);
      if (what == "train") return cmd_bench_train(argc - 1, argv + 1);
      if (what == "ckpt") return cmd_bench_ckpt(argc - 1, argv + 1);
      throw UserError("meshtrain bench: expected `comm`, `train` or `ckpt`, given '" + what + "'");
    }
    if (cmd == "topo") return cmd_topo(argc - 1, argv + 1);
    if (cmd == "export") return cmd_export(argc - 1, argv + 1);
    if (cmd == "import") return cmd_import(argc - 1, argv + 1);
    if (cmd == "eval") return cli::cmd_eval(argc - 1, argv + 1);
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

// meshtrain: the worker and the tool box. CLI only — each command lives in its own file (commands.h) and calls
// into the library; this file dispatches and turns errors into one line and an exit code.
#include <c10/util/Exception.h>

#include <cstdio>
#include <string>

#include "cli.h"
#include "commands.h"
#include "meshtrain/core/crash_handler.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"

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
    "  generate CHECKPOINT --input PROMPTS.jsonl --output OUT.jsonl [--device cuda] [--dtype bf16]\n"
    "                                              every prompt of a file at once through the serving engine\n"
    "  serve CHECKPOINT [--host H] [--port P] [--blocks N] [--max-running N]\n"
    "                                              OpenAI-compatible HTTP server (/v1/completions, ...)\n"
    "  bench comm [--backend B] [--ops LIST] [--min-bytes N] [--max-bytes N] [--json FILE]\n"
    "                                              collective benchmark, one process per rank:\n"
    "                                              meshrun --nproc-per-node 4 --no-python meshtrain bench comm\n"
    "  bench train [--preset P] [--seq T] [--batch B] [--layers L] [--steps N] [--json FILE]\n"
    "                                              training throughput (tokens/s, MFU, peak memory) on\n"
    "                                              synthetic tokens\n"
    "  bench ckpt [--dir DIR] [--bytes N] [--json FILE]\n"
    "                                              checkpoint save/load throughput vs the disk's own rate\n"
    "  bench serve [--url U] [--concurrency 1,8,64] [--requests N] [--prompt-tokens N] [--output-tokens N]\n"
    "              [--prompts FILE.jsonl] [--json FILE]\n"
    "                                              load generator for an OpenAI-compatible server: tokens/s,\n"
    "                                              time to first token and between tokens (percentiles)\n"
    "  plan CONFIG [--gpus N] [--nodes K] [--gpu G] [--search] [--json]\n"
    "                                              predicted per-GPU memory (itemised) and step time of the\n"
    "                                              layout, or of every layout with --search\n"
    "  topo [CONFIG] [--fixture FILE] [--tp N] [--json]\n"
    "                                              GPU link matrix, NVLink cliques and rank placement\n"
    "  doctor [CONFIG] [--gpus N] [--gpu-model M] [--nvlinks N] [--readings FILE] [--save FILE]\n"
    "                                              node preflight: GPU health, NVLink, PCIe, clocks,\n"
    "                                              temperature, all-reduce rate, checkpoint disk; exit 1\n"
    "                                              and the failing line when something is wrong\n"
    "  export CHECKPOINT --format hf OUT_DIR [--dtype D] [--max-shard-size N]\n"
    "                                              write a Hugging Face model directory (Llama, GPT-2)\n"
    "  import HF_DIR OUT_DIR                       a Hugging Face Llama/GPT-2 as a meshtrain checkpoint\n"
    "                                              (OUT_DIR/step_00000000) + OUT_DIR/config.yaml\n"
    "  eval CHECKPOINT --data SHARDS [--batches N] [--json]\n"
    "                                              loss, perplexity and tokens evaluated (under meshrun for\n"
    "                                              a sharded model)\n"
    "\n"
    "Run `meshtrain <command> --help` for a command's options. Exit codes: 0 ok, 1 runtime error,\n"
    "2 invalid input (config, flag, file).\n";

using CommandFn = int (*)(int, char**);

struct Command {
  const char* name;
  CommandFn run;
};

// `bench comm|train|ckpt|serve` is a command of two words: the second picks the benchmark.
constexpr Command kBenches[] = {
    {"comm", cli::cmd_bench_comm}, {"train", cli::cmd_bench_train}, {"ckpt", cli::cmd_bench_ckpt},
    {"serve", cli::cmd_bench_serve}};

int cmd_bench(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "";
  for (const auto& b : kBenches)
    if (what == b.name) return b.run(argc, argv);  // argv[0] stays "bench": the benchmark parses `what` itself
  throw UserError("meshtrain bench: expected `comm`, `train`, `ckpt` or `serve`, given '" + what + "'");
}

constexpr Command kCommands[] = {
    {"train", cli::cmd_train},   {"config", cli::cmd_config}, {"prepare", cli::cmd_prepare},
    {"generate", cli::cmd_generate}, {"serve", cli::cmd_serve}, {"bench", cmd_bench},    {"topo", cli::cmd_topo},
    {"export", cli::cmd_export}, {"import", cli::cmd_import}, {"eval", cli::cmd_eval},
    {"plan", cli::cmd_plan},
    {"doctor", cli::cmd_doctor},
};

int dispatch(const std::string& cmd, int argc, char** argv) {
  for (const auto& c : kCommands)
    if (cmd == c.name) return c.run(argc, argv);
  std::fprintf(stderr, "meshtrain: unknown command '%s'\n%s", cmd.c_str(), kUsage);
  return 2;
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
    return dispatch(cmd, argc - 1, argv + 1);
  } catch (const UserError& e) {
    std::fprintf(stderr, "meshtrain: error: %s\n", e.what());
    return 2;
  } catch (const cxxopts::exceptions::exception& e) {
    std::fprintf(stderr, "meshtrain %s: %s (see --help)\n", cmd.c_str(), e.what());
    return 2;
  } catch (const c10::OutOfMemoryError& e) {
    // LibTorch's what() carries its C++ stack (dozens of frames); the message says what ran out.
    std::fprintf(stderr,
                 "meshtrain: error: out of GPU memory: %s; `meshtrain plan CONFIG` says what fits (a smaller "
                 "train.micro_batch_size, train.activation_checkpointing or optimizer.offload: cpu need less)\n",
                 e.what_without_backtrace());
    return 1;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "meshtrain: fatal: %s\n", e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "meshtrain: fatal: %s\n", e.what());
    return 1;
  }
}

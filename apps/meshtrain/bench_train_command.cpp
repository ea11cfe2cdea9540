// meshtrain bench train [options]: training throughput on synthetic tokens through the real training loop.
#include <cstdio>
#include <string>
#include <vector>

#include "cli.h"
#include "commands.h"
#include "meshtrain/comm/world_info.h"
#include "meshtrain/core/config_enums.h"
#include "meshtrain/core/error.h"
#include "meshtrain/train/bench_train.h"

namespace meshtrain::cli {
namespace {

// --unfuse's names → the config keys that switch those fused kernels off (docs/config.md train.fused_*).
std::vector<std::string> unfuse_overrides(const std::vector<std::string>& levers) {
  std::vector<std::string> out;
  for (const auto& l : split_commas(levers)) {
    if (l == "all") {
      out.push_back("train.fused_kernels=false");
      out.push_back("optimizer.fused_kernel=false");
    } else if (l == "norm" || l == "gelu") {
      out.push_back("train.fused_" + l + "=false");
    } else if (l == "adamw") {
      out.push_back("optimizer.fused_kernel=false");
    } else {
      MT_USER_CHECK(false, "--unfuse: unknown lever '", l, "'; valid: all, norm, gelu, adamw (comma-separated)");
    }
  }
  return out;
}

// --attention's value, checked here so that a mistake names the flag rather than the config key.
AttentionBackend attention_option(const std::string& v) { return parse_enum<AttentionBackend>(v, "--attention"); }

}  // namespace

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
      "attention", "the SDPA kernel attention runs (train.attention_backend), checked against the shape at "
                   "start-up: auto (SDPA's pick) | flash | cudnn | efficient | math",
      cxxopts::value<std::string>()->default_value(std::string(enum_name(d.attention))))(
      "lora", "LoRA adapters of this rank (model.lora_rank; alpha 2 × rank; model.lora_targets' default: all "
              "seven Llama projections), the base frozen in the compute dtype (with --set model.base_quant=nf4: "
              "QLoRA, the base's block linears in NF4); 0 = full training",
      cxxopts::value<int64_t>()->default_value("0"))(
      "profile", "after the timed steps, profile more into DIR: a Chrome/Perfetto trace per rank (open in "
                 "ui.perfetto.dev) and the top kernels by step phase (forward, backward, optimizer, communication)",
      cxxopts::value<std::string>())(
      "profile-steps", "steps recorded by --profile",
      cxxopts::value<int64_t>()->default_value(std::to_string(d.profile_steps)))(
      "memory-snapshot", "the CUDA caching allocator's history over the whole run (every allocation with its C++ "
                         "stack) into FILE, for PyTorch's memory viewer (pytorch.org/memory_viz): where the peak "
                         "is and what holds it; slows the steps, so take tokens/s from a run without it",
      cxxopts::value<std::string>())(
      "unfuse", "fused kernels to switch off, to measure each lever: all (every fused kernel), norm (residual "
                "add + norm), gelu (GPT-2's bias + GELU), adamw (the optimizer's own kernel: ATen's instead); "
                "comma-separated",
      cxxopts::value<std::vector<std::string>>())(
      "cuda-graph", "capture the forward and backward into a CUDA graph after warm-up and replay it "
                    "(train.cuda_graph: on; a single GPU, static shapes)")(
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
                              .attention = attention_option(r["attention"].as<std::string>()),
                              .profile_dir = r.count("profile") ? r["profile"].as<std::string>() : "",
                              .profile_steps = r["profile-steps"].as<int64_t>(),
                              .memory_snapshot = r.count("memory-snapshot") ? r["memory-snapshot"].as<std::string>()
                                                                            : "",
                              .overrides = strings(r, "set")};
  for (auto& o : unfuse_overrides(strings(r, "unfuse"))) bo.overrides.push_back(std::move(o));
  if (r.count("cuda-graph")) bo.overrides.insert(bo.overrides.begin(), "train.cuda_graph=on");
  if (const int64_t rank = r["lora"].as<int64_t>(); rank != 0) {
    // Before the user's --set values, which are applied last and so may still change alpha or the targets.
    bo.overrides.insert(bo.overrides.begin(), {cat("model.lora_rank=", rank), cat("model.lora_alpha=", 2 * rank)});
  }
  const auto res = train::run_bench_train(bo);
  if (comm::world_info_from_env().rank != 0) return 0;
  std::printf("%s", train::bench_train_table(res).c_str());
  write_json_option(r, train::bench_train_json(res, bo) + "\n");
  return 0;
}

}  // namespace meshtrain::cli

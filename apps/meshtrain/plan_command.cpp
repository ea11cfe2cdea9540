// meshtrain plan CONFIG: per-GPU memory (itemised) and step time of the config's layout, or of every layout
// with --search, before anything is launched (src/plan/, docs/plan.md).
#include <cstdio>

#include "cli.h"
#include "commands.h"
#include "meshtrain/core/error.h"
#include "meshtrain/plan/gpu_spec.h"
#include "meshtrain/plan/layout_search.h"
#include "meshtrain/plan/plan_report.h"

namespace meshtrain::cli {

int cmd_plan(int argc, char** argv) {
  std::string gpus_help = "GPU model; one of:";
  for (const auto& g : plan::gpu_names()) gpus_help += " " + g;
  cxxopts::Options o("meshtrain plan",
                     "Predicted per-GPU memory (parameters, gradients, master weights and AdamW state, gathered "
                     "FSDP units, activations with and without checkpointing, logits/loss, communication buffers, "
                     "CUDA context, allocator slack) and step time (FLOPs at the measured MFU for the shape, plus "
                     "the memory-bound passes over the parameters (optimizer, casts, gradient accumulation), plus "
                     "the host's update of an offloaded optimizer, plus communication over NVLink / the network, "
                     "overlap stated) for CONFIG's layout; with --search every layout of the GPUs, those that fit "
                     "first (fastest first), then those that do not. GPU runs only: a train.device: cpu config is "
                     "refused. docs/plan.md has the formulae.");
  o.add_options()("gpus", "GPUs of the job (all nodes)", cxxopts::value<int64_t>()->default_value("1"))(
      "nodes", "nodes they sit on (GPUs per node = gpus / nodes)", cxxopts::value<int64_t>()->default_value("1"))(
      "gpu", gpus_help, cxxopts::value<std::string>()->default_value("h200-141gb"))(
      "search", "every layout (pp × dp × fsdp × tp, ZeRO stage, activation checkpointing; a full fine-tune also with "
      "its optimizer offloaded and, for Llama, as LoRA r16 instead): those that fit first (the config's own "
      "training before LoRA), each part sorted by step time")(
      "mfu", "measured MFU table (JSON, as scripts/bench/plan_check.py writes it) instead of the built-in one",
      cxxopts::value<std::string>())(
      "json", "print JSON instead of the table")(
      "set", "config override section.key=value (repeatable)", cxxopts::value<std::vector<std::string>>())(
      "h,help", "show this help")("config", "", cxxopts::value<std::vector<std::string>>());
  o.parse_positional({"config"});
  o.positional_help("CONFIG");
  auto r = parse(o, argc, argv);
  const auto configs = strings(r, "config");
  MT_USER_CHECK(configs.size() == 1, "meshtrain plan: expected exactly one CONFIG file, got ", configs.size());
  const plan::PlanOptions opts{.gpus = r["gpus"].as<int64_t>(), .nodes = r["nodes"].as<int64_t>(),
                               .gpu = r["gpu"].as<std::string>()};
  plan::gpu_spec(opts.gpu);  // a wrong --gpu is named before the config is looked at
  const plan::MfuTable mfu =
      r.count("mfu") ? plan::MfuTable::from_json_file(r["mfu"].as<std::string>()) : plan::MfuTable::builtin();
  const Config cfg = load_run_config(configs[0], strings(r, "set"));
  std::vector<plan::PlanRow> rows;
  if (r.count("search")) rows = plan::search_layouts(cfg, opts, mfu);
  else rows.push_back(plan::plan_layout(cfg, opts, mfu));
  MT_USER_CHECK(!rows.empty(), "meshtrain plan --search: no layout of ", opts.gpus, " GPU(s) suits ", configs[0]);
  if (r.count("json")) {
    std::printf("%s\n", plan::plan_json(rows, opts).c_str());
  } else if (r.count("search")) {
    std::printf("%s", plan::search_table(rows, opts).c_str());
  } else {
    std::printf("%s", plan::layout_table(rows[0], opts).c_str());
  }
  return 0;
}

}  // namespace meshtrain::cli

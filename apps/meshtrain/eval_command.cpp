// `meshtrain eval CHECKPOINT --data SHARDS [--batches N] [--json] [--set k=v]…`: loss, perplexity and tokens
// evaluated for a checkpoint (train/evaluate.h). One process, or one per rank under meshrun for a model that
// is sharded or too large for one device (rank 0 prints).
#include <cstdio>

#include "cli.h"
#include "commands.h"
#include "meshtrain/comm/world_info.h"
#include "meshtrain/core/error.h"
#include "meshtrain/train/evaluate.h"

namespace meshtrain::cli {

int cmd_eval(int argc, char** argv) {
  cxxopts::Options o("meshtrain eval",
                     std::string("Evaluate a checkpoint on token shards: mean cross-entropy loss (nats per token), perplexity "
                     "and the tokens evaluated. The windows are read in order, split over data-parallel ranks and "
                     "averaged as the trainer's validation does: --data = the run's data.val with --batches = "
                     "train.eval_batches reproduces its last val_loss. Micro-batch size, sequence length, dtype "
                     "and data format are the checkpoint's config (a Hugging Face directory's: meshtrain's defaults, with "
                     "sequences of min(the model's positions, 2048) tokens; override with --set). Under meshrun every rank "
                     "holds the whole model unless --set parallel.fsdp=N or parallel.tp=N shards it; any layout "
                     "reads any checkpoint." + std::string(kModelArgumentHelp)));
  o.add_options()("data", "token shards to evaluate on: a file or a glob (required)", cxxopts::value<std::string>())(
      "batches", "micro-batches per data-parallel rank; 0 = every whole batch of the data",
      cxxopts::value<int64_t>()->default_value("0"))("json", "print the result as one JSON object")(
      "set", "override a value of the checkpoint's config: section.key=value (repeatable), e.g. "
             "train.micro_batch_size=4, data.seq_len=128, train.dtype=fp32",
      cxxopts::value<std::vector<std::string>>())("h,help", "show this help")(
      "checkpoint", "", cxxopts::value<std::vector<std::string>>());
  o.parse_positional({"checkpoint"});
  o.positional_help("CHECKPOINT");
  auto r = parse(o, argc, argv);
  MT_USER_CHECK(r.count("checkpoint") == 1, "meshtrain eval: expected one CHECKPOINT (a step directory or the "
                "checkpoint directory holding `latest`), got ", r.count("checkpoint"), " (see --help)");
  train::EvalOptions opts{.checkpoint = strings(r, "checkpoint")[0],
                          .data = r.count("data") ? r["data"].as<std::string>() : std::string(),
                          .batches = r["batches"].as<int64_t>(),
                          .overrides = strings(r, "set")};
  const train::EvalResult res = train::run_eval(opts);
  if (comm::world_info_from_env().rank != 0) return 0;
  std::printf("%s\n", (r.count("json") ? train::eval_json(res, opts.data) : train::eval_summary(res, opts.data)).c_str());
  return 0;
}

}  // namespace meshtrain::cli

// Evaluation of a checkpoint (`meshtrain eval CKPT --data SHARDS`): the number a user compares with
// transformers or with another run.
//
// The model is built as the trainer builds it — the checkpoint's config (meta.json), parallelize() over this
// process's mesh, the weights read by ckpt::load_into from whatever layout saved them — so a checkpoint
// sharded over N ranks evaluates under meshrun with any layout, or in one process. The data's windows are
// read in order (no shuffle) and split over the data-parallel ranks as the trainer's validation splits them:
// the loss is the mean over every counted target (train/validation_loss.h), so `--data` = the run's data.val with
// `--batches` = train.eval_batches gives the trainer's last val_loss on the same windows.
//
// Layout: every rank holds the whole model (dp = world size) unless the overrides shard it
// (--set parallel.fsdp=N / parallel.tp=N). Micro-batch size, sequence length, dtype and data format are the
// checkpoint's unless overridden.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace meshtrain::train {

struct EvalOptions {
  std::string checkpoint;              // a step directory or a directory holding `latest`
  std::string data;                    // token shards: a file or a glob
  int64_t batches = 0;                 // micro-batches per data-parallel rank; 0 = every whole batch of the data
  std::vector<std::string> overrides;  // "section.key=value" on top of the checkpoint's config
};

struct EvalResult {
  std::string checkpoint;  // the resolved step directory
  int64_t step = 0;        // the step that saved it
  double loss = 0;         // mean cross-entropy per token (nats)
  double perplexity = 0;   // exp(loss)
  int64_t tokens = 0;         // targets the loss counted (unmasked: loss masks and document starts), all ranks
  int64_t window_tokens = 0;  // tokens in the windows evaluated (batches × micro_batch_size × seq_len × ranks)
  int64_t batches = 0;     // micro-batches per data-parallel rank
  int64_t micro_batch_size = 0, seq_len = 0;
  int data_ranks = 1, world_size = 1;
};

// Collective under meshrun: every rank calls it; every rank returns the same loss.
EvalResult run_eval(const EvalOptions& opts);

// "step 200 of CKPT on DATA: loss 1.2345 | perplexity 3.437 | 12288 tokens (…)".
std::string eval_summary(const EvalResult& r, const std::string& data);
// One JSON object, no trailing newline.
std::string eval_json(const EvalResult& r, const std::string& data);

}  // namespace meshtrain::train

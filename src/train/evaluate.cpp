// run_eval (evaluate.h): the trainer's model set-up without an optimizer, then the validation loop.
#include "meshtrain/train/evaluate.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "meshtrain/ckpt/inference_checkpoint.h"
#include "meshtrain/comm/world_info.h"
#include "meshtrain/core/config.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"
#include "meshtrain/core/model_size.h"
#include "meshtrain/data/data_loader.h"
#include "meshtrain/model/transformer.h"
#include "meshtrain/ckpt/nf4_base_load.h"
#include "meshtrain/parallel/parallelize.h"
#include "meshtrain/train/checkpoint_state.h"
#include "meshtrain/train/metrics.h"
#include "meshtrain/train/validation_loss.h"
#include "meshtrain/train/worker_setup.h"

namespace meshtrain::train {
namespace {

// The overrides that turn the checkpoint's config into an evaluation's: the layout reset to replicas on every
// rank and the data pointed at `data`; the user's overrides come last and win.
std::vector<std::string> eval_overrides(const EvalOptions& opts) {
  std::vector<std::string> sets = {"parallel.dp=0",          "parallel.fsdp=1",           "parallel.tp=1",
                                   "parallel.zero_stage=0",  "parallel.sequence_parallel=false",
                                   "train.device=auto",      "checkpoint.resume=none",    "checkpoint.init_from=",
                                   "data.val=",              "data.train=" + opts.data};
  sets.insert(sets.end(), opts.overrides.begin(), opts.overrides.end());
  return sets;
}

// The checkpoint's config with the evaluation's overrides, resolved and validated for `world_size`.
Config eval_config(const ckpt::InferenceCheckpoint& ck, int world_size) {
  Config cfg = ck.config;
  resolve(cfg, world_size);
  validate(cfg, world_size);  // the data loader names --data itself when it matches no file
  return cfg;
}

// What the trainer's set-up does for the model, minus the optimizer: the worker set-up (device,
// communicator, mesh), parallelize(), then this rank's blocks from the checkpoint.
class Evaluator {
 public:
  Evaluator(const Config& cfg, const comm::WorldInfo& world, const ckpt::InferenceCheckpoint& ck)
      : w_(start(cfg, world)) {
    check_fits_device(cfg, /*training=*/false, device_memory_bytes(w_.cuda, w_.device.index()), w_.device.str());
    net_ = model::Transformer(cfg.model, at::TensorOptions().device(at::kMeta));
    par_ = parallel::parallelize(net_, w_.groups(), cfg, w_.device);
    net_->eval();
    net_->set_loss_chunk_bytes(cfg.train.loss_chunk_mb << 20);
    net_->use_kernels(cfg.train);
    auto blocks = model_blocks(*par_);
    ckpt::load_model_weights(ck, blocks);
    // QLoRA: the NF4 block linears, which are no parameters, from the same checkpoint's base.
    if (cfg.model.base_quant != BaseQuant::none && !ck.hf) ckpt::load_nf4_base(par_->module(), w_.device, ck.dir);
  }

  int data_rank() const { return w_.data_rank; }
  int data_ranks() const { return w_.data_ranks; }

  // Validation's loss (train/validation_loss.h) of `n` micro-batches of `loader`, in the training precision.
  HeldOutLoss mean_loss(data::DataLoader& loader, int64_t n) {
    return validation_loss(*par_, loader, n, w_.device, w_.comm.get());
  }

 private:
  static WorkerSetup start(const Config& cfg, const comm::WorldInfo& world) {
    if (cfg.train.threads > 0) at::set_num_threads(static_cast<int>(cfg.train.threads));
    return make_worker_setup(cfg, world, "eval");
  }

  WorkerSetup w_;
  model::Transformer net_{nullptr};
  std::unique_ptr<parallel::ParallelModel> par_;
};

}  // namespace

EvalResult run_eval(const EvalOptions& opts) {
  MT_USER_CHECK(!opts.data.empty(), "meshtrain eval: --data SHARDS is required (a file or a glob of token shards)");
  MT_USER_CHECK(opts.batches >= 0, "--batches: given ", opts.batches, "; valid ≥ 1, or 0 for all the data");
  const comm::WorldInfo world = comm::world_info_from_env();
  EvalResult r;
  const ckpt::InferenceCheckpoint ck = ckpt::open_for_inference(opts.checkpoint, eval_overrides(opts));
  r.checkpoint = ck.dir;
  const Config cfg = eval_config(ck, world.world_size);
  Evaluator ev(cfg, world, ck);
  data::DataLoader loader({.sources = {{opts.data}}, .what = "--data", .format = cfg.data.format,
                           .seq_len = cfg.data.seq_len, .batch_size = cfg.train.micro_batch_size,
                           .rank = ev.data_rank(), .world_size = ev.data_ranks(), .shuffle = false,
                           .vocab_size = cfg.model.vocab_size, .loss_mask = cfg.data.loss_mask == LossMask::automatic,
                           .packing = cfg.data.packing, .fit_batch = true});  // as the trainer's validation
  const int64_t available = loader.batches_per_epoch();
  MT_USER_CHECK(opts.batches <= available, "--batches: given ", opts.batches, "; '", opts.data, "' holds ", available,
                " micro-batches of ", loader.batch_size(), " × ", cfg.data.seq_len, " tokens per rank (",
                ev.data_ranks(), " data-parallel rank(s)); valid 1 … ", available, ", or 0 for all");
  r.step = ck.meta.step;
  r.batches = opts.batches > 0 ? opts.batches : available;
  const HeldOutLoss held_out = ev.mean_loss(loader, r.batches);
  r.loss = held_out.loss;
  r.tokens = held_out.tokens;
  MT_USER_CHECK(r.loss >= 0, "--data: '", opts.data, "' has no target the loss counts in ", r.batches,
                " micro-batch(es) per rank (every one masked)");
  r.perplexity = std::exp(r.loss);
  r.micro_batch_size = loader.batch_size();
  r.seq_len = cfg.data.seq_len;
  r.data_ranks = ev.data_ranks();
  r.world_size = world.world_size;
  r.window_tokens = r.batches * r.micro_batch_size * r.seq_len * r.data_ranks;
  return r;
}

std::string eval_summary(const EvalResult& r, const std::string& data) {
  return log::sprintf("%s (step %lld) on %s: loss %.6f | perplexity %.4f | %lld tokens counted by the loss, of "
                      "%lld in the windows (%lld batches × %lld × %lld per rank × %d data rank(s))",
                      r.checkpoint.c_str(), static_cast<long long>(r.step), data.c_str(), r.loss, r.perplexity,
                      static_cast<long long>(r.tokens), static_cast<long long>(r.window_tokens),
                      static_cast<long long>(r.batches),
                      static_cast<long long>(r.micro_batch_size), static_cast<long long>(r.seq_len), r.data_ranks);
}

std::string eval_json(const EvalResult& r, const std::string& data) {
  nlohmann::ordered_json j = {{"checkpoint", r.checkpoint},
                              {"step", r.step},
                              {"data", data},
                              {"loss", r.loss},
                              {"perplexity", r.perplexity},
                              {"tokens", r.tokens},
                              {"window_tokens", r.window_tokens},
                              {"batches", r.batches},
                              {"micro_batch_size", r.micro_batch_size},
                              {"seq_len", r.seq_len},
                              {"data_ranks", r.data_ranks},
                              {"world_size", r.world_size}};
  return j.dump();
}

}  // namespace meshtrain::train

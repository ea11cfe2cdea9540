#include "meshtrain/train/trainer.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/autograd.h>
#include <torch/cuda.h>
#ifdef MESHTRAIN_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <utility>

#include "meshtrain/ckpt/adapter_checkpoint.h"
#include "meshtrain/ckpt/nf4_base_load.h"
#include "meshtrain/ckpt/checkpoint.h"
#include "meshtrain/ckpt/checkpoint_dir.h"
#include "meshtrain/ckpt/checkpoint_reader.h"
#include "meshtrain/ckpt/hf_files.h"
#include "meshtrain/ckpt/hf_model_dir.h"
#include "meshtrain/ckpt/model_path.h"
#include "meshtrain/ckpt/replica_writers.h"
#include "meshtrain/ckpt/resume_candidates.h"
#include "meshtrain/ckpt/safetensors.h"
#include "meshtrain/comm/mesh.h"
#include "meshtrain/comm/wait_clock.h"
#include "meshtrain/comm/world_info.h"
#include "meshtrain/core/clock.h"
#include "meshtrain/core/config_enums.h"
#include "meshtrain/core/data_sources.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/fs.h"
#include "meshtrain/core/join.h"
#include "meshtrain/core/log.h"
#include "meshtrain/core/model_size.h"
#include "meshtrain/core/run_dir.h"
#include "meshtrain/data/data_loader.h"
#include "meshtrain/model/linear/fp8_linear.h"
#include "meshtrain/model/generate.h"
#include "meshtrain/model/linear/lora_linear.h"
#include "meshtrain/model/transformer.h"
#include "meshtrain/parallel/parallelize.h"
#include "meshtrain/parallel/trainable_policy.h"
#include "meshtrain/plan/memory_model.h"
#include "meshtrain/plan/training_flops.h"
#include "meshtrain/train/attention_setup.h"
#include "meshtrain/train/optimizer.h"
#include "meshtrain/train/memory_checkpoints.h"
#include "meshtrain/train/resume_settings.h"
#include "meshtrain/train/sample_text.h"
#include "meshtrain/train/checkpoint_state.h"
#include "meshtrain/train/cuda_graph_step.h"
#include "meshtrain/train/lora_base.h"
#include "meshtrain/train/lr_schedule.h"
#include "meshtrain/train/metrics.h"
#include "meshtrain/train/recovery_report.h"
#include "meshtrain/train/step_profiler.h"
#include "meshtrain/train/step_telemetry.h"
#include "meshtrain/train/in_place_restart.h"
#include "meshtrain/train/stop_signals.h"
#include "meshtrain/train/validation_loss.h"
#include "meshtrain/train/worker_setup.h"

namespace meshtrain::train {
namespace {

// Every rank of `group` takes its rank 0's generator states. Tensor-parallel ranks must draw alike (LoRA's
// adapter dropout draws one mask for the group's replicated input, docs/lora.md; synthetic data is the data
// rank's): a resume that reseeds the streams of ranks the checkpoint lacks would part them.
void align_rng_over(comm::Communicator& group, RngStreams& streams) {
  for (auto& [name, gen] : streams) {
    // Bytes widened to int32: communicators take no byte tensors.
    at::Tensor state = gen.get_state().to(group.device(), at::kInt);
    group.broadcast(state, 0)->wait();
    gen.set_state(state.to(at::kCPU, at::kByte));
  }
}

// The PCI bus id of the training GPU ("0000:07:00.0"), which NVML knows it by; empty on CPU.
std::string device_pci_bus_id(bool cuda, int device_index) {
#ifdef MESHTRAIN_WITH_CUDA
  if (cuda) {
    const auto* p = at::cuda::getDeviceProperties(device_index);
    return log::sprintf("%04x:%02x:%02x.0", p->pciDomainID, p->pciBusID, p->pciDeviceID);
  }
#endif
  (void)cuda, (void)device_index;
  return "";
}

// CRC-32 of this rank's parameters (the whole model, or its shards).
uint32_t parameter_checksum(const std::vector<ShardedTensor>& params) {
  uint32_t crc = 0;
  for (const auto& s : params) {
    auto c = s.local.detach().cpu().contiguous();
    crc = ckpt::crc32(c.data_ptr(), static_cast<size_t>(c.numel()) * c.element_size(), crc);
  }
  return crc;
}

// Parameters of the whole model (before tensor parallelism) that train: all but those the trainable policy
// freezes (train.freeze; with LoRA every base parameter).
int64_t count_trainable(const Config& cfg, model::TransformerImpl& net) {
  const auto policy = parallel::TrainablePolicy::from_config(cfg);
  int64_t n = 0;
  for (const auto& p : net.named_parameters())
    if (policy.trains(p.key())) n += p.value().numel();
  return n;
}

// Logging and threads first (the set-up logs), then the device, communicator and mesh.
WorkerSetup start_worker(const Config& cfg) {
  const comm::WorldInfo world = comm::world_info_from_env();
  log::init({.rank = world.world_size > 1 ? world.rank : -1, .level = log::parse_level(enum_name(cfg.logging.level)),
             .all_ranks = cfg.logging.all_ranks});
  if (cfg.train.threads > 0) at::set_num_threads(static_cast<int>(cfg.train.threads));
  return make_worker_setup(cfg, world, "world");
}

// One training run: the state the loop needs, set up in the constructor, advanced by run().
class TrainingRun {
 public:
  explicit TrainingRun(const Config& cfg);
  TrainResult run();

 private:
  // train.overwrite on a fresh start: rank 0 removes the previous run's checkpoints and metrics before anything
  // is written; the other ranks wait for it (collective).
  void start_afresh_if_asked();
  // A resume keeps the checkpoint's global batch where the data-parallel width changed (train/resume_settings.h):
  // cfg_.train.grad_accum derived, or UserError.
  void keep_global_batch();
  void setup_model_and_optimizer();
  void setup_data();
  // " (1792 trainable, 0.144%: LoRA rank 4)" where fewer than all parameters train, else "".
  std::string trainable_note() const;
  // The device's peak since the first step began (CPU: the max RSS of the whole run).
  int64_t step_peak_bytes() const { return peak_memory_bytes(w_.cuda, w_.device.index()); }
  void resume_if_asked();
  // checkpoint.memory_every: in-memory checkpoints (train/memory_checkpoints.h), or none.
  void setup_memory_checkpoints();
  // resume=auto: the newest in-memory checkpoint every rank reaches, where none on disk is newer. False: none
  // (or it did not load on some rank), and the disk's candidates are next.
  bool resume_from_host_memory(const std::vector<std::string>& disk_candidates);
  // The checkpoints a resume may start from, best first: the given path, or (auto) the usable ones, newest
  // first; none for a fresh start. UserError when auto finds checkpoints but none is usable.
  std::vector<std::string> resume_candidates();
  // Fills this rank's model and optimizer blocks from `dir`. UserError when it cannot (a damaged shard).
  void load_training_state(const std::string& dir, const ckpt::CheckpointMeta& meta);
  // Step, data position and generators from `dir` (UserError when its generator states cannot be read).
  void restore_position(const std::string& dir, const ckpt::CheckpointMeta& meta);
  // The next training micro-batch on the device: from the loader, or random tokens (data.train: synthetic).
  data::Batch next_batch();
  // The step's grad_accum micro-batches, each weighted by its share of the step's unmasked targets when the
  // data masks targets.
  std::vector<parallel::ParallelModel::MicroBatch> step_micro_batches();
  // Unmasked targets of the step over all data-parallel ranks, from this rank's `local` count (collective).
  int64_t step_loss_tokens(int64_t local);
  struct StepOutcome {
    at::Tensor loss_sum, grad_norm;  // summed micro-batch losses, pre-clip gradient norm (on the device)
    // 1 where the loss or norm was non-finite on some rank and the update was skipped, else 0 (a 0-dim tensor,
    // on the device where the optimizer decided there): read only once the step has finished.
    at::Tensor skipped;
  };
  // A step queued on the device whose bookkeeping is still to do. run() keeps at most one step in flight: the
  // host does one step's bookkeeping (the log line, telemetry, the next batch) while the device computes the
  // next, instead of the device idling between steps while the host catches up.
  struct QueuedStep {
    int64_t step = 0;
    Clock::time_point t0;
    double blocked0 = 0, device_wait0 = 0;  // the comm wait clocks when the step began
    // {summed loss, pre-clip gradient norm, skipped (1) or applied (0)}, fp32, copied to host memory behind
    // the step's kernels; readable once `end` has passed.
    at::Tensor host_values;
    std::optional<c10::Event> end;  // recorded after the step's last kernel (CUDA)
    std::vector<int64_t> source_windows;  // a mixture's windows per source after this step (its log line)
    Clock::time_point done_at;      // on the CPU, where the step ran as it was queued: when queuing ended
  };
  // Queues step `step`: its batches, forward, backward and update, and the copy of its outcome to the host.
  QueuedStep queue_step(int64_t step);
  // Whether step's bookkeeping may wait until the next step is queued: nothing between the two needs the
  // device finished (evaluation, a checkpoint, the last step, the end of the profiled steps), the optimizer
  // decides on the device, and another skipped update cannot reach train.max_nonfinite_steps here.
  bool may_overlap(int64_t step) const;
  // Whether the run evaluates (every train.eval_every steps and at the end; never when it is 0) / saves a
  // checkpoint (checkpoint.every; at the end checkpoint.save_final) after `done` steps.
  bool evaluates_after(int64_t done) const;
  bool saves_after(int64_t done) const;
  // Waits for q's device work (with `whole_device`, every stream's, as before a checkpoint), then its timing,
  // the non-finite streak (UserError at the limit) and the log line. Returns the agreed stop signal
  // (collective; 0: none).
  int finish_step(const QueuedStep& q, bool whole_device);
  // After a finished step: evaluation, a checkpoint, and the stop on `sig`. False: the run stops here.
  bool end_of_step(int64_t step, int sig);
  // grad_accum micro-batches through the layout's forward_backward, clipping, then AdamW — unless the loss
  // or gradient norm is non-finite on any rank, when every rank skips the update.
  StepOutcome train_step(int64_t step);
  // The optimizer's step where it can decide on the device (Optimizer::steps_on_device()): the clip divisor
  // and the skip flag are device tensors, so the update is queued behind the backward with no host read.
  at::Tensor device_decided_step(int64_t step, const at::Tensor& loss_sum, const at::Tensor& grad_norm);
  // 1 (fp32 0-dim, on the device) where any rank's loss or the gradient norm is non-finite, else 0; no host read.
  at::Tensor nonfinite_on_any_rank(const at::Tensor& loss_sum, const at::Tensor& grad_norm);
  // After a skipped update: a warning, and a UserError once train.max_nonfinite_steps are skipped in a row.
  void check_nonfinite_streak(int64_t done);
  // Before a save: UserError (on every rank) if any rank's model or optimizer state is not finite.
  void check_state_finite(int64_t step, const std::vector<ShardedTensor>& blocks);
  std::string mfu_text(double mfu) const;  // " | MFU x% (HFU y%)", or "" where the peak is unknown
  void log_step(int64_t done, double step_s, double compute_s, double loss_sum, double grad_norm, double lr,
                const std::vector<int64_t>& source_windows);
  // The validation loss over every data.val source (−1: no validation), each source's in `by_source`.
  double evaluate(std::vector<double>& by_source);
  void save(int64_t step);
  // This rank's model and optimizer blocks as a checkpoint holds them (LoRA over init_from: the adapters'), and
  // what meta.json records beside them.
  std::vector<ShardedTensor> state_blocks();
  ckpt::SaveInfo save_info(int64_t step);
  // An in-memory checkpoint after `done` steps (checkpoint.memory_every).
  bool snapshots_after(int64_t done) const;
  // QLoRA over a seeded base (no checkpoint.init_from): no checkpoint of it could be resumed or exported (its NF4
  // weights are no parameters), so it saves none — not at a stop signal, not in memory.
  bool quantizes_seeded_base() const {
    return cfg_.model.base_quant != BaseQuant::none && cfg_.checkpoint.init_from.empty();
  }
  void snapshot(int64_t done);
  // checkpoint.init_from: the model's weights from a checkpoint, everything else fresh (no resume asked).
  void init_from_weights();
  // checkpoint.init_from naming a Hugging Face directory (or a Hub id's snapshot): `model` read from its
  // safetensors, the model section checked against its config.json, the tokenizer files copied to train.out_dir.
  void init_from_hf(const std::string& dir, std::vector<ShardedTensor>& model);
  // model.base_quant nf4: the NF4 block linears quantized again from checkpoint.init_from's values, one
  // weight at a time (they are no parameters, so the loads above skipped them).
  void quantize_base_from_init();
  // This rank's generators, as checkpoints save and restore them.
  RngStreams rng_streams() const;
  // `v` reduced over every rank (fp32); mean_over_ranks / max_over_ranks: Avg / Max.
  double over_ranks(double v, comm::ReduceOp op);
  double mean_over_ranks(double v) { return over_ranks(v, comm::ReduceOp::Avg); }
  double max_over_ranks(double v) { return over_ranks(v, comm::ReduceOp::Max); }
  // The layout's step_metrics() of every rank, by key (collective over the world).
  std::vector<std::pair<std::string, std::vector<double>>> layout_metrics_over_ranks();
  // Every rank must stop at the same step: the highest signal number any rank saw wins (0 = none).
  int agreed_stop_signal();
  // Whether the run samples after `done` steps before its end (train.sample_every; the end's sample follows the
  // loop, after the last checkpoint).
  bool samples_after(int64_t done) const;
  // The samples of train.sample_prompts after `done` steps, through the model's tokenizer (train/sample_text.h);
  // every rank calls it (the layout's generation scope is collective), rank 0 logs them and writes them to the
  // metrics (`samples`) and TensorBoard (text).
  void sample(int64_t done);

  Config cfg_;      // the run's config; a resume at another width may derive its train.grad_accum
  Config given_;    // as the run was given it: what its checkpoints record as the batch settings (state.batch)
  WorkerSetup w_;  // device, communicator, mesh and data rank (train/worker_setup.h)
  model::Transformer net_{nullptr};
  std::unique_ptr<parallel::ParallelModel> par_;  // the model as the layout runs it (parallel/parallelize.h)
  std::unique_ptr<CudaGraphStep> graph_step_;  // train.cuda_graph: the step's forward + backward replayed
  Clock::time_point last_step_end_;            // when the host saw the previous step finish
  std::unique_ptr<Optimizer> opt_;  // AdamW on the device or offloaded (train/optimizer.h)
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<data::DataLoader> train_loader_;  // null for synthetic data
  std::vector<std::unique_ptr<data::DataLoader>> val_loaders_;  // one per data.val source
  at::Generator synthetic_gen_;
  std::unique_ptr<ckpt::CheckpointManager> ckpts_;
  std::unique_ptr<MemoryCheckpoints> memory_;  // checkpoint.memory_every; null when off
  std::vector<char> ckpt_writes_;  // per saved block (model, optimizer): whether this rank writes it
  std::unique_ptr<MetricsLog> metrics_;
  RecoveryReport recovery_;
  nlohmann::json lora_record_;  // what every checkpoint records of a LoRA run's base (null until the first save)
  std::unique_ptr<StepProfiler> profiler_;  // train.profile_steps: records a few steps (train/step_profiler.h)
  std::unique_ptr<StepTelemetry> telemetry_;  // every rank's times and GPU readings at each logged step
  StopSignals stop_signals_;
  std::optional<SampleText> sample_text_;  // with train.sample_tokens > 0: prompts → tokens → text
  int64_t start_step_ = 0, tokens_per_step_ = 0, num_params_ = 0;
  int64_t trainable_params_ = 0;  // of num_params_, those that train (LoRA's adapters, all but train.freeze's)
  int64_t nonfinite_streak_ = 0, nonfinite_skipped_ = 0;  // updates skipped: in a row now, in this run
  double flops_per_token_ = 0, peak_flops_ = 0, ema_step_s_ = 0;
  double hardware_per_model_flops_ = 1;  // HFU / MFU: frozen weights' missing gradients, recomputation
  int64_t planned_peak_bytes_ = 0;  // what `meshtrain plan` predicts for this rank's peak (CUDA only; 0 = none)
  int64_t setup_peak_bytes_ = 0;    // the device's peak before the first step (the allocator's peak restarts then)
  Clock::time_point run_start_;
  TrainResult result_;
};

TrainingRun::TrainingRun(const Config& cfg) : cfg_(cfg), given_(cfg), w_(start_worker(cfg)) {
  start_afresh_if_asked();
  keep_global_batch();
  setup_model_and_optimizer();
  setup_data();
  // Packed documents: shards with document boundaries (their flag sidecars) and data.packing.
  setup_attention_backend(cfg_, w_.device, w_.bf16, train_loader_ && train_loader_->masks_targets() && cfg.data.packing);
  if (cfg_.train.sample_tokens > 0) {
    sample_text_.emplace(SampleText::for_run(cfg_, train_loader_ && train_loader_->masks_targets()));
    const std::string when =
        cfg_.train.sample_every > 0 ? cat(" every ", cfg_.train.sample_every, " steps and") : std::string();
    log::progress("samples of %lld tokens%s at the end, through %s", static_cast<long long>(cfg_.train.sample_tokens),
                  when.c_str(), sample_text_->describe().c_str());
  }
  ckpts_ = std::make_unique<ckpt::CheckpointManager>(cfg.checkpoint.dir, cfg.checkpoint.keep, w_.comm);
  setup_memory_checkpoints();
  resume_if_asked();
  if (memory_) memory_->start_at(start_step_);
  par_->broadcast_parameters();
  // An offloaded master copies what was loaded and broadcast, or (gradients streamed) the parameters are
  // written from the master the checkpoint loaded into.
  opt_->parameters_changed();
  // Building and loading can peak above a step (and differently per layout): the plan predicts the steps.
  setup_peak_bytes_ = peak_memory_bytes(w_.cuda, w_.device.index());
  reset_peak_memory(w_.cuda, w_.device.index());

  // Before this attempt appends to the metrics file: the steps it logged before a failure are what a restart redoes.
  if (w_.world.rank == 0) recovery_ = RecoveryReport::from_environment(cfg.logging.metrics, start_step_);
  metrics_ = std::make_unique<MetricsLog>(cfg, w_.world.rank, start_step_ > 0);
  telemetry_ = std::make_unique<StepTelemetry>(
      StepTelemetry::Options{.rank = w_.world.rank, .world_size = w_.world.world_size,
                             .local_world_size = w_.world.local_world_size, .gpu_readings = cfg.logging.gpu_telemetry,
                             .pci_bus_id = device_pci_bus_id(w_.cuda, w_.device.index()),
                             .straggler_threshold = cfg.logging.straggler_threshold},
      w_.comm);
  // A window past the end of the run is moved back so that it is recorded whole.
  const int64_t profiled = std::min(cfg.train.profile_steps, cfg.train.steps);
  profiler_ = std::make_unique<StepProfiler>(
      std::min(cfg.train.profile_start, cfg.train.steps - profiled), profiled,
      cfg.train.profile_dir.empty() ? cfg.train.out_dir + "/profile" : cfg.train.profile_dir, w_.world.rank, w_.cuda,
      w_.device.index());
  // Tokens the whole job consumes per step: each data-parallel rank's batches (tp ranks share theirs).
  tokens_per_step_ = cfg_.train.micro_batch_size * cfg_.data.seq_len * cfg_.train.grad_accum * w_.data_ranks;
  peak_flops_ = device_peak_flops(w_.cuda, w_.device.index());
  log::progress("model %s: %.2fM parameters%s, %lld layers, d_model %lld | %s %s | world %d%s | %lld tokens/step | "
                "train %s",
                enum_c_str(cfg.model.family), static_cast<double>(num_params_) / 1e6,
                trainable_note().c_str(),
                static_cast<long long>(cfg.model.n_layer), static_cast<long long>(cfg.model.d_model),
                w_.device.str().c_str(), w_.bf16 ? "bf16" : "fp32", w_.world.world_size,
                w_.mesh ? (" | mesh " + w_.mesh->shape().describe()).c_str() : "", static_cast<long long>(tokens_per_step_),
                train_loader_ ? log::sprintf("%lld tokens (%lld windows)", static_cast<long long>(train_loader_->num_tokens()),
                                             static_cast<long long>(train_loader_->num_windows())).c_str()
                              : "on synthetic tokens");
}

std::string TrainingRun::trainable_note() const {
  if (trainable_params_ == num_params_) return "";
  const std::string lora = cfg_.model.lora_rank > 0 ? cat(": LoRA rank ", cfg_.model.lora_rank) : std::string();
  return log::sprintf(" (%lld trainable, %.3g%%%s)", static_cast<long long>(trainable_params_),
                      100.0 * static_cast<double>(trainable_params_) / static_cast<double>(num_params_), lora.c_str());
}

void TrainingRun::start_afresh_if_asked() {
  if (!cfg_.train.overwrite || cfg_.checkpoint.resume != "none") return;
  if (w_.world.rank == 0) {
    std::vector<std::string> removed;
    for (const auto& path : previous_run_files(cfg_)) {
      remove_tree(path);
      removed.push_back(std::filesystem::path(path).filename().string());
    }
    if (!removed.empty())
      log::progress("train.overwrite: starting afresh in %s: removed the previous run's %s",
                    cfg_.train.out_dir.c_str(), join(removed, ", ").c_str());
  }
  if (w_.comm) w_.comm->barrier();  // nobody writes into the directory before it is cleared
}

void TrainingRun::keep_global_batch() {
  const auto dir = first_resume_checkpoint(cfg_);
  if (!dir) return;
  const BatchDecision d = keep_global_batch_for(cfg_, w_.data_ranks, *dir, ckpt::read_meta(*dir));
  if (!d.note.empty()) log::progress("%s", d.note.c_str());
  if (d.grad_accum == cfg_.train.grad_accum) return;
  cfg_.train.grad_accum = d.grad_accum;
  validate(cfg_, w_.world.world_size);  // the derived accumulation must suit the layout (pipeline micro-batches)
}

void TrainingRun::setup_model_and_optimizer() {
  // Built on the meta device and materialised on the training device, so no full CPU copy is made. The
  // same seed on every rank gives the same initial weights; the broadcast after setup makes it certain.
  at::manual_seed(static_cast<uint64_t>(cfg_.train.seed));
  check_fits_device(cfg_, /*training=*/true, device_memory_bytes(w_.cuda, w_.device.index()), w_.device.str());
  // QLoRA quantizes a base that is on disk, which its adapters-only checkpoints name; a seeded base would be
  // in none of its checkpoints (the NF4 weights are no parameters), so only a run that saves none (a
  // benchmark: `bench train --lora R --set model.base_quant=nf4`) may quantize one.
  const bool saves = cfg_.checkpoint.every > 0 || cfg_.checkpoint.save_final;
  MT_USER_CHECK(!quantizes_seeded_base() || !saves,
                "model.base_quant: given ", cfg_.model.base_quant, " without checkpoint.init_from; valid nf4 over "
                "a base checkpoint (checkpoint.init_from: the base it quantizes), nf4 over the seeded base of a run "
                "that saves no checkpoint (checkpoint.every 0 and checkpoint.save_final false), or none");
  // parallelize() materialises the parameters: whole (replicated) or only this rank's shards.
  net_ = model::Transformer(cfg_.model, at::TensorOptions().device(at::kMeta));
  // Counted on the whole model, before tensor parallelism leaves this rank its blocks only.
  num_params_ = net_->num_params();
  trainable_params_ = count_trainable(cfg_, *net_);
  flops_per_token_ = 3.0 * net_->flops_per_token(cfg_.data.seq_len);
  const plan::TrainingFlops flops = plan::training_flops_per_token(cfg_);
  hardware_per_model_flops_ = flops.hardware_per_token / flops.model_per_token;
  par_ = parallel::parallelize(net_, w_.groups(), cfg_, w_.device);
  net_->train();
  net_->set_loss_chunk_bytes(cfg_.train.loss_chunk_mb << 20);
  net_->use_kernels(cfg_.train);
  if (const Fp8Scaling fp8 = cfg_.train.fp8; fp8 != Fp8Scaling::off) {
    MT_USER_CHECK(model::fp8_matmul_available(w_.device), "train.fp8: given '", fp8, "', but ",
                  w_.device.str(), " has no FP8 matmuls (a CUDA GPU of compute capability ≥ 8.9 has); valid off");
    // A pipeline's stages set it themselves (parallel/pipeline/pipeline_model.cpp).
    const model::Fp8Layers n = model::use_fp8(*net_, fp8, cfg_.train.fp8_min_width);
    log::progress("train.fp8: FP8 matmuls in %lld of the blocks' %lld linear layers; the others keep bf16 (narrower "
                  "than train.fp8_min_width %lld: in·out / (in + out); 0 = every layer)",
                  static_cast<long long>(n.fp8), static_cast<long long>(n.layers),
                  static_cast<long long>(cfg_.train.fp8_min_width));
    if (fp8 == Fp8Scaling::delayed)
      log::progress("train.fp8 delayed: each cast scaled from the amaxes of its last 16 at the same place; the "
                    "first step's casts from their own (the histories are not checkpointed: a resume starts them "
                    "again)");
  }
  // After every switch of the model above: the graph captures the kernels they choose.
  if (cfg_.train.cuda_graph == OnOff::on) graph_step_ = std::make_unique<CudaGraphStep>(*par_, w_.device);
  opt_ = make_optimizer(*par_, cfg_.optimizer, cfg_.train.grad_accum);
  schedule_ = std::make_unique<LrSchedule>(cfg_.schedule, cfg_.optimizer.lr, cfg_.train.steps);
  log::progress("layout: %s%s", par_->describe().c_str(),
                graph_step_ ? log::sprintf(", CUDA graph of the forward and backward after %lld eager steps",
                                           static_cast<long long>(CudaGraphStep::kWarmupSteps)).c_str() : "");
  if (w_.cuda) {
    // The planner's prediction of the allocator's peak, logged beside the measured one at the first step.
    plan::GpuSpec gpu{.name = w_.device.str(), .memory_bytes = device_memory_bytes(true, w_.device.index())};
    planned_peak_bytes_ = plan::estimate_memory(cfg_, w_.world.world_size, gpu, true).peak_allocated;
  }
}

void TrainingRun::setup_data() {
  if (is_synthetic_data(cfg_.data.train)) {
    synthetic_gen_ = at::globalContext().defaultGenerator(w_.device).clone();
    synthetic_gen_.set_current_seed(static_cast<uint64_t>(cfg_.train.seed + w_.data_rank));
    return;
  }
  data::LoaderOptions o{.sources = parse_data_sources(cfg_.data.train), .what = "data.train",
                        .format = cfg_.data.format, .seq_len = cfg_.data.seq_len,
                        .batch_size = cfg_.train.micro_batch_size, .rank = w_.data_rank,
                        .world_size = w_.data_ranks, .seed = static_cast<uint64_t>(cfg_.train.seed),
                        .shuffle = true, .vocab_size = cfg_.model.vocab_size,
                        .loss_mask = cfg_.data.loss_mask == LossMask::automatic, .packing = cfg_.data.packing};
  train_loader_ = std::make_unique<data::DataLoader>(o);
  if (train_loader_->windows_drawn().size() > 1 && w_.world.rank == 0) {
    std::string mix;
    for (size_t s = 0; s < train_loader_->num_sources(); ++s)
      mix += log::sprintf("%s%s %lld windows", s ? ", " : "", train_loader_->source_pattern(s).c_str(),
                          static_cast<long long>(train_loader_->source_windows(s)));
    log::progress("data.train: a mixture of %zu sources (%s) drawn by %s", train_loader_->num_sources(), mix.c_str(),
                  o.sources.front().weighted ? "their weights" : "their windows (no weights given)");
  }
  o.what = "data.val";
  o.shuffle = false;  // validation reads the same windows every time
  o.fit_batch = true;  // a small held-out set is read in smaller micro-batches, not refused
  // Each validation source on its own: its loss is reported beside the overall one.
  for (const DataSource& source : parse_data_sources(cfg_.data.val)) {
    o.sources = {source};
    val_loaders_.push_back(std::make_unique<data::DataLoader>(o));
  }
}

void TrainingRun::resume_if_asked() {
  const std::vector<std::string> candidates = resume_candidates();
  if (resume_from_host_memory(candidates)) return;
  if (candidates.empty()) return init_from_weights();
  const bool fall_back = cfg_.checkpoint.resume == "auto";
  for (const auto& dir : candidates) {
    const ckpt::CheckpointMeta meta = ckpt::read_meta(dir);
    MT_USER_CHECK(meta.step < cfg_.train.steps, dir, ": saved at step ", meta.step, " but train.steps is ",
                  cfg_.train.steps, ": nothing left to train (raise train.steps to go on from it)");
    // Adapters only onto the base they were trained on: the config's mistake, not a damaged checkpoint that
    // resume=auto would skip.
    check_lora_checkpoint(cfg_, dir, meta);
    std::string failure;
    try {
      load_training_state(dir, meta);
      restore_position(dir, meta);
    } catch (const ckpt::IncompatibleCheckpoint& e) {
      // Complete, but saved by another model or optimizer: not damage that an older checkpoint repairs — one
      // that loads would be overwritten by this run, the newer work lost.
      if (!fall_back) throw;
      throw UserError(cat(e.what(), "; checkpoint.resume=auto stops here rather than fall back to an older "
                          "checkpoint this run would overwrite (resume with the config that saved it, or give "
                          "checkpoint.dir another directory)"));
    } catch (const UserError& e) {
      if (!fall_back) throw;
      failure = e.what();
    }
    // A rank may find a damaged shard the others never read: all of them move on to the next together (a
    // later load overwrites everything this one filled).
    if (mean_over_ranks(failure.empty() ? 0.0 : 1.0) == 0.0) {
      log::progress("resumed from %s at step %lld (saved by %d rank(s): %s)", dir.c_str(),
                    static_cast<long long>(start_step_), meta.world_size,
                    meta.mesh.value("layout", std::string("?")).c_str());
      if (const auto saved = recorded_config_if_any(dir, meta)) {
        const std::string note = schedule_change_note(*saved, cfg_, start_step_);
        if (!note.empty()) log::progress("%s", note.c_str());
      }
      return;
    }
    log::warn("checkpoint.resume=auto: skipping %s: %s", dir.c_str(),
              failure.empty() ? "another rank could not load its blocks" : failure.c_str());
  }
  throw UserError(cat("checkpoint.resume=auto: no checkpoint in ", cfg_.checkpoint.dir, " loads (why: the warnings "
                      "above); repair or remove them, or give checkpoint.resume a path"));
}

std::vector<std::string> TrainingRun::resume_candidates() {
  if (cfg_.checkpoint.resume == "none") return {};
  if (cfg_.checkpoint.resume != "auto") return {ckpt::resolve_checkpoint_dir(cfg_.checkpoint.resume)};
  const ckpt::ResumeCandidates found = ckpt::find_resume_candidates(cfg_.checkpoint.dir);
  // A fresh start writes step directories and `latest` over whatever is there: only where nothing is.
  MT_USER_CHECK(!found.usable.empty() || !found.holds_checkpoints, "checkpoint.resume=auto: ", cfg_.checkpoint.dir,
                " holds checkpoints but none is usable (", found.describe_skipped(), "); starting at step 0 would "
                "overwrite them: repair or remove them, or give checkpoint.resume a path");
  for (const auto& s : found.skipped)
    log::warn("checkpoint.resume=auto: skipping %s: %s", s.dir.c_str(), s.why.c_str());
  return found.usable;
}

void TrainingRun::setup_memory_checkpoints() {
  if (quantizes_seeded_base()) return;
  int64_t bytes = 0;
  for (const auto& b : state_blocks()) bytes += b.local.numel() * b.local.element_size();
  memory_ = MemoryCheckpoints::make(cfg_, w_, par_->describe(), bytes, [this](double v) { return max_over_ranks(v); });
}

bool TrainingRun::resume_from_host_memory(const std::vector<std::string>& disk_candidates) {
  if (!memory_ || cfg_.checkpoint.resume != "auto") return false;
  const int64_t disk_step = disk_candidates.empty() ? 0 : ckpt::read_meta(disk_candidates.front()).step;
  const auto found = memory_->store().restore(disk_step);
  if (!found) return false;
  std::string failure;
  try {
    const ckpt::CheckpointMeta meta = ckpt::read_meta(found->dir);
    load_training_state(found->dir, meta);
    restore_position(found->dir, meta);
  } catch (const UserError& e) {
    failure = e.what();
  }
  if (mean_over_ranks(failure.empty() ? 0.0 : 1.0) != 0.0) {
    log::warn("the in-memory checkpoint of step %lld did not load (%s); resuming from disk",
              static_cast<long long>(found->step), failure.empty() ? "on another rank" : failure.c_str());
    return false;
  }
  log::progress("resumed from %s at step %lld (in-memory checkpoint; %d rank(s) from their peer's replica; the "
                "newest on disk: %s)", found->dir.c_str(), static_cast<long long>(start_step_), found->from_replicas,
                disk_candidates.empty() ? "none" : disk_candidates.front().c_str());
  return true;
}

void TrainingRun::load_training_state(const std::string& dir, const ckpt::CheckpointMeta& meta) {
  MT_USER_CHECK(meta.state.contains("data") && meta.state["data"].contains("epoch") &&
                    meta.state["data"].contains("cursor"),
                dir, ": no data position (state.data.epoch, .cursor) or optimizer state (not a training "
                "checkpoint; checkpoint.init_from starts a run from its weights)");
  // This rank's blocks of the model and optimizer state, read from whatever layout saved them.
  auto model = model_blocks(*par_, opt_.get());
  auto wanted = optimizer_blocks(model, *opt_);
  wanted.insert(wanted.begin(), model.begin(), model.end());
  // An adapters-only checkpoint: its frozen base from init_from (checked by check_lora_checkpoint).
  ckpt::load_with_base(dir, wanted, cfg_.checkpoint.init_from, "checkpoint.init_from");
  quantize_base_from_init();
}

void TrainingRun::quantize_base_from_init() {
  if (cfg_.model.base_quant == BaseQuant::none) return;
  const int64_t n = ckpt::load_nf4_base(par_->module(), w_.device, cfg_.checkpoint.init_from);
  log::progress("model.base_quant nf4: %lld block linears quantized from %s", static_cast<long long>(n),
                cfg_.checkpoint.init_from.c_str());
}

void TrainingRun::restore_position(const std::string& dir, const ckpt::CheckpointMeta& meta) {
  start_step_ = meta.step;
  if (train_loader_) train_loader_->restore(loader_state_from(meta.state["data"]));
  auto streams = rng_streams();
  const std::string note = restore_rng(dir, meta, w_.world.rank, streams,
                                       static_cast<uint64_t>(cfg_.train.seed + 1000003 * start_step_));
  if (!note.empty()) log::warn("%s", note.c_str());
  if (cfg_.parallel.tp > 1) align_rng_over(*w_.groups().tp, streams);
}

void TrainingRun::init_from_weights() {
  if (cfg_.checkpoint.init_from.empty()) return;
  // Weights only: the optimizer state, step, data position and RNG start fresh (fine-tuning).
  auto model = model_blocks(*par_, opt_.get());
  const ckpt::ModelPath located = ckpt::locate_model(cfg_.checkpoint.init_from, "checkpoint.init_from");
  if (located.hugging_face) return init_from_hf(located.dir, model);
  // LoRA from a base model's checkpoint: it has no adapters, which keep their initial values (B = 0: the
  // adapted model starts equal to its base). From a LoRA checkpoint, its adapters are taken too (and from an
  // adapters-only one, the base it names).
  const auto from = ckpt::read_meta(ckpt::resolve_checkpoint_dir(cfg_.checkpoint.init_from));
  std::erase_if(model, [&](const ShardedTensor& b) {
    return model::is_lora_parameter(b.name) && !from.tensors.count(b.name);
  });
  const auto ck = ckpt::load_with_base(cfg_.checkpoint.init_from, model);
  quantize_base_from_init();
  log::progress("initialised the model from %s (%zu tensors; step %lld there); optimizer state fresh, step 0",
                ck.path.c_str(), model.size(), static_cast<long long>(ck.meta.step));
}

void TrainingRun::init_from_hf(const std::string& dir, std::vector<ShardedTensor>& model) {
  // LoRA over the directory: the adapters keep their initial values (B = 0), the directory is the frozen base
  // the run's adapters-only checkpoints name (train/lora_base.h).
  std::erase_if(model, [](const ShardedTensor& b) { return model::is_lora_parameter(b.name); });
  const ckpt::HfModelDir hf(dir);
  hf.check_model(cfg_.model, "checkpoint.init_from");
  hf.load(model, "checkpoint.init_from");
  quantize_base_from_init();
  // The tokenizer, chat template and generation settings beside the run's outputs, as `meshtrain import` puts
  // them beside its checkpoint: the run's outputs carry them even where the directory (or the cache) moves.
  std::vector<std::string> copied;
  if (w_.world.rank == 0) {
    std::filesystem::create_directories(cfg_.train.out_dir);
    copied = ckpt::copy_tokenizer_files(dir, cfg_.train.out_dir);
  }
  log::progress("initialised the model from the Hugging Face directory %s (%zu tensors%s); optimizer state fresh, "
                "step 0", dir.c_str(), model.size(),
                copied.empty() ? "" : cat("; ", join(copied, ", "), " copied to ", cfg_.train.out_dir).c_str());
}

RngStreams TrainingRun::rng_streams() const {
  RngStreams out{{"cpu", at::detail::getDefaultCPUGenerator()}};
  if (w_.cuda) out.emplace_back("cuda", at::globalContext().defaultGenerator(w_.device));
  if (!train_loader_) out.emplace_back("synthetic", synthetic_gen_);
  return out;
}

data::Batch TrainingRun::next_batch() {
  if (!train_loader_) {
    const auto opts = at::TensorOptions().dtype(at::kLong).device(w_.device);
    auto seq = at::randint(cfg_.model.vocab_size, {cfg_.train.micro_batch_size, cfg_.data.seq_len + 1},
                           synthetic_gen_, opts);
    return {seq.narrow(1, 0, cfg_.data.seq_len), seq.narrow(1, 1, cfg_.data.seq_len)};
  }
  auto batch = train_loader_->next();
  if (!w_.cuda) return batch;
  // Through pinned memory, so the copy is queued behind the running step instead of waiting for it.
  auto to_device = [&](at::Tensor& t) {
    if (t.defined()) t = t.pin_memory().to(w_.device, /*non_blocking=*/true);
  };
  for (at::Tensor* t : {&batch.inputs, &batch.targets, &batch.positions, &batch.cu_seqlens}) to_device(*t);
  return batch;
}

std::vector<parallel::ParallelModel::MicroBatch> TrainingRun::step_micro_batches() {
  std::vector<data::Batch> raw;
  int64_t local = 0;
  for (int64_t micro = 0; micro < cfg_.train.grad_accum; ++micro) {
    raw.push_back(next_batch());
    local += raw.back().loss_tokens;
  }
  // Masked targets: the loss is the mean over the unmasked targets of the whole step — every micro-batch and
  // data-parallel rank — so each micro-batch's mean weighs its share of them. The layouts average gradients
  // over the data-parallel ranks, hence the factor data_ranks.
  const bool weighted = train_loader_ && train_loader_->masks_targets();
  const double global = weighted ? static_cast<double>(step_loss_tokens(local)) : 0.0;
  std::vector<parallel::ParallelModel::MicroBatch> batches;
  for (auto& b : raw) {
    parallel::ParallelModel::MicroBatch mb{b.inputs, b.targets};
    if (b.positions.defined()) mb.docs = {b.positions, b.cu_seqlens, b.max_doc_len, {}};
    if (weighted)
      mb.loss_weight = global > 0 ? static_cast<double>(b.loss_tokens) * w_.data_ranks / global : 0.0;
    batches.push_back(std::move(mb));
  }
  return batches;
}

int64_t TrainingRun::step_loss_tokens(int64_t local) {
  if (!w_.comm) return local;
  // Summed over the world: the ranks sharing a data rank (tensor parallel) hold the same batches, each counted
  // world / data_ranks times.
  auto t = at::full({1}, local, at::TensorOptions(at::kLong).device(w_.comm->device()));
  w_.comm->all_reduce(t, comm::ReduceOp::Sum)->wait();
  return t.item<int64_t>() / (w_.world.world_size / w_.data_ranks);
}

TrainingRun::StepOutcome TrainingRun::train_step(int64_t step) {
  const auto batches = step_micro_batches();
  // The last snapshot's copies of the state land before the state is next written: by the optimizer's update,
  // or, for an offloaded optimizer (which may upload parameters while the backward runs), before the step starts.
  if (memory_ && !opt_->steps_on_device()) memory_->before_update();
  // The layout runs the micro-batch loop (accumulation, no-sync, precision; parallel/parallel_model.h), or
  // its captured graph replays it (train/cuda_graph_step.h).
  at::Tensor loss_sum = graph_step_ ? graph_step_->forward_backward(batches) : par_->forward_backward(batches);
  StepScope optimizer_scope("meshtrain::optimizer");  // clipping, the finiteness check and AdamW
  if (memory_) memory_->before_update();
  opt_->gradients_ready();  // an offloaded optimizer starts moving gradients to the host
  const double max_norm = cfg_.optimizer.grad_clip;
  if (opt_->steps_on_device()) {
    at::Tensor grad_norm = par_->clip_grad_norm(0.0);
    at::Tensor skipped = device_decided_step(step, loss_sum, grad_norm);
    par_->after_optimizer_step();
    return {loss_sum, grad_norm, skipped};
  }
  // An optimizer that scales the gradients itself gets the clip coefficient, computed as the layouts do.
  const bool scaled_inside = opt_->scales_gradients();
  at::Tensor grad_norm = par_->clip_grad_norm(scaled_inside ? 0.0 : max_norm);
  // A skipped update leaves parameters and optimizer state (step counters too) as they were; the gradients
  // are cleared as after any step.
  // The host decides here (this optimizer steps on the host): the flag is read before the update is queued.
  at::Tensor skipped = nonfinite_on_any_rank(loss_sum, grad_norm);
  const bool applied = skipped.item<float>() == 0;
  double clip = 1.0;
  if (applied && scaled_inside && max_norm > 0)
    clip = at::clamp_max(max_norm / (grad_norm.to(at::kFloat) + 1e-6), 1.0).item<double>();
  if (applied) opt_->step(schedule_->at(step), clip);
  par_->after_optimizer_step();
  return {loss_sum, grad_norm, skipped};
}

at::Tensor TrainingRun::device_decided_step(int64_t step, const at::Tensor& loss_sum, const at::Tensor& grad_norm) {
  // The host reading the norm would idle the device between the backward and the optimizer kernels, and
  // clipping in place would cost a pass over every gradient: the fused kernel divides each gradient by
  // max(1, norm / max_norm) (the layouts' min(1, max_norm / norm) inverted, within fp32 rounding) and
  // leaves everything as it was where the skip flag is 1.
  at::Tensor skipped = nonfinite_on_any_rank(loss_sum, grad_norm);
  const auto divisor = clip_divisor(grad_norm.to(skipped.device()), cfg_.optimizer.grad_clip);
  opt_->device_step(schedule_->at(step), divisor, skipped);
  return skipped;
}

at::Tensor TrainingRun::nonfinite_on_any_rank(const at::Tensor& loss_sum, const at::Tensor& grad_norm) {
  const at::Tensor both =
      at::stack({loss_sum.to(w_.device, at::kFloat).reshape({}), grad_norm.to(w_.device, at::kFloat).reshape({})});
  at::Tensor skipped = at::isfinite(both).all().logical_not().to(at::kFloat);
  // The gradient norm is global, but the loss is this rank's: every rank must skip the same steps. Max keeps
  // the flag exactly 0 or 1, which the fused kernel needs. On the device (NCCL) the reduction is queued, not
  // waited for; a host-only backend stages it through host memory.
  if (w_.comm) w_.comm->all_reduce(skipped, comm::ReduceOp::Max)->wait();
  return skipped;
}

void TrainingRun::check_nonfinite_streak(int64_t done) {
  log::warn("step %lld: non-finite loss or gradient norm: update skipped (%lld in a row, %lld in this run; the run "
            "stops at train.max_nonfinite_steps = %lld in a row)",
            static_cast<long long>(done), static_cast<long long>(nonfinite_streak_),
            static_cast<long long>(nonfinite_skipped_), static_cast<long long>(cfg_.train.max_nonfinite_steps));
  if (nonfinite_streak_ < cfg_.train.max_nonfinite_steps) return;
  ckpts_->wait();  // the last save (of finite state) is committed before the run stops
  const auto latest = ckpts_->latest();
  throw UserError(cat("step ", done, ": the loss or gradient norm was non-finite for ", nonfinite_streak_,
                      " steps in a row (train.max_nonfinite_steps = ", cfg_.train.max_nonfinite_steps,
                      "): stopping; the parameters are those of step ", done - nonfinite_streak_,
                      ", the newest checkpoint is ", latest ? *latest : std::string("none"),
                      " (lower optimizer.lr, set optimizer.grad_clip, or check the data)"));
}

std::string TrainingRun::mfu_text(double mfu) const {
  if (mfu < 0) return "";
  // The hardware's share beside it only where the two differ (LoRA, frozen weights, activation checkpointing).
  if (hardware_per_model_flops_ == 1) return log::sprintf(" | MFU %.1f%%", 100 * mfu);
  return log::sprintf(" | MFU %.1f%% (HFU %.1f%%)", 100 * mfu, 100 * mfu * hardware_per_model_flops_);
}

void TrainingRun::log_step(int64_t done, double step_s, double compute_s, double loss_sum, double grad_norm,
                           double lr, const std::vector<int64_t>& source_windows) {
  const double loss = mean_over_ranks(loss_sum / static_cast<double>(cfg_.train.grad_accum));
  if (done == start_step_ + 1) result_.first_loss = loss;
  result_.last_loss = loss;
  const double tok_s = static_cast<double>(tokens_per_step_) / step_s;
  // The job's model FLOPs (its tokens × the whole model's FLOPs per token) over every device's peak.
  const double mfu = peak_flops_ > 0 ? tok_s * flops_per_token_ / (peak_flops_ * w_.world.world_size) : -1;
  const double eta = ema_step_s_ * static_cast<double>(cfg_.train.steps - done);
  const StepTelemetry::Summary tel = telemetry_->gather(done, step_s, compute_s);  // collective
  // Layout figures (a pipeline's measured bubble per stage): this rank's on its line, every rank's in the record.
  std::string extra;
  for (const auto& [key, value] : par_->step_metrics()) extra += log::sprintf(" | %s %.3g", key.c_str(), value);
  for (const auto& [key, value] : opt_->step_metrics()) extra += log::sprintf(" | %s %.4g", key.c_str(), value);
  // A mixture: the tokens each source has given the whole job so far (its windows × seq_len).
  nlohmann::json source_tokens;
  for (size_t s = 0; s < source_windows.size(); ++s) {
    const int64_t tokens = source_windows[s] * cfg_.data.seq_len;
    source_tokens[train_loader_->source_pattern(s)] = tokens;
    extra += log::sprintf("%s%s %lld", s ? ", " : " | tokens ", train_loader_->source_pattern(s).c_str(),
                          static_cast<long long>(tokens));
  }
  log::progress("step %6lld/%lld | loss %.4f | lr %.2e | grad norm %.3f | %.0f tok/s%s | %.0f ms/step%s | ETA %s%s",
                static_cast<long long>(done), static_cast<long long>(cfg_.train.steps), loss, lr, grad_norm, tok_s,
                mfu_text(mfu).c_str(), 1000 * step_s, extra.c_str(),
                format_duration(eta).c_str(), tel.console.c_str());
  if (w_.world.rank == 0)
    for (const auto& w : tel.warnings) log::warn("%s", w.c_str());
  const int64_t step_peak = step_peak_bytes();
  nlohmann::json rec = {{"step", done},          {"loss", loss},
                        {"lr", lr},              {"grad_norm", grad_norm},
                        {"tokens_per_s", tok_s}, {"step_time_s", step_s},
                        {"tokens", done * tokens_per_step_}, {"elapsed_s", seconds_since(run_start_)},
                        {"peak_memory_bytes", std::max(setup_peak_bytes_, step_peak)},
                        {"step_peak_memory_bytes", step_peak},
                        {"setup_peak_memory_bytes", setup_peak_bytes_},
                        {"skipped_steps", nonfinite_skipped_}};
  if (mfu >= 0) {
    rec["mfu"] = mfu;
    rec["hfu"] = mfu * hardware_per_model_flops_;
  }
  if (!source_tokens.is_null()) rec["source_tokens"] = source_tokens;
  if (const std::string line = recovery_.at_step(done, rec); !line.empty()) log::progress("%s", line.c_str());
  if (done == start_step_ + 1 && planned_peak_bytes_ > 0) {
    rec["planned_peak_memory_bytes"] = planned_peak_bytes_;
    log::progress("memory at step %lld: peak %.2f GiB allocated (setup %.2f GiB), `meshtrain plan` predicted "
                  "%.2f GiB (%.3f of it)",
                  static_cast<long long>(done), static_cast<double>(step_peak) / (1 << 30),
                  static_cast<double>(setup_peak_bytes_) / (1 << 30),
                  static_cast<double>(planned_peak_bytes_) / (1 << 30),
                  static_cast<double>(step_peak) / static_cast<double>(planned_peak_bytes_));
  }
  for (const auto& [key, per_rank] : layout_metrics_over_ranks()) rec[key] = per_rank;
  // This rank's optimizer costs ("host update ms" → "optimizer_host_update_ms").
  for (auto [key, value] : opt_->step_metrics()) {
    std::replace(key.begin(), key.end(), ' ', '_');
    rec["optimizer_" + key] = value;
  }
  rec.update(tel.record);
  metrics_->write(rec);
}

std::vector<std::pair<std::string, std::vector<double>>> TrainingRun::layout_metrics_over_ranks() {
  const auto mine = par_->step_metrics();
  std::vector<std::pair<std::string, std::vector<double>>> out;
  if (mine.empty()) return out;
  const int64_t n = static_cast<int64_t>(mine.size()), W = w_.comm ? w_.comm->size() : 1;
  std::vector<double> values;
  for (const auto& kv : mine) values.push_back(kv.second);
  at::Tensor all = at::tensor(values, at::kDouble).to(at::kFloat);
  if (w_.comm) {
    auto in = all.to(w_.comm->device()), gathered = at::empty({W * n}, in.options());
    w_.comm->all_gather_into(gathered, in)->wait();
    all = gathered.cpu();
  }
  const float* v = all.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> per_rank;
    for (int64_t r = 0; r < W; ++r) per_rank.push_back(v[r * n + i]);
    out.emplace_back(mine[static_cast<size_t>(i)].first, std::move(per_rank));
  }
  return out;
}

double TrainingRun::over_ranks(double v, comm::ReduceOp op) {
  if (!w_.comm) return v;
  auto t = at::full({1}, v, at::TensorOptions(at::kFloat).device(w_.comm->device()));
  w_.comm->all_reduce(t, op)->wait();
  return static_cast<double>(t.item<float>());
}

int TrainingRun::agreed_stop_signal() {
  int sig = stop_signals_.pending();
  if (!w_.comm) return sig;
  auto t = at::full({1}, sig, at::TensorOptions(at::kInt).device(w_.comm->device()));
  w_.comm->all_reduce(t, comm::ReduceOp::Max)->wait();
  return t.item<int>();
}

double TrainingRun::evaluate(std::vector<double>& by_source) {
  by_source.clear();
  if (val_loaders_.empty()) return -1;
  opt_->settle();  // the validation loss is the parameters' after this step
  torch::NoGradGuard no_grad;
  net_->eval();
  // Overall: the mean over every counted target of every source, as one loader over all of them would give.
  double sum = 0;
  int64_t tokens = 0;
  for (auto& loader : val_loaders_) {
    loader->reset();
    const int64_t n = std::min(cfg_.train.eval_batches, loader->batches_per_epoch());
    const HeldOutLoss v = validation_loss(*par_, *loader, n, w_.device, w_.comm.get());
    by_source.push_back(v.loss);
    if (v.tokens > 0) sum += v.loss * static_cast<double>(v.tokens);
    tokens += v.tokens;
  }
  net_->train();
  return tokens > 0 ? sum / static_cast<double>(tokens) : -1;
}

std::vector<ShardedTensor> TrainingRun::state_blocks() {
  opt_->settle();  // a resumed run continues from exactly this step's parameters and state
  auto blocks = model_blocks(*par_, opt_.get());
  // LoRA from init_from: the frozen base is on disk already (and re-read from there on resume); only the
  // adapters and their optimizer state are written (ckpt/adapter_checkpoint.h).
  if (saves_adapters_only(cfg_))
    std::erase_if(blocks, [](const ShardedTensor& b) { return !model::is_lora_parameter(b.name); });
  auto optim = optimizer_blocks(blocks, *opt_);
  blocks.insert(blocks.end(), optim.begin(), optim.end());
  return blocks;
}

ckpt::SaveInfo TrainingRun::save_info(int64_t step) {
  const auto st = train_loader_ ? train_loader_->state() : data::LoaderState{};
  ckpt::SaveInfo info;
  info.config = nlohmann::json::parse(to_json(cfg_));
  info.mesh = {{"layout", par_->describe()}, {"world_size", w_.world.world_size}};
  info.state = {{"data", data_position_json(st)}, {"step", step}};
  if (cfg_.model.lora_rank > 0) {
    // The base the adapters belong to: the same for the whole run, so its id (read from the base's meta.json or
    // its weight files) is taken once, not on the step loop's blocked path of every save.
    if (lora_record_.is_null()) lora_record_ = lora_record(cfg_);
    info.state["lora"] = lora_record_;
  }
  // The batch the run was given, so that a resume at another width keeps its global batch (resume_settings.h).
  info.state["batch"] = batch_record(given_, cfg_.train.micro_batch_size * cfg_.train.grad_accum * w_.data_ranks);
  return info;
}

void TrainingRun::save(int64_t step) {
  // This rank's own blocks, written by this rank: nothing is gathered. Blocks that several ranks hold
  // (replicas) are written once, the work spread over their holders; the layout never changes during a run,
  // so the assignment (one small metadata exchange) is made at the first save and kept.
  auto blocks = state_blocks();
  if (ckpt_writes_.size() != blocks.size()) {
    ckpt::assign_replica_writers(blocks, w_.comm.get());
    ckpt_writes_.clear();
    for (const auto& b : blocks) ckpt_writes_.push_back(b.write);
  }
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i].write = ckpt_writes_[i];
  check_state_finite(step, blocks);
  auto rng = rng_blocks(w_.world.rank, rng_streams());  // per rank: always its own
  blocks.insert(blocks.end(), rng.begin(), rng.end());
  // Copied to host here; written and committed by a background thread while training goes on.
  const auto stats = ckpts_->save_async(step, blocks, save_info(step));
  log::progress("checkpoint %s: step loop blocked %.2fs (%.2fs for the previous save), writing %.1f MB from this "
                "rank in the background",
                ckpts_->step_dir(step).c_str(), stats.blocked_s, stats.wait_s, static_cast<double>(stats.bytes) / 1e6);
}

bool TrainingRun::snapshots_after(int64_t done) const {
  return memory_ && memory_->due(done) && done < cfg_.train.steps;
}

void TrainingRun::snapshot(int64_t done) {
  auto blocks = state_blocks();
  auto rng = rng_blocks(w_.world.rank, rng_streams());
  blocks.insert(blocks.end(), rng.begin(), rng.end());
  memory_->take(done, std::move(blocks), save_info(done), ema_step_s_);
}

void TrainingRun::check_state_finite(int64_t step, const std::vector<ShardedTensor>& blocks) {
  // One host read for all blocks; the name is looked for only when something is wrong.
  at::Tensor ok = at::ones({}, at::TensorOptions(at::kBool).device(w_.device));
  for (const auto& b : blocks)
    if (b.local.is_floating_point()) ok = ok.logical_and(at::isfinite(b.local).all().to(w_.device));
  std::string bad;
  if (!ok.item<bool>()) {
    for (const auto& b : blocks)
      if (b.local.is_floating_point() && !at::isfinite(b.local).all().item<bool>()) bad = b.name;
  }
  if (mean_over_ranks(bad.empty() ? 0.0 : 1.0) == 0.0) return;
  const auto latest = ckpts_->latest();
  throw UserError(cat("step ", step, ": no checkpoint written: ",
                      bad.empty() ? "another rank's model or optimizer state" : "'" + bad + "'",
                      " holds inf or nan values; the newest checkpoint stays ",
                      latest ? *latest : std::string("none"), " (lower optimizer.lr or set optimizer.grad_clip)"));
}

void TrainingRun::sample(int64_t done) {
  opt_->settle();  // the samples are the parameters' after this step
  // Full parameters and plain TP while generating (collective: every rank); under TP every rank generates.
  const auto scope = par_->generation_scope();
  if (w_.world.rank != 0 && !scope.every_rank_generates()) return;
  std::vector<std::string> prompts = cfg_.train.sample_prompts;
  if (prompts.empty()) prompts.push_back(cfg_.train.sample_prompt);
  nlohmann::json samples = nlohmann::json::array();
  std::vector<std::pair<std::string, std::string>> texts;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int64_t> ids = sample_text_->prompt_ids(prompts[i]);
    std::vector<int64_t> reply;
    // Its own generator per prompt (model::generate): the training streams are untouched, so a resumed run
    // samples and trains as an uninterrupted one.
    model::SampleOptions so{.max_new_tokens = cfg_.train.sample_tokens, .temperature = 0.8, .top_k = 40,
                            .seed = static_cast<uint64_t>(cfg_.train.seed) + i,
                            .stop_tokens = sample_text_->stop_tokens(),
                            .on_token = [&](int64_t id) { reply.push_back(id); }};
    model::generate(net_, ids, so);
    const std::string text = sample_text_->decode(reply);
    // A plain prompt is continued: shown with it. A chat prompt is answered: the reply alone.
    const std::string shown = sample_text_->chat() ? text : prompts[i] + text;
    log::progress("sample%s at step %lld (temperature 0.8, top-k 40):\n%s",
                  prompts.size() > 1 ? log::sprintf(" %zu/%zu", i + 1, prompts.size()).c_str() : "",
                  static_cast<long long>(done), shown.c_str());
    samples.push_back({{"prompt", prompts[i]}, {"text", text}});
    texts.emplace_back(prompts.size() > 1 ? log::sprintf("samples/%zu", i + 1) : "samples",
                       cat("**", prompts[i], "**", text));
  }
  metrics_->write({{"step", done}, {"samples", samples}}, texts);
}

TrainingRun::QueuedStep TrainingRun::queue_step(int64_t step) {
  profiler_->before_step(step);
  QueuedStep q{.step = step, .t0 = Clock::now(), .blocked0 = comm::blocked_in_wait_seconds(),
               .device_wait0 = comm::device_wait_seconds()};
  slow_rank_delay(w_.world.rank);
  StepScope step_scope("meshtrain::step");
  const StepOutcome outcome = train_step(step);
  if (train_loader_) q.source_windows = train_loader_->windows_drawn();  // before the next step draws on
  const auto f32 = at::TensorOptions(at::kFloat);
  const auto values = at::stack({outcome.loss_sum.to(w_.device, at::kFloat).reshape({}),
                                 outcome.grad_norm.to(w_.device, at::kFloat).reshape({}),
                                 outcome.skipped.to(w_.device, at::kFloat).reshape({})});
  // Pinned on CUDA, so the copy queues behind the step rather than waiting for it.
  q.host_values = at::empty({3}, f32.pinned_memory(w_.cuda));
  q.host_values.copy_(values, /*non_blocking=*/w_.cuda);
  if (w_.cuda) {
    q.end.emplace(c10::DeviceType::CUDA);
    q.end->record(c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(w_.device));
  } else {
    q.done_at = Clock::now();
  }
  return q;
}

bool TrainingRun::evaluates_after(int64_t done) const {
  // 0 disables validation, the end of the run's included.
  return cfg_.train.eval_every > 0 && (done % cfg_.train.eval_every == 0 || done == cfg_.train.steps);
}

bool TrainingRun::samples_after(int64_t done) const {
  return cfg_.train.sample_tokens > 0 && cfg_.train.sample_every > 0 && done % cfg_.train.sample_every == 0 &&
         done < cfg_.train.steps;
}

bool TrainingRun::saves_after(int64_t done) const {
  if (done == cfg_.train.steps) return cfg_.checkpoint.save_final;
  return cfg_.checkpoint.every > 0 && done % cfg_.checkpoint.every == 0;
}

bool TrainingRun::may_overlap(int64_t step) const {
  const int64_t done = step + 1;
  // On the CPU the step has run by now and only its bookkeeping moves, which keeps one code path for both.
  return opt_->steps_on_device() && !graph_step_ && done < cfg_.train.steps && !evaluates_after(done) &&
         !saves_after(done) && !snapshots_after(done) && !samples_after(done) &&
         !profiler_->ends_at(step) && nonfinite_streak_ + 1 < cfg_.train.max_nonfinite_steps;
}

int TrainingRun::finish_step(const QueuedStep& q, bool whole_device) {
  if (q.end) q.end->synchronize();
  if (w_.cuda && whole_device) torch::cuda::synchronize(w_.device.index());  // side streams: offload copies
  const auto done_at = w_.cuda ? Clock::now() : q.done_at;
  // From when the device could start it: its own start, or the previous step's end where it was queued behind it.
  const double step_s = std::chrono::duration<double>(done_at - std::max(q.t0, last_step_end_)).count();
  last_step_end_ = done_at;
  // This rank's own work: the step less its waits for the others (a straggler waits least): the host's
  // (CPU backend) and the GPU's inside NCCL collectives (comm/wait_clock.h).
  const double waited_s =
      (comm::blocked_in_wait_seconds() - q.blocked0) + (comm::device_wait_seconds() - q.device_wait0);
  const double compute_s = std::max(0.0, step_s - waited_s);
  const float* v = q.host_values.const_data_ptr<float>();
  const bool applied = v[2] == 0;
  if (auto profile = profiler_->after_step(q.step); profile && w_.world.rank == 0)
    log::progress("%s(trace and summary of every rank in %s)", profile_table(*profile, 25).c_str(),
                  profiler_->dir().c_str());
  result_.step_seconds.push_back(step_s);
  // The first step pays for warm-up (allocations, thread start); the ETA starts from the second.
  ema_step_s_ = q.step <= start_step_ + 1 ? step_s : 0.9 * ema_step_s_ + 0.1 * step_s;
  const int64_t done = q.step + 1;
  nonfinite_streak_ = applied ? 0 : nonfinite_streak_ + 1;
  nonfinite_skipped_ += applied ? 0 : 1;
  if ((cfg_.logging.every > 0 && done % cfg_.logging.every == 0) || done == cfg_.train.steps ||
      q.step == start_step_ || !applied)
    log_step(done, step_s, compute_s, v[0], v[1], schedule_->at(q.step), q.source_windows);
  if (!applied) check_nonfinite_streak(done);
  result_.steps_done = done;
  return agreed_stop_signal();
}

bool TrainingRun::end_of_step(int64_t step, int sig) {
  const int64_t done = step + 1;
  const bool last = done == cfg_.train.steps;
  if (evaluates_after(done)) {
    std::vector<double> by_source;
    if (const double val = evaluate(by_source); val >= 0) {
      result_.last_val_loss = val;
      nlohmann::json rec = {{"step", done}, {"val_loss", val}};
      std::string each;  // several sources: each one's loss too
      for (size_t s = 0; s < by_source.size() && by_source.size() > 1; ++s) {
        const std::string& name = val_loaders_[s]->source_pattern(0);
        rec["val_loss_by_source"][name] = by_source[s];
        each += log::sprintf("%s%s %.4f", s ? ", " : " (", name.c_str(), by_source[s]);
      }
      log::progress("step %6lld | validation loss %.4f%s", static_cast<long long>(done), val,
                    each.empty() ? "" : (each + ")").c_str());
      metrics_->write(rec);
    }
  }
  if (samples_after(done)) sample(done);
  const bool saved = saves_after(done);
  if (saved) save(done);
  if (snapshots_after(done)) snapshot(done);
  if (sig == 0 || last) return true;
  const bool saves = !quantizes_seeded_base();
  log::progress("stop signal %d (%s) at step %lld: %s", sig, strsignal(sig), static_cast<long long>(done),
                saves ? "saving a checkpoint and exiting"
                      : "exiting without a checkpoint (a QLoRA run over a seeded base saves none: its base is in no "
                        "checkpoint)");
  if (!saved && saves) save(done);
  result_.stop_signal = sig;
  return false;
}

TrainResult TrainingRun::run() {
  result_.steps_done = start_step_;
  run_start_ = Clock::now();
  std::optional<QueuedStep> in_flight;  // queued; its bookkeeping waits until the next step is queued
  for (int64_t step = start_step_; step < cfg_.train.steps; ++step) {
    QueuedStep q = queue_step(step);
    int sig = 0;
    if (in_flight) sig = finish_step(*std::exchange(in_flight, std::nullopt), /*whole_device=*/false);
    // A stop signal seen while this step ran: the run stops after it, with its checkpoint.
    if (sig == 0 && may_overlap(step)) {
      in_flight = std::move(q);
      continue;
    }
    sig = std::max(sig, finish_step(q, /*whole_device=*/true));
    if (!end_of_step(step, sig)) break;
  }

  opt_->settle();  // the checksum, the sample and the caller see the last update
  ckpts_->wait();  // the last checkpoint is committed (or its error raised) before the run reports success
  if (memory_) memory_->wait();
  result_.param_checksum = parameter_checksum(par_->sharded_parameters());
  result_.tokens_per_step = tokens_per_step_;
  result_.flops_per_token = flops_per_token_;
  result_.peak_flops = peak_flops_;
  result_.setup_peak_memory_bytes = setup_peak_bytes_;
  result_.step_peak_memory_bytes = step_peak_bytes();
  result_.peak_memory_bytes = std::max(setup_peak_bytes_, result_.step_peak_memory_bytes);
  result_.num_params = num_params_;
  // Every rank prints its own: data-parallel replicas must hold bit-identical parameters (shards: its own).
  log::info("parameter checksum %08x after step %lld", result_.param_checksum,
            static_cast<long long>(result_.steps_done));
  if (cfg_.train.sample_tokens > 0 && result_.stop_signal == 0) sample(result_.steps_done);  // every rank
  if (w_.comm) w_.comm->barrier();
  return result_;
}

}  // namespace

TrainResult run_training(const Config& cfg) {
  InPlaceRestart restart(cfg);
  restart.join_if_replacement();
  for (;;) {
    try {
      return TrainingRun(cfg).run();
    } catch (const std::exception& e) {
      // The run is gone (its destructor tore down communicators and background work); the process is kept.
      if (!restart.regroup_after(e)) throw;
    }
  }
}

}  // namespace meshtrain::train

#include "meshtrain/train/bench_train.h"

#include <algorithm>
#include <optional>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>

#include "meshtrain/comm/world_info.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"
#include "meshtrain/train/memory_history.h"
#include "meshtrain/train/trainer.h"

namespace meshtrain::train {
namespace {

// The history to `path` (FILE.rankR under meshrun), and one line saying where.
void write_memory_snapshot(const MemoryHistory& history, const std::string& path) {
  const comm::WorldInfo world = comm::world_info_from_env();
  const std::string file = world.world_size > 1 ? cat(path, ".rank", world.rank) : path;
  const int64_t bytes = history.write(file);
  log::info("memory snapshot: %s (%.1f MB; open it in pytorch.org/memory_viz)", file.c_str(), bytes / 1e6);
}

}  // namespace

Config bench_train_config(const BenchTrainOptions& o) {
  MT_USER_CHECK(o.steps > 0 && o.warmup >= 0, "meshtrain bench train: --steps must be > 0 and --warmup >= 0");
  MT_USER_CHECK(o.profile_dir.empty() || o.profile_steps > 0,
                "meshtrain bench train: --profile-steps must be > 0, got ", o.profile_steps);
  const int64_t profiled = o.profile_dir.empty() ? 0 : o.profile_steps;  // after the timed steps
  std::vector<std::string> sets = {
      "model.preset=" + o.preset,
      "data.train=" + std::string(kSyntheticData),
      "data.seq_len=" + std::to_string(o.seq_len),
      "train.micro_batch_size=" + std::to_string(o.micro_batch),
      "train.steps=" + std::to_string(o.warmup + o.steps + profiled),
      "train.eval_every=0",
      "train.activation_checkpointing=" + std::string(o.activation_checkpointing ? "true" : "false"),
      cat("train.attention_backend=", o.attention),
      "checkpoint.save_final=false",
      "schedule.warmup_steps=0",
      "logging.every=1",
      "train.out_dir=runs/bench-train",
  };
  if (o.layers > 0) sets.push_back("model.n_layer=" + std::to_string(o.layers));
  if (profiled > 0) {
    sets.push_back("train.profile_start=" + std::to_string(o.steps + o.warmup));
    sets.push_back("train.profile_steps=" + std::to_string(o.profile_steps));
    sets.push_back("train.profile_dir=" + o.profile_dir);
  }
  sets.insert(sets.end(), o.overrides.begin(), o.overrides.end());
  Config cfg = parse_config("{}", "meshtrain bench train", /*json=*/true, sets);
  const int world = comm::world_info_from_env().world_size;
  resolve(cfg, world);
  validate(cfg, world);
  return cfg;
}

BenchTrainResult run_bench_train(const BenchTrainOptions& o) {
  const Config cfg = bench_train_config(o);
  std::optional<MemoryHistory> history;
  if (!o.memory_snapshot.empty()) {
    const bool cuda = cfg.train.device == TrainDevice::cuda ||
                      (cfg.train.device == TrainDevice::automatic && torch::cuda::is_available());
    MT_USER_CHECK(cuda, "meshtrain bench train --memory-snapshot: records the CUDA caching allocator; this run "
                  "trains on the CPU (train.device ", cfg.train.device, ")");
    constexpr int64_t kEvents = 1'000'000;  // a few steps of a 32-layer model, set-up included
    history.emplace("meshtrain bench train --memory-snapshot", kEvents);
  }
  const TrainResult tr = run_training(cfg);
  if (history) write_memory_snapshot(*history, o.memory_snapshot);
  // The timed steps: after the warm-up, before any profiled ones.
  const auto first = std::min<size_t>(o.warmup, tr.step_seconds.size());
  const auto last = std::min<size_t>(o.warmup + o.steps, tr.step_seconds.size());
  std::vector<double> timed(tr.step_seconds.begin() + first, tr.step_seconds.begin() + last);
  MT_CHECK(!timed.empty(), "bench train: no timed steps");
  std::sort(timed.begin(), timed.end());
  BenchTrainResult r;
  r.name = log::sprintf("%s%s b%lld T%lld%s", o.preset.c_str(),
                        o.layers > 0 ? log::sprintf(" (%lld layers)", static_cast<long long>(o.layers)).c_str() : "",
                        static_cast<long long>(o.micro_batch), static_cast<long long>(o.seq_len),
                        o.attention == AttentionBackend::automatic ? "" : cat(" ", o.attention).c_str());
  r.params = tr.num_params;
  r.step_time_s = timed[timed.size() / 2];
  r.tokens_per_s = static_cast<double>(tr.tokens_per_step) / r.step_time_s;
  const int world = comm::world_info_from_env().world_size;
  r.mfu = tr.peak_flops > 0 ? r.tokens_per_s * tr.flops_per_token / (tr.peak_flops * world) : 0;
  r.peak_memory_bytes = tr.peak_memory_bytes;
  r.step_peak_memory_bytes = tr.step_peak_memory_bytes;
  r.setup_peak_memory_bytes = tr.setup_peak_memory_bytes;
  r.first_loss = tr.first_loss;
  r.last_loss = tr.last_loss;
  return r;
}

std::string bench_train_table(const BenchTrainResult& r) {
  return log::sprintf("%-36s %10s %10s %7s %9s\n%-36s %9.1fM %10.0f %6.1f%% %9.2f\n", "shape", "params", "tokens/s",
                      "MFU", "peak GiB", r.name.c_str(), r.params / 1e6, r.tokens_per_s, 100 * r.mfu,
                      static_cast<double>(r.peak_memory_bytes) / (1 << 30));
}

std::string bench_train_json(const BenchTrainResult& r, const BenchTrainOptions& o) {
  nlohmann::json j = {{"impl", "meshtrain"},           {"name", r.name},
                      {"preset", o.preset},            {"seq", o.seq_len},
                      {"batch", o.micro_batch},        {"layers", o.layers},
                      {"params", r.params},            {"step_time_s", r.step_time_s},
                      {"tokens_per_s", r.tokens_per_s}, {"mfu", r.mfu},
                      {"peak_memory_bytes", r.peak_memory_bytes},
                      {"step_peak_memory_bytes", r.step_peak_memory_bytes},
                      {"setup_peak_memory_bytes", r.setup_peak_memory_bytes},
                      {"first_loss", r.first_loss},    {"last_loss", r.last_loss},
                      {"activation_checkpointing", o.activation_checkpointing},
                      {"attention_backend", std::string(enum_name(o.attention))}};
  return j.dump(1);
}

}  // namespace meshtrain::train

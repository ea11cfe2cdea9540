#include "meshtrain/train/resume_settings.h"

#include <vector>

#include "meshtrain/ckpt/checkpoint_dir.h"
#include "meshtrain/ckpt/recorded_config.h"
#include "meshtrain/ckpt/resume_candidates.h"
#include "meshtrain/core/config_schema.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/join.h"
#include "meshtrain/core/log.h"
#include "meshtrain/train/lr_schedule.h"

namespace meshtrain::train {
namespace {

// A run's batch: what it was given and the data-parallel width it ran at.
struct SavedBatch {
  int64_t micro_batch_size = 0, grad_accum = 0, data_ranks = 0;
  int64_t global() const { return micro_batch_size * grad_accum * data_ranks; }
};

// "8 (micro_batch_size 4 × grad_accum 1 × 2 data-parallel ranks)"
std::string describe_batch(int64_t mbs, int64_t accum, int64_t ranks) {
  return cat(mbs * accum * ranks, " (micro_batch_size ", mbs, " × grad_accum ", accum, " × ", ranks,
             " data-parallel rank", ranks == 1 ? "" : "s", ")");
}

// state.batch where the checkpoint has it; else the recorded config's settings (resolved: dp is the run's);
// nothing known (a data_ranks of 0) for a checkpoint that records no config.
SavedBatch saved_batch(const std::string& dir, const ckpt::CheckpointMeta& meta) {
  const auto saved = recorded_config_if_any(dir, meta);
  if (!saved) return {};
  SavedBatch b{saved->train.micro_batch_size, saved->train.grad_accum, saved->parallel.dp * saved->parallel.fsdp};
  if (const auto it = meta.state.find("batch"); it != meta.state.end() && it->is_object()) {
    b.micro_batch_size = it->value("micro_batch_size", b.micro_batch_size);
    b.grad_accum = it->value("grad_accum", b.grad_accum);
    const int64_t global = it->value("global", b.global());
    const int64_t per_rank = b.micro_batch_size * b.grad_accum;
    if (per_rank > 0 && global % per_rank == 0) b.data_ranks = global / per_rank;
  }
  return b;
}

}  // namespace

std::optional<Config> recorded_config_if_any(const std::string& dir, const ckpt::CheckpointMeta& meta) {
  try {
    return ckpt::recorded_config(dir, meta);
  } catch (const UserError&) {
    return std::nullopt;  // a format-1 checkpoint: no config to compare with
  }
}

std::optional<std::string> first_resume_checkpoint(const Config& cfg) {
  if (cfg.checkpoint.resume == "none") return std::nullopt;
  if (cfg.checkpoint.resume != "auto") return ckpt::resolve_checkpoint_dir(cfg.checkpoint.resume);
  const auto found = ckpt::find_resume_candidates(cfg.checkpoint.dir);
  if (found.usable.empty()) return std::nullopt;
  return found.usable.front();
}

nlohmann::json batch_record(const Config& given, int64_t global_batch) {
  return {{"global", global_batch},
          {"micro_batch_size", given.train.micro_batch_size},
          {"grad_accum", given.train.grad_accum}};
}

BatchDecision keep_global_batch_for(const Config& cfg, int64_t data_ranks, const std::string& dir,
                                     const ckpt::CheckpointMeta& meta) {
  const SavedBatch was = saved_batch(dir, meta);
  const int64_t mbs = cfg.train.micro_batch_size, accum = cfg.train.grad_accum;
  BatchDecision d{accum, ""};
  if (was.data_ranks <= 0 || mbs * accum * data_ranks == was.global()) return d;
  if (mbs != was.micro_batch_size || accum != was.grad_accum) {
    // Batch settings changed on purpose: taken as given, and said.
    d.note = cat("global batch ", describe_batch(mbs, accum, data_ranks), " where ", dir, "'s run had ",
                 describe_batch(was.micro_batch_size, was.grad_accum, was.data_ranks),
                 " (train.micro_batch_size / train.grad_accum changed)");
    return d;
  }
  MT_USER_CHECK(was.global() % (mbs * data_ranks) == 0, dir, ": its run's global batch is ",
                describe_batch(was.micro_batch_size, was.grad_accum, was.data_ranks), "; at ", data_ranks,
                " data-parallel ranks no train.grad_accum keeps it (", was.global(), " is not a multiple of ", mbs,
                " × ", data_ranks, "): set train.micro_batch_size × train.grad_accum × ", data_ranks, " = ",
                was.global(), " or another global batch on purpose, or resume at ", was.data_ranks,
                " data-parallel ranks");
  d.grad_accum = was.global() / (mbs * data_ranks);
  d.note = cat("resumed at ", data_ranks, " data-parallel rank", data_ranks == 1 ? "" : "s", " (", dir, "'s run had ",
               was.data_ranks, "): train.grad_accum ", accum, " → ", d.grad_accum, " keeps its global batch of ",
               describe_batch(mbs, d.grad_accum, data_ranks));
  return d;
}

std::string schedule_change_note(const Config& saved, const Config& cfg, int64_t step) {
  std::vector<std::string> changed;
  for (const FieldInfo& f : config_fields()) {
    const bool shapes_lr = f.section == "schedule" || f.path() == "train.steps" || f.path() == "optimizer.lr";
    if (!shapes_lr) continue;
    const std::string was = format_field_value(f.get(saved)), now = format_field_value(f.get(cfg));
    if (was != now) changed.push_back(cat(f.path(), " ", was, " → ", now));
  }
  if (changed.empty()) return "";
  const double before = LrSchedule(saved.schedule, saved.optimizer.lr, saved.train.steps).at(step);
  const double after = LrSchedule(cfg.schedule, cfg.optimizer.lr, cfg.train.steps).at(step);
  return log::sprintf("the learning-rate schedule is re-derived from this run's settings (%s): lr %.3e at step "
                      "%lld, where the saved run's schedule had %.3e",
                      join(changed, ", ").c_str(), after, static_cast<long long>(step), before);
}

}  // namespace meshtrain::train

// What a resume keeps and what it says when this run's settings differ from those of the run that saved the
// checkpoint:
//   - the global batch (sequences per optimizer step: micro_batch_size × grad_accum × data-parallel ranks).
//     Resumed at another data-parallel width with the batch settings the checkpoint's run was given, the
//     accumulation is derived so the global batch stays; where no whole accumulation keeps it, the resume is
//     refused with the arithmetic. Settings changed on purpose (micro_batch_size or grad_accum other than
//     the checkpoint's run was given) are taken as they are, and the new global batch said in one line.
//   - the learning-rate schedule, derived from train.steps, optimizer.lr and the schedule section: when they
//     differ (train.steps raised to train on, most often), one line says the rate is re-derived, with both
//     rates at the resumed step.
// The batch a run was given is recorded in its checkpoints (state.batch, batch_record()), so a run resumed
// twice at the new width keeps deriving from the same given settings; older checkpoints: their config.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "meshtrain/ckpt/checkpoint_meta.h"
#include "meshtrain/core/config.h"

namespace meshtrain::train {

// The step directory a resume would start from: checkpoint.resume's path, or (auto) the newest usable one in
// checkpoint.dir; nullopt when the run starts fresh (none, or auto finding none).
std::optional<std::string> first_resume_checkpoint(const Config& cfg);

// The config `dir`'s meta.json records (ckpt/recorded_config.h), or nullopt where it records none (format 1).
std::optional<Config> recorded_config_if_any(const std::string& dir, const ckpt::CheckpointMeta& meta);

// state.batch for a checkpoint: the run's global batch, and the micro_batch_size and grad_accum it was given
// (`given`: before any derivation).
nlohmann::json batch_record(const Config& given, int64_t global_batch);

struct BatchDecision {
  int64_t grad_accum = 1;  // what this run uses
  std::string note;        // one line to log, or "" when the global batch is the checkpoint's unchanged
};

// The accumulation that keeps the checkpoint's global batch at `data_ranks` (see above). UserError naming the
// checkpoint, both global batches and their factors when none does.
BatchDecision keep_global_batch_for(const Config& cfg, int64_t data_ranks, const std::string& dir,
                                     const ckpt::CheckpointMeta& meta);

// "" when train.steps, optimizer.lr and the schedule section equal the saved run's (`saved`: its recorded
// config), else the line that says the schedule is re-derived: the settings that changed and the learning rate
// at `step` (the next one to run) under both.
std::string schedule_change_note(const Config& saved, const Config& cfg, int64_t step);

}  // namespace meshtrain::train

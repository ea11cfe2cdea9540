// What a run that starts at step 0 finds in its directories: a previous run's checkpoints (step directories and
// `latest` in checkpoint.dir) and metrics (a non-empty logging.metrics file). Starting over them would overwrite
// the checkpoints and truncate the metrics (TensorBoard then shows the steps twice), so a fresh start
// (checkpoint.resume: none) into such a directory is refused unless train.overwrite (`--overwrite`) says to
// remove them first. Checked before any worker starts (meshrun, `meshtrain train`); the removal is the
// trainer's (rank 0, before it writes anything).
#pragma once

#include <string>
#include <vector>

#include "meshtrain/core/config.h"

namespace meshtrain {

// The previous run's files under a resolved config's checkpoint.dir and logging.metrics: every step_* entry
// and `latest` of checkpoint.dir (sorted), then the metrics file when it is not empty. None when the
// directories do not exist.
std::vector<std::string> previous_run_files(const Config& cfg);

// UserError "train.out_dir D: holds a previous run (…) and checkpoint.resume is none: …" naming both ways on:
// resume it, or start afresh in another train.out_dir or with --overwrite. Nothing to check when
// checkpoint.resume is not none (a resume continues what is there) or train.overwrite is set.
void check_fresh_start(const Config& cfg);

}  // namespace meshtrain

// CheckpointDir: the names inside a checkpoint directory, and the one rule by which every reader — resume,
// checkpoint.init_from, generate, eval, export, an adapters-only checkpoint's base — gets from a directory to
// the step it means (docs/checkpoints.md "Layout").
//
//   run/checkpoints/latest           "step_00000100\n": the newest complete step, a directory beside it
//   run/checkpoints/step_00000100/   meta.json + rank_R.safetensors
//
// `latest` names a step directory beside it — `step_` and digits — and nothing else: a path (absolute, or
// `../../other_run/checkpoints/step_5`) is refused, so that no reader follows an edited or damaged `latest`
// into another run's checkpoints. A path the user gives is theirs to give: only `latest` is held to this.
#pragma once

#include <cstdint>
#include <string>

namespace meshtrain::ckpt {

// "step_00000100" for step 100: the name the writer gives a step directory.
std::string step_dir_name(int64_t step);
// step_00000100 → 100; -1 for any other name (step_00000100.tmp, latest, ../step_5, /etc, ...).
int64_t step_of_dir_name(const std::string& name);

// The name `<ckpt_dir>/latest` holds (its first word), "" when it is missing or empty. Not checked: see
// latest_problem.
std::string read_latest(const std::string& ckpt_dir);
// "" when `name` (what `latest` holds) may be followed, else why not (one phrase, for a line naming `latest`).
std::string latest_name_problem(const std::string& name);

// A checkpoint directory given itself, or a parent holding `latest` → the step directory `latest` names.
// UserError (one line naming `latest`): empty, or naming anything but a step directory beside it; never a
// *.tmp directory.
std::string resolve_checkpoint_dir(const std::string& path);

}  // namespace meshtrain::ckpt

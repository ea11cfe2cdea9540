// The model a run starts from, when its config does not say: a config with `checkpoint.init_from` and no model
// shape of its own (no preset, every shape key at its default: core/model_shape.h) takes the shape of what
// init_from names — a Hugging Face directory's config.json, or the config a meshtrain checkpoint recorded — so
// a fine-tuning config holds only what the fine-tune chooses (data, LoRA, steps), not the architecture.
//
//   Config cfg = load_config(file, sets);
//   ckpt::adopt_source_model(cfg);   // before resolve() and validate(), which then see the source's shape
//
// A config that gives a shape keeps it; the trainer then checks it against the source (HfModelDir::check_model,
// the checkpoint's tensor shapes) and names the keys that differ.
#pragma once

#include <string>

#include "meshtrain/core/config.h"

namespace meshtrain::ckpt {

// Fills cfg.model's shape from checkpoint.init_from where the config gives none; returns a line saying where
// it came from ("" when nothing changed: no init_from, or a shape given). UserError, one line naming
// checkpoint.init_from: a source that cannot be read (locate_model's errors, a config.json meshtrain does not
// model, a checkpoint without a recorded config).
std::string adopt_source_model(Config& cfg);

}  // namespace meshtrain::ckpt

// A model's shape: the fields of the model section that say which network it is — family, vocabulary, layers,
// heads, widths, positions, tying, norm epsilon, RoPE base, the bos/eos ids — as opposed to how it trains
// (dropout, LoRA). A preset sets exactly these (model_presets.cpp); so do a Hugging Face config.json and a
// checkpoint's recorded config, which is how a run started from `checkpoint.init_from` with no model shape of
// its own takes its source's (ckpt/source_model.h).
#pragma once

#include "meshtrain/core/config.h"

namespace meshtrain {

// Copies the shape fields of `from` into `to` (the preset name too); the training fields of `to` stay.
void copy_model_shape(const ModelConfig& from, ModelConfig& to);

// True when `m` names a shape: a preset, or any shape field away from its default. A config that gives none
// leaves the shape to its source.
bool gives_model_shape(const ModelConfig& m);

}  // namespace meshtrain

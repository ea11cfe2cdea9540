// The Config a checkpoint recorded: the one rule for where meta.json keeps it, so that every reader of a
// checkpoint's model (generate, eval, export, the inference loader) finds it in both places it has lived.
//
//   meta.json  {"config": {...}, "state": {...}}          format 2: the run's resolved config at the top
//              {"config": {}, "state": {"config": {...}}} earlier trainers (and format 1, which has no
//                                                          "config" key at all) kept it inside the state
#pragma once

#include <string>
#include <vector>

#include "meshtrain/ckpt/checkpoint_meta.h"
#include "meshtrain/core/config.h"

namespace meshtrain::ckpt {

// The config `meta` (read from `dir`, already resolved) recorded, with `overrides` ("section.key=value")
// applied on top; neither resolved nor validated. UserError naming <dir>/meta.json when it records none.
Config recorded_config(const std::string& dir, const CheckpointMeta& meta,
                       const std::vector<std::string>& overrides = {});

}  // namespace meshtrain::ckpt

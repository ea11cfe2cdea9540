// PlanReport: `meshtrain plan`'s output — the itemised memory and step time of one layout as a readable table,
// the search's layouts one per line, and both as JSON.
#pragma once

#include <string>
#include <vector>

#include "meshtrain/plan/layout_search.h"

namespace meshtrain::plan {

// Memory items, activations per block with and without checkpointing, step time and communication.
std::string layout_table(const PlanRow& row, const PlanOptions& opts);
// One line per layout in search_layouts()'s order: those that fit, then a separator line and those that do
// not (marked NO); the header names the searched choices and the config's LoRA and offload.
std::string search_table(const std::vector<PlanRow>& rows, const PlanOptions& opts);
// {"gpu":…, "gpus":…, "layouts":[{layout, fits, note, memory{…}, time{…}}, …]} (pretty-printed).
std::string plan_json(const std::vector<PlanRow>& rows, const PlanOptions& opts);

}  // namespace meshtrain::plan

// torchrun flags whose meaning meshrun honours only in part. Each is accepted (a launch script written for
// torchrun runs unchanged); what meshrun does with it is either mapped onto its own options here or named
// in one line at start-up when it has no meaning for meshrun, with the reason (docs/launcher.md "Flags").
#pragma once

#include <string>
#include <vector>

#include "meshtrain/launch/launch_options.h"

namespace meshtrain::launch {

// --rdzv-conf K=V,...: `timeout` and `join_timeout` (seconds) set --rdzv-timeout unless that flag was given
// itself; every other key is kept for torchrun_compat_notes. Throws UserError on malformed text.
void apply_rdzv_conf(LaunchOptions& o);

// One line per accepted-but-ignored torchrun setting (--start-method fork, --logs-specs, unknown
// --rdzv-conf keys, --run-path over --no-python/--module); empty when nothing was ignored.
std::vector<std::string> torchrun_compat_notes(const LaunchOptions& o);

}  // namespace meshtrain::launch

// meshrun --preflight: `meshtrain doctor` on this node before any worker starts (every node's meshrun runs
// its own), so a bad node stops the launch with the failing check instead of failing hours into the run.
#pragma once

#include <string>
#include <vector>

#include "meshtrain/launch/launch_plan.h"

namespace meshtrain::launch {

// The doctor's command line for this plan: the meshtrain next to meshrun; the config (and its --set
// overrides) when the program is one; --gpus nproc_per_node on a node with GPUs (the workers take one each), no GPU checks on a CPU run.
std::vector<std::string> preflight_command(const LaunchPlan& plan, const std::string& self_dir);

// Runs it and returns its exit code (0: every check passed).
int run_preflight(const LaunchPlan& plan, const std::string& self_dir);

}  // namespace meshtrain::launch

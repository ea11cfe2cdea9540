// Slurm awareness: inside an allocation, SLURM_* variables give the node count, this node's rank, the
// master (first host of the node list) and the GPUs per node, so `srun --ntasks-per-node=1 meshrun cfg.yaml`
// needs no flags. Flags (and PET_*) always win over Slurm.
#pragma once

#include <string>
#include <vector>

#include "meshtrain/launch/launch_options.h"

namespace meshtrain::launch {

// Slurm hostlist expression → host names, in order: "gpu[01-04,07],login1" → gpu01 gpu02 gpu03 gpu04 gpu07
// login1. Several bracket groups multiply ("r[1-2]n[1-2]" → r1n1 r1n2 r2n1 r2n2); zero padding follows the
// width of the range's first number. Throws UserError on a malformed expression.
std::vector<std::string> expand_hostlist(const std::string& expr);

// Fills the options the user did not set (o.explicitly_set) from SLURM_* in `env`. Returns a one-line
// description of what was taken from Slurm, or "" when not inside a Slurm job step.
std::string apply_slurm_env(LaunchOptions& o, const EnvLookup& env);

}  // namespace meshtrain::launch

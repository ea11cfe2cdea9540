// WorldInfo: where this process sits in the job, read from the torchrun environment contract (RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE) so that workers run the same under meshrun, torchrun or by hand.
// No variables at all means a single process: rank 0 of 1.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace meshtrain::comm {

// Looks up one environment variable; std::nullopt when unset. Tests pass a map instead of the real env.
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;

// The process environment (getenv); empty strings count as unset, as torch's env:// does.
EnvLookup process_env();

struct WorldInfo {
  int rank = 0;              // global rank, 0 ≤ rank < world_size (RANK)
  int world_size = 1;        // number of worker processes in the job (WORLD_SIZE)
  int local_rank = 0;        // rank on this node (LOCAL_RANK; defaults to RANK when unset)
  int local_world_size = 1;  // workers on this node (LOCAL_WORLD_SIZE; defaults to WORLD_SIZE when unset)
};

// Throws UserError naming the variable, its value and what is valid: RANK without WORLD_SIZE (or the other
// way round), non-integers, RANK ≥ WORLD_SIZE, LOCAL_RANK ≥ LOCAL_WORLD_SIZE, ...
WorldInfo world_info_from_env(const EnvLookup& env = process_env());

// Parses an integer environment variable strictly ("12" ok; "", "1x", "1.5" rejected with a UserError).
std::optional<long long> env_int(const EnvLookup& env, const char* name);

}  // namespace meshtrain::comm

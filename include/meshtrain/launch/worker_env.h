// The environment each worker gets: torchrun's contract, exactly (names and value spellings), so a PyTorch
// script's init_process_group("env://") and meshtrain's own store client both find the launcher's store.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace meshtrain::launch {

// Set for the workers of a restarted attempt: when the launcher saw the failure that ended the previous one, in
// milliseconds since the Unix epoch, so a resumed worker can report how long the recovery took
// (train/recovery_report.h).
inline constexpr const char* kFailureTimeEnv = "MESHRUN_FAILURE_UNIX_MS";
// kFailureTimeEnv's value for the moment `when`.
inline std::string failure_time_value(std::chrono::system_clock::time_point when) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(when.time_since_epoch()).count());
}
// "1" when meshrun replaces a killed worker alone (--in-place-restart): the other workers keep their processes
// and regroup with the replacement (train/in_place_restart.h) instead of being restarted with it.
inline constexpr const char* kInPlaceRestartEnv = "MESHRUN_IN_PLACE_RESTART";
// Set on a worker started in place of a killed one: the number of workers this node replaced so far (0: this
// node's launcher was lost too, and every worker of the new one replaces one). It meets
// the survivors at their regroup before its first run.
inline constexpr const char* kReplacementEnv = "MESHRUN_REPLACEMENT";
// The node's directory in memory for the workers' in-memory checkpoints (train/memory_checkpoints.h reads it):
// it outlives a killed worker, and meshrun removes it when it exits.
inline constexpr const char* kHostCheckpointDirEnv = "MESHTRAIN_HOST_CHECKPOINT_DIR";
// Where meshrun makes that directory: this node's memory file system. Default /dev/shm; tests that play several
// nodes on one machine give each its own.
inline constexpr const char* kHostMemoryParentEnv = "MESHRUN_HOST_MEMORY_DIR";

struct WorkerIdentity {
  int local_rank = 0;
  int local_world_size = 1;
  int group_rank = 0;        // node rank
  int group_world_size = 1;  // number of nodes
  std::string role = "default";
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int restart_count = 0;
  int max_restarts = 0;
  std::string run_id = "none";
  std::string error_file;         // TORCHELASTIC_ERROR_FILE
  std::string signals_to_handle;  // TORCHELASTIC_SIGNALS_TO_HANDLE
  // --virtual-local-rank: LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES narrowed to this worker's GPU (torchrun's
  // _set_local_rank_env; with more workers than GPUs they share round-robin instead of failing).
  bool virtual_local_rank = false;
  // Set last, over the inherited environment and the above: a config's comm.nccl_env (LaunchPlan::worker_env).
  std::map<std::string, std::string> extra_env;

  int rank() const { return group_rank * local_world_size + local_rank; }
  int world_size() const { return group_world_size * local_world_size; }
};

// The variables meshrun sets (added to, and overriding, the launcher's own environment):
// RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_RANK GROUP_WORLD_SIZE ROLE_RANK ROLE_WORLD_SIZE
// ROLE_NAME MASTER_ADDR MASTER_PORT TORCHELASTIC_RESTART_COUNT TORCHELASTIC_MAX_RESTARTS
// TORCHELASTIC_RUN_ID TORCHELASTIC_USE_AGENT_STORE=True TORCHELASTIC_ERROR_FILE
// TORCHELASTIC_SIGNALS_TO_HANDLE TORCH_NCCL_ASYNC_ERROR_HANDLING (inherited value, else 1)
// OMP_NUM_THREADS (inherited value, else 1 when local_world_size > 1); with virtual_local_rank,
// LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES = entry (local_rank mod n) of the inherited list, else local_rank.
// `inherited` is the launcher's environment as NAME → value.
std::map<std::string, std::string> worker_env_overrides(const WorkerIdentity& w,
                                                        const std::map<std::string, std::string>& inherited);

// The launcher's environment with the overrides applied, less MESHRUN_RDZV_TOKEN (a worker never holds the
// store's token: it reaches the store through its node's relay), as "NAME=value" strings for execve.
std::vector<std::string> worker_environment(const WorkerIdentity& w);

// The current process environment as a map.
std::map<std::string, std::string> current_environment();

}  // namespace meshtrain::launch

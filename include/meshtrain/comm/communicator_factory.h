// make_communicator: the one place where `parallel.backend` (auto | nccl | cpu) becomes a Communicator, used by
// the trainer and `meshtrain bench comm`. auto means NCCL when this build has it and the caller's tensors live
// on a CUDA device, else the CPU backend. Asking for nccl where it cannot work (a build without CUDA/NCCL, CPU
// tensors, no GPU) is one clear UserError. When the caller's tensors live on a GPU and the backend takes host
// tensors, the communicator returned stages them through host memory (src/comm/staging/), so callers pass
// their tensors as they are.
#pragma once

#include <c10/core/Device.h>

#include <chrono>
#include <string>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/comm/store.h"
#include "meshtrain/comm/world_info.h"
#include "meshtrain/core/config_enums.h"

namespace meshtrain::comm {

struct CommSetup {
  CommBackend backend = CommBackend::automatic;  // config: parallel.backend
  c10::Device device{c10::kCPU};         // where the caller's tensors live; nccl uses this CUDA device
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // per op, and for setup
  std::string group = "world";           // group name (unique per job attempt)
  std::string flight_dir;                // where the flight recorder is dumped unless MESHTRAIN_FLIGHT_DIR is set
  std::string origin = "parallel.backend";  // what set `backend`, for error messages ("--backend")
};

// True when this binary was built with CUDA and NCCL (MESHTRAIN_WITH_CUDA).
bool nccl_built();

// nccl or cpu for `backend` and `device`; UserError for an impossible nccl request.
CommBackend resolve_backend(CommBackend backend, const c10::Device& device,
                            const std::string& origin = "parallel.backend");

// The GPU a rank with this backend setting trains on: cuda:local_rank. A backend that takes host tensors lets
// several ranks share a GPU, so with fewer GPUs than local ranks they are dealt round-robin
// (cuda:(local_rank mod gpus)); NCCL needs one GPU per rank, and a local rank without one is a UserError.
// `gpus`: the CUDA devices visible to this process (> 0).
c10::Device rank_cuda_device(CommBackend backend, int local_rank, int gpus,
                             const std::string& origin = "parallel.backend");

// Collective over the world: every rank calls it with the same setup. `store` may be null: then, for more than
// one process, the store is reached through the environment (connect_store_from_env).
CommPtr make_communicator(const WorldInfo& world, const CommSetup& setup, StorePtr store = {});

}  // namespace meshtrain::comm

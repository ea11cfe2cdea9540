// WorkerSetup: what every worker command (`meshtrain train`, `meshtrain eval`) sets up before its model — the
// training device and precision, the world communicator over parallel.backend, the mesh of named groups and
// this rank's place among the data-parallel ranks. One place, so that the trainer and the evaluator cannot
// drift apart in how a rank finds its GPU or its data.
#pragma once

#include <c10/core/Device.h>

#include <memory>
#include <string>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/comm/mesh.h"
#include "meshtrain/comm/world_info.h"
#include "meshtrain/core/config.h"
#include "meshtrain/parallel/parallel_groups.h"

namespace meshtrain::train {

struct WorkerSetup {
  comm::WorldInfo world;
  c10::Device device{c10::kCPU};      // cuda:(local rank), or shared round-robin over a host-staging backend
  bool cuda = false, bf16 = false;    // training on a GPU; bf16 compute (train.dtype)
  comm::CommPtr comm;                 // the world communicator; null for a single process
  std::unique_ptr<comm::Mesh> mesh;   // named groups over `comm`; null for a single process
  int data_rank = 0, data_ranks = 1;  // index and count along dp × fsdp (the tp ranks of a group share batches)

  // The mesh's dp, fsdp and tp groups; all null for a single process.
  parallel::ParallelGroups groups() const;
};

// Collective for more than one process (every rank calls it). `group` names the communicator in errors and the
// flight recorder, which a failed collective dumps to train.out_dir. UserError for an impossible device.
WorkerSetup make_worker_setup(const Config& cfg, const comm::WorldInfo& world, const std::string& group);

}  // namespace meshtrain::train

// ParallelGroups: the communicators a layout needs, passed explicitly (never globals). They come from the mesh
// (comm/mesh.h: named dims, rank order from parallel.order), the one description of the rank layout.
#pragma once

#include "meshtrain/comm/communicator.h"
#include "meshtrain/comm/mesh.h"

namespace meshtrain::parallel {

struct ParallelGroups {
  comm::CommPtr world;  // null in a single process
  comm::CommPtr dp;     // replicas (DDP all-reduce, ZeRO shards, HSDP replicate dim)
  comm::CommPtr fsdp;   // FSDP shard dim
  comm::CommPtr tp;     // tensor-parallel group
  comm::CommPtr pp;     // pipeline stages (parallel/pipeline/pipeline_model.h); null when pp = 1
};

// The mesh's dp, fsdp, tp (and pp where pp > 1) groups (collective on first use: every rank calls it, in the same order).
ParallelGroups make_parallel_groups(comm::Mesh& mesh);

}  // namespace meshtrain::parallel

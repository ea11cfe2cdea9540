// ParallelGroups: the communicators a layout needs, passed explicitly (never globals). Built from the mesh
// (comm/mesh.h: named dims, rank order from parallel.order — what the trainer uses), or here from the world
// communicator by splitting along parallel.order (innermost dim last, like "pp-dp-fsdp-tp"); both give the
// same groups.
#pragma once

#include "meshtrain/comm/communicator.h"
#include "meshtrain/comm/mesh.h"
#include "meshtrain/core/config.h"

namespace meshtrain::parallel {

struct ParallelGroups {
  comm::CommPtr world;  // null in a single process
  comm::CommPtr dp;     // replicas (DDP all-reduce, ZeRO shards, HSDP replicate dim)
  comm::CommPtr fsdp;   // FSDP shard dim
  comm::CommPtr tp;     // tensor-parallel group
};

// Rank r's coordinate along dim d of `order` with sizes `sizes` (same order). Exposed for tests.
struct MeshCoords {
  std::vector<std::string> dims;  // outermost first
  std::vector<int64_t> sizes;
  int64_t coord(int64_t rank, const std::string& dim) const;
  // The ranks sharing every coordinate with `rank` but `dim` form its group; its colour is the rank with
  // that coordinate set to 0.
  int64_t group_color(int64_t rank, const std::string& dim) const;
};
MeshCoords mesh_coords(const ParallelConfig& p, int64_t world_size);

// Collective over `world` (every rank calls it). p.dp must be resolved (> 0). Null world: all null.
ParallelGroups make_parallel_groups(const comm::CommPtr& world, const ParallelConfig& p);
// The mesh's dp, fsdp and tp groups (collective on first use: every rank calls it, in the same order).
ParallelGroups make_parallel_groups(comm::Mesh& mesh);

}  // namespace meshtrain::parallel

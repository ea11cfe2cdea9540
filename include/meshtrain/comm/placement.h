// Placement: which GPU each local rank drives, chosen so that every tensor-parallel group sits inside an
// NVLink clique (its all-reduces per layer are the latency-critical traffic) while data-parallel groups go
// across cliques (docs/architecture.md "Topology"). When no such assignment exists the run fails with one UserError
// naming parallel.tp and the largest clique, unless parallel.allow_slow_tp lets it proceed with the
// nearest-PCIe assignment.
//
// Search: groups are filled in order with sets of free GPUs, minimising the sum over the pairs inside each
// group of a link cost (NVLink 0; PCIe PIX 1001 … SYS 1005); ties keep the lowest GPU indices, so an NVSwitch
// board gets the identity. Exhaustive with pruning for a node's ≤ 16 GPUs (bounded, then the best found).
#pragma once

#include <string>
#include <vector>

#include "meshtrain/core/mesh_shape.h"
#include "meshtrain/hw/topology.h"

namespace meshtrain::comm {

struct Placement {
  std::vector<int> gpu_of_local_rank;       // local rank → GPU index of the Topology (NVML order)
  std::vector<std::vector<int>> groups;     // the placed groups, as local ranks (ascending)
  bool groups_on_nvlink = true;             // every group lies inside one NVLink clique
  std::string note;                         // why not, or "no GPUs" and the like; empty when all is well

  // One line per group: "tp group 0: local ranks 0,1 → GPUs 0,1 (NVLink)", then the note.
  std::string describe(const hw::Topology& topo) const;
};

// The groups along `dims` that hold ranks of node `node`, as local ranks, where a node's ranks are
// [node × local_world_size, (node + 1) × local_world_size) (meshrun's and torchrun's layout). A group that
// reaches beyond the node contributes only its local part; `*spans_nodes` (optional) says so.
std::vector<std::vector<int>> local_groups(const MeshShape& shape, DimSet dims, int local_world_size, int node,
                                           bool* spans_nodes = nullptr);

// Places `groups` (local ranks, disjoint, covering 0 … local_world_size-1) on topo's GPUs. `what` names the
// groups in messages ("parallel.tp = 4"). Throws UserError when local_world_size exceeds the GPU count, or
// when some group cannot sit inside an NVLink clique and !allow_slow. A topology without GPUs gives the
// identity with a note (CPU runs).
Placement place_groups(const hw::Topology& topo, const std::vector<std::vector<int>>& groups, int local_world_size,
                       bool allow_slow, const std::string& what);

// The placement a worker uses: tp groups of `shape` on node `node`. A tp group spanning nodes is a UserError
// unless allow_slow_tp.
Placement place_tp(const hw::Topology& topo, const MeshShape& shape, int local_world_size, int node, bool allow_slow_tp);

}  // namespace meshtrain::comm

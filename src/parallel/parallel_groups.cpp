#include "meshtrain/parallel/parallel_groups.h"

namespace meshtrain::parallel {

ParallelGroups make_parallel_groups(comm::Mesh& mesh) {
  ParallelGroups g;
  g.world = mesh.world();
  g.dp = mesh.comm(comm::Dim::dp);
  g.fsdp = mesh.comm(comm::Dim::fsdp);
  g.tp = mesh.comm(comm::Dim::tp);
  if (mesh.size(comm::Dim::pp) > 1) g.pp = mesh.comm(comm::Dim::pp);
  return g;
}

}  // namespace meshtrain::parallel

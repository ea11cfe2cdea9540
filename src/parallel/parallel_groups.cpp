#include "meshtrain/parallel/parallel_groups.h"

namespace meshtrain::parallel {

ParallelGroups make_parallel_groups(comm::Mesh& mesh) {
  ParallelGroups g;
  g.world = mesh.world();
  g.dp = mesh.comm(Dim::dp);
  g.fsdp = mesh.comm(Dim::fsdp);
  g.tp = mesh.comm(Dim::tp);
  if (mesh.size(Dim::pp) > 1) g.pp = mesh.comm(Dim::pp);
  return g;
}

}  // namespace meshtrain::parallel

#include "meshtrain/parallel/parallel_groups.h"

#include <sstream>

#include "meshtrain/core/error.h"

namespace meshtrain::parallel {

MeshCoords mesh_coords(const ParallelConfig& p, int64_t world_size) {
  MeshCoords m;
  std::stringstream ss(p.order);
  std::string dim;
  while (std::getline(ss, dim, '-')) {
    m.dims.push_back(dim);
    const int64_t n = dim == "pp" ? p.pp : dim == "dp" ? (p.dp > 0 ? p.dp : 1) : dim == "fsdp" ? p.fsdp : p.tp;
    m.sizes.push_back(n);
  }
  int64_t total = 1;
  for (int64_t n : m.sizes) total *= n;
  MT_CHECK(total == world_size, "mesh ", p.order, " holds ", total, " ranks, world size is ", world_size);
  return m;
}

int64_t MeshCoords::coord(int64_t rank, const std::string& dim) const {
  int64_t stride = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    if (dims[i] == dim) return (rank / stride) % sizes[i];
    stride *= sizes[i];
  }
  MT_CHECK(false, "mesh has no dim ", dim);
  return 0;
}

int64_t MeshCoords::group_color(int64_t rank, const std::string& dim) const {
  int64_t stride = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    if (dims[i] == dim) return rank - coord(rank, dim) * stride;
    stride *= sizes[i];
  }
  MT_CHECK(false, "mesh has no dim ", dim);
  return 0;
}

ParallelGroups make_parallel_groups(const comm::CommPtr& world, const ParallelConfig& p) {
  ParallelGroups g;
  if (!world) return g;
  g.world = world;
  const auto m = mesh_coords(p, world->size());
  const int64_t r = world->rank();
  // Every rank splits for every dim in the same order (split is a collective over `world`).
  auto split = [&](const std::string& dim) -> comm::CommPtr {
    for (size_t i = 0; i < m.dims.size(); ++i)
      if (m.dims[i] == dim && m.sizes[i] == world->size()) return world;  // the whole world: no new group
    return world->split(static_cast<int>(m.group_color(r, dim)), static_cast<int>(m.coord(r, dim)));
  };
  g.dp = split("dp");
  g.fsdp = split("fsdp");
  g.tp = split("tp");
  return g;
}

ParallelGroups make_parallel_groups(comm::Mesh& mesh) {
  ParallelGroups g;
  g.world = mesh.world();
  g.dp = mesh.comm(comm::Dim::dp);
  g.fsdp = mesh.comm(comm::Dim::fsdp);
  g.tp = mesh.comm(comm::Dim::tp);
  return g;
}

}  // namespace meshtrain::parallel

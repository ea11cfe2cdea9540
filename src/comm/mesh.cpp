// Mesh: lazily split communicators per dim set; see mesh.h.
#include "meshtrain/comm/mesh.h"

#include <sstream>

#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"

namespace meshtrain::comm {

namespace {

CommPtr checked(CommPtr world) {
  MT_CHECK(world != nullptr, "Mesh: the world communicator is null");
  return world;
}

}  // namespace

Mesh::Mesh(const Config& cfg, CommPtr world)
    : Mesh(MeshShape::from_config(cfg.parallel, checked(world)->size()), world) {}

Mesh::Mesh(MeshShape shape, CommPtr world) : shape_(std::move(shape)), world_(checked(std::move(world))) {
  MT_CHECK(shape_.world_size() == world_->size(), "mesh ", shape_.describe(), " has ", shape_.world_size(),
           " ranks ≠ world size ", world_->size());
  coord_ = shape_.coord(world_->rank());
}

CommPtr Mesh::comm(DimSet dims) {
  MT_CHECK(!dims.empty(), "Mesh::comm: no dims given");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = comms_.find(dims.bits());
  if (it != comms_.end()) return it->second;
  CommPtr c;
  if (shape_.size(dims) == world_->size()) {
    // Every other dim has size 1, so the group order (coordinates in `dims`, outer first) is the world's
    // rank order: the world communicator is this group.
    c = world_;
  } else {
    // Collective over the world (see mesh.h): color = which group, key = position inside it.
    c = world_->split(shape_.group_index(rank(), dims), shape_.index_in_group(rank(), dims));
    MT_CHECK(c && c->size() == shape_.size(dims) && c->rank() == shape_.index_in_group(rank(), dims),
             "Mesh::comm: split gave rank ", c ? c->rank() : -1, " of ", c ? c->size() : 0, ", expected ",
             shape_.index_in_group(rank(), dims), " of ", shape_.size(dims));
  }
  comms_.emplace(dims.bits(), c);
  return c;
}

CommPtr Mesh::comm(std::string_view dims) {
  DimSet set;
  std::stringstream ss{std::string(dims)};
  for (std::string part; std::getline(ss, part, '-');) {
    auto d = parse_dim(part);
    MT_USER_CHECK(d.has_value(), "mesh.comm(\"", dims, "\"): '", part,
                  "' is not a mesh dim (valid: pp, dp, fsdp, tp, or several joined by '-')");
    set.add(*d);
  }
  MT_USER_CHECK(!set.empty(), "mesh.comm(\"", dims, "\"): no dim named");
  return comm(set);
}

std::string Mesh::describe() const {
  std::string c;
  for (Dim d : shape_.order()) c += cat(c.empty() ? "" : " ", dim_name(d), coord(d));
  return cat("rank ", rank(), ": ", c, " of ", shape_.describe());
}

}  // namespace meshtrain::comm

// Mesh: this rank's view of the device mesh (MeshShape, core/mesh_shape.h) plus the communicator of each group it belongs to,
// passed explicitly to every parallel layer (docs/architecture.md: process groups are never globals).
//
//   comm::Mesh mesh(cfg, world);                  // world: the job's communicator (any backend)
//   mesh.coord(Dim::tp);                    // this rank's position along tp
//   comm::CommPtr tp = mesh.comm(Dim::tp);  // created on first use through world->split()
//   comm::CommPtr hsdp = mesh.comm({Dim::dp, Dim::fsdp});  // combined dims (HSDP / ZeRO)
//
// COLLECTIVE: the first comm(dims) for a given set of dims calls world->split(), a collective over the
// whole world communicator. Every rank must therefore ask for the same dim sets in the same order (e.g. all
// in parallelize(), before training), from one thread, interleaved with world collectives identically on
// every rank. Later calls return the cached communicator and involve no one else. A group that spans the
// whole world reuses `world` itself (no split).
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/core/config.h"
#include "meshtrain/core/mesh_shape.h"

namespace meshtrain::comm {

class Mesh {
 public:
  // The shape from cfg.parallel and world->size() (MeshShape::from_config: UserError with the arithmetic, which
  // validate() has reported before a worker gets here).
  Mesh(const Config& cfg, CommPtr world);
  Mesh(MeshShape shape, CommPtr world);  // shape.world_size() must equal world->size(): Error otherwise

  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;

  const MeshShape& shape() const { return shape_; }
  int rank() const { return world_->rank(); }
  int size(Dim d) const { return shape_.size(d); }
  int coord(Dim d) const { return coord_[static_cast<std::size_t>(d)]; }
  const CommPtr& world() const { return world_; }

  // The communicator of this rank's group along `dims` (its rank = index_in_group, its size = size(dims)).
  // Collective on first use per dim set: see the file comment.
  CommPtr comm(DimSet dims);
  CommPtr comm(Dim d) { return comm(DimSet{d}); }
  // By name: "tp", or several dims joined by '-' ("dp-fsdp"). UserError for an unknown name.
  CommPtr comm(std::string_view dims);

  // "rank 5: pp0 dp1 fsdp0 tp1 of pp1 × dp2 × fsdp1 × tp4 (order pp-dp-fsdp-tp)".
  std::string describe() const;

 private:
  MeshShape shape_;
  CommPtr world_;
  MeshShape::Coord coord_{};
  std::mutex mu_;  // guards comms_ (the collective contract still requires one calling thread)
  std::map<unsigned, CommPtr> comms_;  // by DimSet::bits()
};

}  // namespace meshtrain::comm

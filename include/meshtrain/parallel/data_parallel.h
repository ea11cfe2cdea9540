// DataParallel (first version): every rank holds the whole model; after backward, gradients are averaged
// across ranks in buckets of ~bucket_mb, all buckets in flight at once (each its own async all-reduce), so
// ranks finish the step with identical gradients and — after identical optimizer steps — identical
// parameters. Parameters are bucketed in reverse registration order, roughly the order backward produces
// their gradients. (Overlap with backward through gradient hooks comes with the full reducer.)
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "meshtrain/comm/communicator.h"

namespace meshtrain::parallel {

class DataParallel {
 public:
  struct Param {
    std::string name;
    at::Tensor param;
  };

  DataParallel(std::vector<Param> params, comm::CommPtr comm, double bucket_mb);

  // Copies rank 0's parameters to every rank (call once after initialisation or loading).
  void broadcast_parameters();
  // Averages every parameter's gradient over the ranks. A parameter without a gradient on this rank is an
  // error naming it (every rank must produce the same set of gradients).
  void average_gradients();

  size_t num_buckets() const { return buckets_.size(); }

 private:
  std::vector<Param> params_;
  std::vector<std::vector<size_t>> buckets_;  // indices into params_
  comm::CommPtr comm_;
};

}  // namespace meshtrain::parallel

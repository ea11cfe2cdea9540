// DataParallel: the gradient reducer of replicated data parallelism (PyTorch DDP / Megatron DDP design).
//
// Every rank holds the whole model. Parameters are grouped into buckets in reverse registration order (about
// the order backward produces their gradients): a small first bucket so communication starts early, then
// buckets of `bucket_mb`. Each bucket is one flat buffer and each parameter's .grad is a view into it, so
// autograd accumulates straight into the buffer and the all-reduce needs no copy. A hook that runs after
// autograd accumulated a parameter's gradient counts the bucket down; when a bucket's last gradient lands its
// all-reduce (average) starts at once, so communication overlaps the rest of backward. Buckets start in index
// order on every rank (a ready bucket waits for the ones before it), which keeps the collective order
// identical across ranks.
//
// Only trainable parameters (requires_grad; parallel/trainable_policy.h decides) are bucketed and reduced;
// frozen ones take part in broadcast_parameters() alone.
//
// On accumulation micro-steps (set_requires_sync(false)) nothing is reduced: gradients just accumulate in the
// buckets. finish_gradient_sync() waits for every bucket; a parameter that got no gradient in a synced
// backward is a UserError naming it (unless allow_unused, which treats it as a zero gradient).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/parallel/pending_collective.h"

namespace meshtrain::parallel {

struct DataParallelOptions {
  double bucket_mb = 25.0;       // bucket capacity in MiB
  double first_bucket_mb = 1.0;  // capacity of bucket 0 (the last layers' gradients): starts comm early
  at::ScalarType reduce_dtype = at::kFloat;  // kBFloat16: buckets are cast for the all-reduce and back
  bool allow_unused = false;     // a parameter without a gradient counts as a zero gradient, not an error
};

class DataParallel {
 public:
  struct Param {
    std::string name;
    at::Tensor param;
  };

  DataParallel(std::vector<Param> params, comm::CommPtr comm, DataParallelOptions opts);
  ~DataParallel();  // removes the hooks
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // Copies rank 0's parameters to every rank (after initialisation or loading).
  void broadcast_parameters();
  // false on accumulation micro-steps: gradients accumulate locally and nothing is reduced.
  void set_requires_sync(bool sync) { requires_sync_ = sync; }
  // Waits for every bucket's all-reduce (starting any not started yet); afterwards every .grad holds the
  // average over ranks. Idempotent; a no-op after a backward without sync.
  void finish_gradient_sync();
  // Zeroes the buckets (gradients stay views of them, so the next backward accumulates in place).
  void zero_grad();
  // Called by finish_gradient_sync() with each parameter's index (construction order) as soon as its bucket's
  // average is in place, bucket 0 first (optimizer offload hands the averaged gradients on from here).
  void on_reduced(std::function<void(size_t)> fn) { on_reduced_ = std::move(fn); }

  size_t num_buckets() const { return buckets_.size(); }
  // Parameter names per bucket, bucket 0 first (tests and logs).
  std::vector<std::vector<std::string>> bucket_names() const;

 private:
  struct Bucket {
    std::vector<size_t> params;  // indices into params_
    at::Tensor buffer;           // flat, the parameters' dtype and device
    at::Tensor reduce_buffer;    // buffer cast to reduce_dtype (when it differs)
    size_t pending = 0;          // gradients still to land in this backward
    PendingCollective op;
  };

  // Groups the trainable parameters into buckets (see the file comment) and points their .grad into them.
  void assign_buckets();
  bool bucketed(size_t k) const { return views_[k].defined(); }
  void on_gradient(size_t index);  // from the post-accumulate hook of params_[index]
  void launch_ready_buckets();
  void reset_counts();

  std::vector<Param> params_;
  std::vector<at::Tensor> views_;       // per parameter: its slice of its bucket, shaped like it (frozen: none)
  std::vector<size_t> bucket_of_;       // per parameter
  std::vector<char> seen_;              // per parameter: gradient landed in this backward
  std::vector<Bucket> buckets_;
  size_t next_launch_ = 0;
  comm::CommPtr comm_;
  DataParallelOptions opts_;
  bool requires_sync_ = true;
  bool synced_ = true;  // nothing pending since the last finish
  std::function<void(size_t)> on_reduced_;
};

}  // namespace meshtrain::parallel

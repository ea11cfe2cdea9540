// Communicator: the one interface every parallel strategy talks through (DESIGN.md "One interface, several
// backends"). Backends: CPU (sockets between ranks, src/comm/cpu_*), NCCL (GPU), and a fake single-process
// one. All ops take contiguous tensors of any size (0 and sizes not divisible by the world size included) in
// fp32, bf16, fp16, int32 or int64, and return a Work; the tensors must stay alive until wait() returns.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>

#include "meshtrain/comm/work.h"

namespace meshtrain::comm {

enum class ReduceOp { Sum, Avg, Max, Min };

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend_name() const = 0;

  // In place: every rank ends with the reduction of all ranks' `tensor`.
  virtual WorkPtr all_reduce(at::Tensor& tensor, ReduceOp op) = 0;
  // `out` (size × numel of `in`) receives every rank's `in`, in rank order.
  virtual WorkPtr all_gather_into(at::Tensor& out, const at::Tensor& in) = 0;
  // `out` (numel of `in` / size) receives this rank's slice of the reduction of all ranks' `in`.
  virtual WorkPtr reduce_scatter_into(at::Tensor& out, const at::Tensor& in, ReduceOp op) = 0;
  // In place: every rank ends with `root`'s `tensor`.
  virtual WorkPtr broadcast(at::Tensor& tensor, int root) = 0;
  virtual WorkPtr send(const at::Tensor& tensor, int dst) = 0;
  virtual WorkPtr recv(at::Tensor& tensor, int src) = 0;
  // `out` chunk i (numel / size) receives rank i's chunk `rank()` of `in`.
  virtual WorkPtr all_to_all(at::Tensor& out, const at::Tensor& in) = 0;
  virtual void barrier() = 0;

  // Collective over this communicator: ranks passing the same `color` form a new communicator, ordered by
  // (`key`, rank). A negative color takes no part and gets nullptr. Backends without sub-groups throw.
  virtual std::shared_ptr<Communicator> split(int color, int key);
};

using CommPtr = std::shared_ptr<Communicator>;

}  // namespace meshtrain::comm

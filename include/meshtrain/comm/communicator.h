// Communicator: the one interface every parallel strategy talks through (docs/comm.md). Backends: CPU (sockets
// between ranks, src/comm/cpu/), NCCL (GPU, src/comm/nccl/), and a fake single-process one; make_communicator
// wraps a backend that takes host tensors in a StagingCommunicator when the caller's tensors live on a GPU
// (src/comm/staging/). All ops take
// contiguous tensors of any size (0 and sizes not divisible by the world size included) in fp32, bf16, fp16,
// int32 or int64, and return a Work; the tensors must stay alive until wait() returns.
//
// A caller asks what a communicator can do, never which backend it is: device() is where it takes tensors
// without a copy, takes() whether it accepts tensors on a given device at all. backend_name() is a label for
// logs and benchmarks only.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

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
  virtual std::string backend_name() const = 0;  // a label for logs and benchmarks; never compare it

  // Where this communicator takes tensors without a copy (the rank's GPU for NCCL, host memory for the CPU
  // backend): a small tensor made only to be exchanged belongs here.
  virtual c10::Device device() const = 0;
  // Whether tensors on `d` are accepted: device() always, and for a staging communicator also the caller's
  // device, whose tensors it copies through host memory.
  virtual bool takes(const c10::Device& d) const { return d == device(); }

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

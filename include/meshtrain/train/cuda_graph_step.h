// CudaGraphStep: the step's forward and backward as a CUDA graph (train.cuda_graph: on). One micro-batch's
// forward + backward (ParallelModel::train_loss, then backward) is captured once, after a few eager warm-up
// steps, and replayed for every micro-batch of every later step: the launch cost of hundreds of small kernels
// is paid once per micro-batch by the driver instead of by the host, op by op.
//
//   the batch ──copy──► static tokens / targets, the loss weight ──► replay ──► static loss
//                                                              gradients += into .grad (fixed addresses)
//
// Per step (forward_backward: the same contract as ParallelModel::forward_backward):
//   every step          the .grad tensors (owned here, so their addresses never change) zeroed in place
//   steps 1..kWarmup    eager, on a side stream: the lazy set-up (cuBLAS handles and workspaces, the
//                       allocator's blocks, autocast) happens outside capture, on the stream that captures
//   step kWarmup + 1    capture on that stream (the capture runs nothing), then replay as every later step
//   after warm-up       per micro-batch: copy in, replay, add its loss to the step's sum
// The arithmetic is the eager step's, kernel for kernel (the loss weight is a device scalar holding the
// float the eager path multiplies by), so the losses and parameters match an eager run.
// Clipping, the finiteness check (a host read) and the optimizer run after the replays, outside the graph.
//
// What cannot be captured is refused with one line naming train.cuda_graph: in the constructor a layout
// whose backward has collectives or hooks (ParallelModel::capturable()), a device other than CUDA; at the
// first step a batch of packed documents (their boundaries change per batch). The config's own refusals
// (dropout, offload, activation checkpointing) are in core/config_validate.cpp.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "meshtrain/parallel/parallel_model.h"

namespace meshtrain::train {

class CudaGraphStep {
 public:
  // Eager steps before the capture (PyTorch's recipe for whole-network capture uses a few as well).
  static constexpr int64_t kWarmupSteps = 3;

  // UserError (one line) where `model` cannot be captured on `device`. Allocates the gradient buffers.
  CudaGraphStep(parallel::ParallelModel& model, at::Device device);
  ~CudaGraphStep();
  CudaGraphStep(const CudaGraphStep&) = delete;
  CudaGraphStep& operator=(const CudaGraphStep&) = delete;

  // The step's forward and backward over `batches`, as ParallelModel::forward_backward: returns the sum of
  // the micro-batch losses (each × count × its weight where weighted) as a device scalar, no host sync.
  at::Tensor forward_backward(const std::vector<parallel::ParallelModel::MicroBatch>& batches);
  // Whether the graph is captured (every step from now replays it).
  bool captured() const;

 private:
  struct Graph;  // the CUDA graph, its side stream and static tensors (CUDA builds only)

  // The buffers zeroed and set as the optimizer parameters' .grad (after_optimizer_step may drop them).
  void attach_gradients();
  // One micro-batch's forward and backward on the static tensors; the outputs are kept in graph_.
  void run_static();
  void copy_in(const parallel::ParallelModel::MicroBatch& b, double count);
  void capture();

  parallel::ParallelModel& model_;
  at::Device device_;
  std::vector<at::Tensor> params_, grads_;  // the optimizer parameters and their gradient buffers
  int64_t steps_ = 0;
  std::unique_ptr<Graph> graph_;
};

}  // namespace meshtrain::train

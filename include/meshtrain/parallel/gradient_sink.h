// GradientSink: where a layout hands each optimizer parameter's gradient as backward produces it, when the
// optimizer keeps the fp32 master and the gradients in host memory (optimizer.offload: cpu;
// train/offloaded_adamw.h). The layout then keeps only compute-dtype parameters on the device and frees (or
// reuses) each gradient right after handing it over; the sink accumulates the micro-batches in fp32.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>

namespace meshtrain::parallel {

class GradientSink {
 public:
  virtual ~GradientSink() = default;
  // One micro-batch's final gradient (reduced where the layout reduces) of optimizer parameter `index`
  // (ParallelModel::optimizer_params() order), queued on the caller's current stream. The step's first
  // gradient of `index` overwrites, later ones add. After return the layout may drop `grad`: its memory is
  // kept until the copy ran.
  virtual void take_gradient(size_t index, const at::Tensor& grad) = 0;
  // Before the layout writes again into gradient memory it handed over (a reused bucket): the current stream
  // waits for the copies queued so far.
  virtual void before_reuse() = 0;
  // Sum of squares of the step's accumulated gradient `index` (0 when it got none); after the backward.
  virtual double squared_norm(size_t index) = 0;
};

}  // namespace meshtrain::parallel

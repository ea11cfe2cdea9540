// PipelineLinks: the point-to-point channels of one pipeline rank to its neighbours — activations forward to
// rank + 1, their gradients back to rank − 1 (mod pp where a model chunk wraps around: interleaved schedules).
//
// Each (pair, direction, kind) gets a communicator of its own, split from the pp group. A communicator runs its
// ops in issue order, and a large send blocks until its receiver posts the receive (docs/comm.md); on a
// channel that carries one kind one way, the receiver consumes in the order the sender sends (the schedules
// keep micro-batches in order per stage), so a pending send only ever waits for the receive it matches and
// never holds up a transfer going the other way. The executor waits for a receive when it needs the tensor and
// for its sends at the end of the step: the schedule's own order is then the only order that matters.
#pragma once

#include <ATen/core/Tensor.h>

#include "meshtrain/comm/communicator.h"

namespace meshtrain::parallel {

class PipelineLinks {
 public:
  PipelineLinks() = default;
  // Collective over `pp` (every pp rank, in the same order). `wrap`: the last rank also feeds the first.
  PipelineLinks(const comm::CommPtr& pp, bool wrap);

  comm::WorkPtr send_activation(const at::Tensor& t);  // to rank + 1
  comm::WorkPtr recv_activation(at::Tensor& t);        // from rank − 1
  comm::WorkPtr send_gradient(const at::Tensor& t);    // to rank − 1
  comm::WorkPtr recv_gradient(at::Tensor& t);          // from rank + 1

 private:
  // Groups of two, ordered sender-of-activations first: the peer is always 1 − own rank.
  comm::CommPtr act_out_, act_in_, grad_in_, grad_out_;
};

}  // namespace meshtrain::parallel

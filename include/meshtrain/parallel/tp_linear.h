// TpLinearImpl: what ColumnParallelLinear and RowParallelLinear share — a model::Linear standing in under the
// same module name whose parameters are this rank's blocks, the tensor-parallel group, and the sequence-
// parallel switch. The switch is shared with TensorParallel (one flag for every layer and the head), which
// turns sequence parallelism off for generation: one token at a time cannot be split over the group.
#pragma once

#include <memory>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/model/linear.h"

namespace meshtrain::parallel {

// True while sequence parallelism is on; null means never on.
using SequenceParallelFlag = std::shared_ptr<const bool>;

class TpLinearImpl : public model::LinearImpl {
 protected:
  // weight: this rank's [out', in'] block; bias: its block or the whole bias, or undefined. Both become the
  // parameters as is (the base class is built on the meta device and allocates nothing).
  TpLinearImpl(at::Tensor weight, at::Tensor bias, comm::CommPtr tp, SequenceParallelFlag sp);

  bool sequence_parallel() const { return sp_ && *sp_; }

  comm::CommPtr tp_;

 private:
  SequenceParallelFlag sp_;
};

}  // namespace meshtrain::parallel

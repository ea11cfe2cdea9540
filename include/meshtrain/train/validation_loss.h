// The loss of held-out data, as validation (trainer.h) and `meshtrain eval` (evaluate.h) both report it: the
// mean cross-entropy over every counted target of `n` micro-batches on every rank — weighted by each
// micro-batch's unmasked targets, so instruction shards with loss masks give the mean per assistant token,
// not a mean of per-batch or per-rank means. Plain shards count every target alike.
//
//   const HeldOutLoss v = validation_loss(par, loader, n, w.device, w.comm.get());   // v.loss −1: nothing counted
#pragma once

#include <c10/core/Device.h>

#include <cstdint>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/data/data_loader.h"
#include "meshtrain/parallel/parallel_model.h"

namespace meshtrain::train {

struct HeldOutLoss {
  double loss = -1;     // mean cross-entropy per counted target (nats); −1 when no target counted anywhere
  int64_t tokens = 0;   // the targets counted, over every rank (unmasked ones: the loss's own tokens)
};

// Collective over `comm` when it is not null (every rank calls it; every rank returns the same value). Runs
// the model's eval_loss under the caller's grad mode and precision.
HeldOutLoss validation_loss(parallel::ParallelModel& par, data::DataLoader& loader, int64_t n,
                            const c10::Device& device, comm::Communicator* comm);

}  // namespace meshtrain::train

#include "meshtrain/train/validation_loss.h"

#include <ATen/ATen.h>

#include "meshtrain/model/documents.h"

namespace meshtrain::train {

HeldOutLoss validation_loss(parallel::ParallelModel& par, data::DataLoader& loader, int64_t n,
                            const c10::Device& device, comm::Communicator* comm) {
  double sum = 0;      // Σ loss × counted targets: this rank's
  int64_t tokens = 0;  // Σ counted targets: this rank's
  for (int64_t i = 0; i < n; ++i) {
    auto batch = loader.next();
    if (batch.loss_tokens == 0) continue;  // all masked: nothing to weigh
    model::Documents docs;
    if (batch.positions.defined())
      docs = {batch.positions.to(device), batch.cu_seqlens.to(device), batch.max_doc_len, {}};
    const double l = par.eval_loss(batch.inputs.to(device), batch.targets.to(device), docs.packed() ? &docs : nullptr)
                         .item<double>();
    sum += l * static_cast<double>(batch.loss_tokens);
    tokens += batch.loss_tokens;
  }
  if (comm) {  // the sum in fp32 (what every backend reduces: the loss to 1e-7), the count exact in int64
    auto s = at::full({1}, sum, at::TensorOptions(at::kFloat).device(comm->device()));
    auto t = at::full({1}, tokens, at::TensorOptions(at::kLong).device(comm->device()));
    comm->all_reduce(s, comm::ReduceOp::Sum)->wait();
    comm->all_reduce(t, comm::ReduceOp::Sum)->wait();
    sum = s.cpu().item<double>();
    tokens = t.cpu().item<int64_t>();
  }
  return {tokens > 0 ? sum / static_cast<double>(tokens) : -1, tokens};
}

}  // namespace meshtrain::train

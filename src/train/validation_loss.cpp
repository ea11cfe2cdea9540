#include "meshtrain/train/validation_loss.h"

#include <ATen/ATen.h>

#include "meshtrain/model/documents.h"

namespace meshtrain::train {

double validation_loss(parallel::ParallelModel& par, data::DataLoader& loader, int64_t n, const c10::Device& device,
                       comm::Communicator* comm) {
  double sum = 0, tokens = 0;  // Σ loss × counted targets, Σ counted targets: this rank's
  for (int64_t i = 0; i < n; ++i) {
    auto batch = loader.next();
    if (batch.loss_tokens == 0) continue;  // all masked: nothing to weigh
    model::Documents docs;
    if (batch.positions.defined())
      docs = {batch.positions.to(device), batch.cu_seqlens.to(device), batch.max_doc_len, {}};
    const double l = par.eval_loss(batch.inputs.to(device), batch.targets.to(device), docs.packed() ? &docs : nullptr)
                         .item<double>();
    sum += l * static_cast<double>(batch.loss_tokens);
    tokens += static_cast<double>(batch.loss_tokens);
  }
  if (comm) {  // fp32 (what every backend reduces): counts stay exact below 2^24 tokens, the loss to 1e-7
    auto t = at::tensor({sum, tokens}, at::TensorOptions(at::kDouble)).to(at::kFloat).to(comm->device());
    comm->all_reduce(t, comm::ReduceOp::Sum)->wait();
    const auto host = t.cpu();
    sum = host[0].item<double>();
    tokens = host[1].item<double>();
  }
  return tokens > 0 ? sum / tokens : -1;
}

}  // namespace meshtrain::train

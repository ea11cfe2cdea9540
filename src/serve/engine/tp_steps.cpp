// Each message is two broadcasts from rank 0: a header [kind, payload ints], then the payload when there is one.
// They go on the communicator's own device (a device backend takes no host tensor); the payload comes back to the
// host on the other ranks, where unpack_step lays out the batch.
#include "meshtrain/serve/engine/tp_steps.h"

#include <ATen/ATen.h>

#include "meshtrain/core/error.h"
#include "meshtrain/model/fused_projections.h"
#include "meshtrain/model/paged_forward.h"
#include "meshtrain/serve/engine/packed_step.h"

namespace meshtrain::serve {

TensorParallelSteps::TensorParallelSteps(comm::CommPtr group, std::chrono::milliseconds heartbeat)
    : group_(std::move(group)), heartbeat_(heartbeat) {
  MT_CHECK(group_ && heartbeat_.count() > 0, "TensorParallelSteps: a group and a positive heartbeat");
}

void TensorParallelSteps::send(Message kind, const std::vector<int32_t>& payload) {
  MT_CHECK(rank() == 0 && !stopped_, "TensorParallelSteps: only rank 0 leads, and not after stop()");
  const auto on_group = at::TensorOptions().dtype(at::kInt).device(group_->device());
  auto header = at::tensor({static_cast<int32_t>(kind), static_cast<int32_t>(payload.size())}, at::kInt)
                    .to(group_->device());
  group_->broadcast(header, 0)->wait();
  if (payload.empty()) return;
  auto body = at::from_blob(const_cast<int32_t*>(payload.data()), {static_cast<int64_t>(payload.size())}, at::kInt)
                  .to(on_group.device(), at::kInt, /*non_blocking=*/false, /*copy=*/true);
  group_->broadcast(body, 0)->wait();
}

StepBatch TensorParallelSteps::lead(const StepPlan& plan, const Scheduler& scheduler, const at::Device& device) {
  PackedStep packed = pack_step(plan, scheduler);
  send(Message::kStep, packed.data);
  return {.batch = unpack_step(packed.data, device), .sampling = std::move(packed.sampling)};
}

void TensorParallelSteps::idle() { send(Message::kIdle, {}); }

void TensorParallelSteps::stop() {
  if (stopped_) return;
  send(Message::kStop, {});
  stopped_ = true;
}

int64_t TensorParallelSteps::follow(model::TransformerImpl& model, PagedKvCache& cache) {
  MT_CHECK(rank() != 0, "TensorParallelSteps::follow: rank 0 leads");
  // This rank's column-parallel shards of q, k, v and of gate, up as one GEMM each, as rank 0's engine lays out its
  // own (EngineOptions::fused_projections): the collectives are in the row-parallel layers, unchanged.
  model::fuse_projections(model);
  const auto on_group = at::TensorOptions().dtype(at::kInt).device(group_->device());
  const at::Device device = model.head_weight().device();
  int64_t steps = 0;
  for (;;) {
    auto header = at::empty({2}, on_group);
    group_->broadcast(header, 0)->wait();
    const auto h = header.cpu();
    const auto kind = static_cast<Message>(h[0].item<int32_t>());
    const int64_t n = h[1].item<int32_t>();
    if (kind == Message::kStop) return steps;
    if (kind == Message::kIdle) continue;
    MT_CHECK(kind == Message::kStep && n > 0, "TensorParallelSteps::follow: message ", static_cast<int32_t>(kind),
             " of ", n, " ints from rank 0");
    auto body = at::empty({n}, on_group);
    group_->broadcast(body, 0)->wait();
    const auto host = body.cpu();
    const model::PagedBatch batch = unpack_step({host.data_ptr<int32_t>(), static_cast<size_t>(n)}, device);
    model::paged_logits(model, batch, cache.layers());  // the full logits are rank 0's to sample
    ++steps;
  }
}

}  // namespace meshtrain::serve

// OffloadedAdamW (optimizer.offload: cpu): AdamW whose fp32 master weights and moments live in host memory
// (pinned when the parameters are on CUDA) and whose update runs on host threads (train/host_adamw.h), so
// the device keeps only what the layout computes with.
//
// One step, per parameter (or FSDP/ZeRO shard — whatever the layout's optimizer parameter is):
//   gradients_ready():  copy stream waits for the compute stream; each gradient → its pinned host buffer
//                       (non-blocking, in order), an event after each
//   step(lr, clip):     for each parameter in order: wait for its event → its spans go to the host threads;
//                       as each parameter's spans finish (in order), its updated master → the device parameter
//                       on the upload stream (non-blocking from pinned memory); at the end the compute
//                       stream waits for the upload stream, so the next forward sees the new values
// The global-norm clip is known only once every gradient has arrived: the caller takes the norm unclipped
// and the update scales each gradient by the coefficient (scales_gradients()). Results equal AdamW's
// (train/adamw.h) within fp32 rounding; the state has the same names and shapes, so checkpoints move
// between the two.
#pragma once

#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <memory>
#include <optional>

#include "meshtrain/train/host_workers.h"
#include "meshtrain/train/optimizer.h"

namespace meshtrain::train {

class OffloadedAdamW : public Optimizer {
 public:
  OffloadedAdamW(std::vector<Param> params, const OptimizerConfig& cfg);
  ~OffloadedAdamW() override;

  bool scales_gradients() const override { return true; }
  void gradients_ready() override;
  void step(double lr, double grad_scale = 1.0) override;
  void parameters_changed() override;
  std::map<std::string, at::Tensor> state_tensors() const override;
  // host update ms (the host's part of step(): waiting for gradients, updating, queueing uploads),
  // D2H MB and H2D MB of the last step.
  std::vector<std::pair<std::string, double>> step_metrics() const override;

  int threads() const { return workers_.size(); }

 private:
  // Per optimizer parameter: its host state and the event after its gradient's download.
  struct HostState {
    at::Tensor master, exp_avg, exp_avg_sq, grad, step;  // fp32, contiguous, host (pinned on CUDA)
    std::optional<c10::Event> downloaded;                // set by gradients_ready() (device parameters only)
    bool has_grad = false;
  };

  void download(size_t i);
  void upload(size_t i);

  OptimizerConfig cfg_;
  bool on_device_ = false;  // parameters live on an accelerator (streams, events and pinned memory apply)
  c10::Device device_{c10::kCPU};
  std::optional<c10::Stream> d2h_, h2d_;
  std::vector<HostState> state_;
  HostWorkers workers_;
  bool downloads_started_ = false;
  double host_ms_ = 0, d2h_bytes_ = 0, h2d_bytes_ = 0;
};

}  // namespace meshtrain::train

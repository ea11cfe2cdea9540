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
// Streaming (stream_from(), where the layout can: parallel/gradient_sink.h): the host master is THE master
// and the device holds only the layout's compute-dtype parameters. Each micro-batch's gradient arrives from
// the layout's hooks during the backward: cast to fp32 and copied on the download stream, the step's first
// straight into the gradient buffer, later ones into a pinned staging buffer that a host thread adds once
// the copy landed (accumulation in fp32 on the host, never through bf16 on the device). gradients_ready()
// then only waits for the copies and additions; the norm's squares come from the host buffers; uploads
// write the cast of the master.
// Held (hold_gradients_from(), where the layout can and neither streaming nor the delayed update applies:
// core/gradient_streaming.h): the host master is THE master, the layout keeps its parameters and gradients in
// the compute dtype on the device, and step() takes each gradient down in chunks through a few pinned slots,
// updates the chunk and sends its cast back up (train/chunked_update.h); the norm is the layout's, taken on
// the device. No gradient buffer on the host: 12 bytes a parameter there, not 16.
// Delayed update (optimizer.offload_delay: 1, DeepSpeed's delayed parameter update): step() of step N queues
// the spans and returns at once, without uploads; step N+1's forward and backward run on the parameters the
// device already has while the host updates. Step N+1's gradients_ready() waits for update N, queues its
// uploads (the compute stream waits for them) and only then downloads the new gradients into the same host
// buffers, which update N read; each parameter's update waits for its upload before rewriting the master.
// Streamed, the step's first take_gradient() waits for update N before writing the buffers, and its uploads
// still wait for gradients_ready(): the backward keeps reading the parameters it started with. Sync points
// finish a pending update and its uploads: settle(), state_tensors(), parameters_changed(), the destructor.
// The global-norm clip is known only once every gradient has arrived: the caller takes the norm unclipped
// and the update scales each gradient by the coefficient (scales_gradients()). Results equal AdamW's
// (train/adamw.h) within fp32 rounding; the state has the same names and shapes, so checkpoints move
// between the two.
#pragma once

#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <functional>
#include <memory>
#include <optional>

#include "meshtrain/parallel/gradient_sink.h"
#include "meshtrain/train/chunked_update.h"
#include "meshtrain/train/host_workers.h"
#include "meshtrain/train/optimizer.h"

namespace meshtrain::train {

class OffloadedAdamW : public Optimizer, public parallel::GradientSink {
 public:
  OffloadedAdamW(std::vector<Param> params, const OptimizerConfig& cfg);
  ~OffloadedAdamW() override;

  bool scales_gradients() const override { return true; }
  void gradients_ready() override;
  void step(double lr, double grad_scale = 1.0) override;
  void parameters_changed() override;
  void settle() override;
  bool stream_from(parallel::ParallelModel& par) override;
  bool hold_gradients_from(parallel::ParallelModel& par) override;
  // What hold_gradients_from() does once the layout holds its parameters in the compute dtype (tests call it
  // on parameters of their own): later steps go through `slots` pinned slots of `chunk_elements`.
  void hold_gradients(int64_t chunk_elements, int slots);
  at::Tensor master_of(const at::Tensor& param) const override;
  void take_gradient(size_t index, const at::Tensor& grad) override;
  void before_reuse() override;
  double squared_norm(size_t index) override;
  std::map<std::string, at::Tensor> state_tensors() const override;
  // host update ms (the host's part of step(): waiting for gradients, updating, queueing uploads),
  // D2H MB and H2D MB of the last step. Delayed: host update ms is the time the step waited for the
  // previous update where it finished it (gradients_ready() or the first take_gradient(), plus any sync
  // point since the last step) and queueing its own spans; H2D MB the previous update's uploads.
  std::vector<std::pair<std::string, double>> step_metrics() const override;

  int threads() const { return workers_.size(); }

 private:
  // Per optimizer parameter: its host state and the event after its gradient's download.
  struct HostState {
    at::Tensor master, exp_avg, exp_avg_sq, step;  // fp32, contiguous, host (pinned on CUDA)
    at::Tensor grad;  // fp32, host, pinned on CUDA: made by the first download or streamed gradient (never held)
    at::Tensor staging;                                  // streaming, CUDA: a later micro-batch's copy (lazy)
    std::optional<c10::Event> downloaded;                // set by gradients_ready() (device parameters only)
    std::optional<c10::Event> uploaded;                  // after the last upload read the master (device only)
    bool has_grad = false;
    bool queued = false;  // its spans are in the current update and its upload is not queued yet
    bool adding = false;  // staging's addition is queued on the host threads
  };

  struct Countdown;  // per parameter, the current update's unfinished spans

  void download(size_t i);
  void upload(size_t i);
  // Queues every parameter's update spans; undelayed, uploads those finished meanwhile.
  void launch(double lr, double grad_scale);
  // Uploads, in parameter order up to `limit`, the queued parameters whose spans are done (`wait`: waits).
  void upload_finished(size_t limit, bool wait);
  // Waits for the update, uploads the rest; the compute stream waits for the uploads.
  void finish_update();
  // Delayed: finishes the update step() left running (uploads after what the compute stream queued).
  void finish_pending();
  // Streaming, CUDA: one micro-batch's gradient into the host buffer (first) or added to it (later).
  void stream_in(HostState& st, const at::Tensor& grad);
  // The host gradient buffers of the downloaded and streamed ways, made at their first use.
  void make_gradient_buffers();
  // Held: the update through chunked_.
  void step_held(double lr, double grad_scale);
  // Lets the parameters go, lets the layout switch them (`layout_switch`) and takes the new ones.
  bool switch_parameters(parallel::ParallelModel& par, const std::function<bool()>& layout_switch);
  AdamWScalars scalars(size_t i, double lr, double grad_scale);

  OptimizerConfig cfg_;
  bool on_device_ = false;  // parameters live on an accelerator (streams, events and pinned memory apply)
  c10::Device device_{c10::kCPU};
  std::optional<c10::Stream> d2h_, h2d_;
  std::vector<HostState> state_;
  std::unique_ptr<Countdown> spans_;  // before workers_: outlives the tasks that count it down
  size_t next_upload_ = 0;
  HostWorkers workers_;
  bool delay_ = false;         // optimizer.offload_delay 1
  bool pending_ = false;       // delayed: an update is running or done on the host, not uploaded
  double waited_ms_ = 0;       // delayed: finishing the previous update since the last step()
  bool downloads_started_ = false;
  bool streaming_ = false;     // gradients arrive through take_gradient(); the host master is the master
  bool step_closed_ = true;    // streaming: the next take_gradient() starts a new step's accumulation
  std::unique_ptr<ChunkedUpdate> held_;  // the gradients stay on the device (hold_gradients())
  double host_ms_ = 0, d2h_bytes_ = 0, h2d_bytes_ = 0;
};

}  // namespace meshtrain::train

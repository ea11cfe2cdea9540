#include "meshtrain/train/offloaded_adamw.h"

#include <ATen/ATen.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>

#include "meshtrain/core/error.h"
#include "meshtrain/core/gradient_streaming.h"
#include "meshtrain/core/log.h"
#include "meshtrain/parallel/parallel_model.h"
#include "meshtrain/train/host_adamw.h"
#include "meshtrain/train/host_arena.h"
#include "meshtrain/train/stream_order.h"

namespace meshtrain::train {
namespace {

// Elements per task: large enough that queueing costs nothing beside the work (4 arrays × 256 KiB), small
// enough that a big tensor spreads over every thread and the first uploads start early.
constexpr int64_t kSpan = int64_t{1} << 16;

int pick_threads(const OptimizerConfig& cfg) {
  if (cfg.offload_threads > 0) return static_cast<int>(cfg.offload_threads);
  return std::clamp(HostWorkers::available_cpus(), 1, 16);
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

// Per parameter, the current update's unfinished spans; the step's thread waits on it to upload in order.
struct OffloadedAdamW::Countdown {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int64_t> left;

  void done_one(size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    if (--left[i] == 0) cv.notify_all();
  }
  bool finished(size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    return left[i] == 0;
  }
  void wait(size_t i) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return left[i] == 0; });
  }
};

OffloadedAdamW::OffloadedAdamW(std::vector<Param> params, const OptimizerConfig& cfg)
    : Optimizer(std::move(params)),
      cfg_(cfg),
      spans_(std::make_unique<Countdown>()),
      workers_(pick_threads(cfg)),
      delay_(cfg.offload_delay == 1) {
  at::NoGradGuard no_grad;
  if (!params_.empty()) {
    device_ = params_.front().param.device();
    on_device_ = !device_.is_cpu();
  }
  if (on_device_) {
    // Two streams of the pool: downloads and uploads each queue behind their own kind only, never behind
    // the compute stream's next forward.
    c10::impl::VirtualGuardImpl impl(device_.type());
    d2h_ = impl.getStreamFromGlobalPool(device_, /*isHighPriority=*/false);
    h2d_ = impl.getStreamFromGlobalPool(device_, /*isHighPriority=*/false);
  }
  // Three host tensors per parameter (master, moments): carved from a few pinned chunks on an accelerator
  // (train/host_arena.h), plain host memory on the CPU. The gradient buffers come when a way needs them.
  std::vector<std::vector<int64_t>> sizes;
  for (const auto& p : params_) {
    MT_CHECK(p.param.device() == device_, "OffloadedAdamW: parameter ", p.name, " is on ", p.param.device(),
             ", the others on ", device_);
    for (int k = 0; k < 3; ++k) sizes.push_back(p.param.sizes().vec());
  }
  std::optional<HostArena> arena;
  if (on_device_) arena.emplace(/*pinned=*/true, sizes);
  int64_t host_bytes = 0;
  auto host = [&](size_t j) {
    at::Tensor t = arena ? arena->take(j) : at::empty(sizes[j], at::kFloat);
    host_bytes += arena ? 0 : t.nbytes();
    return t;
  };
  for (size_t i = 0; i < params_.size(); ++i) {
    HostState st;
    st.master = host(3 * i).copy_(params_[i].param);
    st.exp_avg = host(3 * i + 1).zero_();
    st.exp_avg_sq = host(3 * i + 2).zero_();
    st.step = at::zeros({}, at::kFloat);
    state_.push_back(std::move(st));
  }
  if (arena) host_bytes = arena->reserved_bytes();
  log::progress("optimizer.offload: AdamW on %d host threads, %.2f GiB of %s host memory%s", workers_.size(),
                static_cast<double>(host_bytes) / (1 << 30), on_device_ ? "pinned" : "plain",
                delay_ ? "; delayed update (each step's gradients are one update stale)" : "");
}

void OffloadedAdamW::make_gradient_buffers() {
  if (state_.empty() || state_.front().grad.defined()) return;
  MT_CHECK(!held_, "OffloadedAdamW: the gradients are held on the device, not downloaded");
  std::vector<std::vector<int64_t>> sizes;
  for (const auto& p : params_) sizes.push_back(p.param.sizes().vec());
  std::optional<HostArena> arena;
  if (on_device_) arena.emplace(/*pinned=*/true, sizes);
  for (size_t i = 0; i < state_.size(); ++i) state_[i].grad = arena ? arena->take(i) : at::empty(sizes[i], at::kFloat);
  if (arena)
    log::progress("optimizer.offload: %.2f GiB of pinned host memory for the gradients",
                  static_cast<double>(arena->reserved_bytes()) / (1 << 30));
}

OffloadedAdamW::~OffloadedAdamW() {
  try {
    finish_pending();  // the parameters keep the last update
  } catch (const std::exception& e) {
    log::warn("optimizer.offload: the last delayed update failed: %s", e.what());
  }
  // Pinned buffers may still be the source or target of queued copies.
  if (on_device_) {
    d2h_->synchronize();
    h2d_->synchronize();
  }
}

void OffloadedAdamW::gradients_ready() {
  at::NoGradGuard no_grad;
  if (held_) {  // they stay where they are until step() takes them down chunk by chunk
    downloads_started_ = true;
    return;
  }
  if (streaming_ || !step_closed_) {
    // The gradients came through take_gradient() during the backward: wait for the last copies and additions.
    if (on_device_) d2h_->synchronize();
    workers_.wait_idle();
    for (auto& st : state_) st.adding = false;
    if (step_closed_) d2h_bytes_ = 0;  // no gradient at all this step
    step_closed_ = true;
    downloads_started_ = true;
    finish_pending();  // the backward no longer reads the parameters
    return;
  }
  d2h_bytes_ = 0;
  make_gradient_buffers();
  // The copy stream starts after everything the compute stream queued so far: the backward and the
  // reductions that made the gradients (and, for a pending update's uploads, read the parameters).
  if (on_device_) order_after(device_, compute_stream(device_), *d2h_);
  // The pending update read the gradient buffers: it finishes before they are overwritten. Its uploads may
  // run beside the downloads; launch() keeps each master until its upload read it.
  finish_pending();
  for (size_t i = 0; i < state_.size(); ++i) download(i);
  downloads_started_ = true;
}

void OffloadedAdamW::download(size_t i) {
  HostState& st = state_[i];
  const at::Tensor& g = params_[i].param.grad();
  st.has_grad = g.defined();
  if (!st.has_grad) return;
  d2h_bytes_ += static_cast<double>(g.numel()) * static_cast<double>(g.element_size());
  if (!on_device_) {
    st.grad.copy_(g);
    return;
  }
  c10::StreamGuard on_copy_stream(*d2h_);
  st.grad.copy_(g, /*non_blocking=*/true);
  // The layout frees the gradient after the step; its memory must not be reused before this copy ran.
  g.record_stream(*d2h_);
  st.downloaded.emplace(device_.type());
  st.downloaded->record(*d2h_);
}

void OffloadedAdamW::step(double lr, double grad_scale) {
  at::NoGradGuard no_grad;
  if (!downloads_started_) gradients_ready();
  downloads_started_ = false;
  const auto start = std::chrono::steady_clock::now();
  if (held_) {
    step_held(lr, grad_scale);
  } else if (delay_) {
    launch(lr, grad_scale);
    pending_ = true;  // finished by the next gradients_ready() or a sync point
  } else {
    h2d_bytes_ = 0;
    // Uploads overwrite parameters: after whatever the compute stream queued that may still read them.
    if (on_device_) order_after(device_, compute_stream(device_), *h2d_);
    launch(lr, grad_scale);
    finish_update();
  }
  host_ms_ = waited_ms_ + ms_since(start);
  waited_ms_ = 0;
}

AdamWScalars OffloadedAdamW::scalars(size_t i, double lr, double grad_scale) {
  HostState& st = state_[i];
  st.step.add_(1.0);
  return AdamWScalars::make(lr, cfg_.beta1, cfg_.beta2, cfg_.eps, params_[i].decay ? cfg_.weight_decay : 0.0,
                            st.step.item<double>(), grad_scale);
}

void OffloadedAdamW::step_held(double lr, double grad_scale) {
  std::vector<ChunkedUpdate::Target> targets;
  for (size_t i = 0; i < state_.size(); ++i) {
    if (!params_[i].param.grad().defined()) continue;
    const HostState& st = state_[i];
    targets.push_back({params_[i].param, st.master, st.exp_avg, st.exp_avg_sq, scalars(i, lr, grad_scale)});
  }
  held_->run(targets);
  d2h_bytes_ = held_->downloaded_bytes();
  h2d_bytes_ = held_->uploaded_bytes();
}

void OffloadedAdamW::launch(double lr, double grad_scale) {
  MT_CHECK(!pending_, "OffloadedAdamW: a step launched before the previous update finished");
  spans_->left.assign(state_.size(), 0);
  next_upload_ = 0;
  Countdown* spans = spans_.get();
  for (size_t i = 0; i < state_.size(); ++i) {
    HostState& st = state_[i];
    if (!st.has_grad) continue;
    if (st.downloaded) st.downloaded->synchronize();  // this gradient is on the host now
    if (st.uploaded) st.uploaded->synchronize();      // the last upload has read the master it rewrites
    const AdamWScalars s = scalars(i, lr, grad_scale);
    const int64_t n = st.master.numel();
    spans->left[i] = std::max<int64_t>(1, (n + kSpan - 1) / kSpan);
    float* p = st.master.data_ptr<float>();
    const float* g = st.grad.data_ptr<float>();
    float* m = st.exp_avg.data_ptr<float>();
    float* v = st.exp_avg_sq.data_ptr<float>();
    for (int64_t a = 0; a < std::max<int64_t>(n, 1); a += kSpan) {
      const int64_t len = std::min(kSpan, n - a);
      workers_.submit([=] {
        if (len > 0) adamw_update_span(p + a, g + a, m + a, v + a, len, s);
        spans->done_one(i);
      });
    }
    st.queued = true;
    // Delayed, the device is still computing with the parameters: nothing goes up before finish_pending().
    if (!delay_) upload_finished(i, /*wait=*/false);
  }
}

void OffloadedAdamW::upload_finished(size_t limit, bool wait) {
  for (; next_upload_ < limit; ++next_upload_) {
    HostState& st = state_[next_upload_];
    if (!st.queued) continue;
    if (wait) spans_->wait(next_upload_);
    else if (!spans_->finished(next_upload_)) return;
    upload(next_upload_);
    st.queued = false;
  }
}

void OffloadedAdamW::finish_update() {
  upload_finished(state_.size(), /*wait=*/true);
  workers_.wait_idle();
  // The next forward (on the compute stream) reads the parameters: it waits for the last upload.
  if (on_device_) order_after(device_, *h2d_, compute_stream(device_));
}

void OffloadedAdamW::finish_pending() {
  if (!pending_) return;
  at::NoGradGuard no_grad;
  const auto start = std::chrono::steady_clock::now();
  h2d_bytes_ = 0;
  if (on_device_) order_after(device_, compute_stream(device_), *h2d_);
  finish_update();
  pending_ = false;
  waited_ms_ += ms_since(start);
}

void OffloadedAdamW::settle() { finish_pending(); }

void OffloadedAdamW::upload(size_t i) {
  const at::Tensor& dst = params_[i].param;
  if (!on_device_) {
    h2d_bytes_ += static_cast<double>(dst.numel()) * static_cast<double>(dst.element_size());
    dst.copy_(state_[i].master);
    return;
  }
  // From pinned memory the copy is a DMA that returns at once; the master is not written again before the
  // event recorded after it completed (launch()). A compute-dtype parameter
  // gets the fp32 master into a transient device buffer and the cast from there (a cross-device copy that
  // casts would convert through unpinned host memory).
  c10::StreamGuard on_copy_stream(*h2d_);
  h2d_bytes_ += static_cast<double>(dst.numel()) * 4.0;
  if (dst.scalar_type() == at::kFloat) {
    dst.copy_(state_[i].master, /*non_blocking=*/true);
  } else {
    at::Tensor fp32 = at::empty(dst.sizes(), dst.options().dtype(at::kFloat));  // on the upload stream
    fp32.copy_(state_[i].master, /*non_blocking=*/true);
    dst.copy_(fp32);
  }
  state_[i].uploaded.emplace(device_.type());
  state_[i].uploaded->record(*h2d_);
}

bool OffloadedAdamW::switch_parameters(parallel::ParallelModel& par, const std::function<bool()>& layout_switch) {
  // The masters were copied from the fp32 parameters at construction. The layout replaces each shard by its
  // cast one unit at a time; a reference held here would keep every fp32 shard alive until the last cast (the
  // device would peak at 6 bytes a parameter while the model is set up, not 4), so they are let go first and
  // taken again from the layout — its new shards, or the same ones where it cannot switch.
  for (auto& p : params_) p.param = at::Tensor();
  const bool switched = layout_switch();
  const auto now = par.optimizer_params();
  MT_CHECK(now.size() == params_.size(), "OffloadedAdamW: the layout has ", now.size(), " optimizer parameters, ",
           params_.size(), " before the switch");
  for (size_t i = 0; i < now.size(); ++i) {
    MT_CHECK(now[i].name == params_[i].name, "OffloadedAdamW: parameter ", i, " is ", now[i].name, ", was ",
             params_[i].name);
    params_[i].param = now[i].param;
  }
  return switched;
}

bool OffloadedAdamW::stream_from(parallel::ParallelModel& par) {
  MT_CHECK(!held_, "OffloadedAdamW: the gradients are held on the device already");
  if (!switch_parameters(par, [&] { return par.stream_gradients(*this); })) return false;
  streaming_ = true;
  log::progress("optimizer.offload: gradients leave the device as the backward produces them; the device "
                "holds %s parameters", c10::toString(params_.empty() ? at::kFloat : params_.front().param.scalar_type()));
  return true;
}

bool OffloadedAdamW::hold_gradients_from(parallel::ParallelModel& par) {
  MT_CHECK(!streaming_, "OffloadedAdamW: the gradients are streamed already");
  if (delay_ || !switch_parameters(par, [&] { return par.hold_gradients(); })) return false;
  hold_gradients(kHeldChunkElements, kHeldSlots);
  return true;
}

void OffloadedAdamW::hold_gradients(int64_t chunk_elements, int slots) {
  MT_CHECK(!delay_, "OffloadedAdamW: the delayed update reads a whole step's gradients from host buffers; they "
                    "cannot stay on the device");
  held_ = std::make_unique<ChunkedUpdate>(device_, d2h_, h2d_, workers_, chunk_elements, slots);
  log::progress("optimizer.offload: the gradients stay on the device in %s and go down in chunks at the step "
                "(%.2f GiB of %s slots)",
                c10::toString(params_.empty() ? at::kFloat : params_.front().param.scalar_type()),
                static_cast<double>(held_->host_bytes()) / (1 << 30), on_device_ ? "pinned" : "plain");
}

at::Tensor OffloadedAdamW::master_of(const at::Tensor& param) const {
  if (!streaming_ && !held_) return at::Tensor();
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].param.is_same(param)) return state_[i].master;
  return at::Tensor();
}

void OffloadedAdamW::take_gradient(size_t index, const at::Tensor& grad) {
  MT_CHECK(index < state_.size(), "OffloadedAdamW: gradient of parameter ", index, " of ", state_.size());
  if (!grad.defined()) return;
  at::NoGradGuard no_grad;
  if (step_closed_) {  // the step's first gradient of any parameter: a new accumulation
    make_gradient_buffers();
    if (pending_) {
      // The pending update reads the gradient buffers; its uploads wait for gradients_ready(), after the
      // backward that still reads the parameters.
      const auto start = std::chrono::steady_clock::now();
      workers_.wait_idle();
      waited_ms_ += ms_since(start);
    }
    for (auto& st : state_) st.has_grad = false;
    d2h_bytes_ = 0;
    step_closed_ = false;
  }
  HostState& st = state_[index];
  d2h_bytes_ += static_cast<double>(grad.numel()) * static_cast<double>(grad.element_size());
  if (on_device_) {
    stream_in(st, grad);
  } else if (st.has_grad) {
    st.grad.add_(grad);
  } else {
    st.grad.copy_(grad);
  }
  st.has_grad = true;
}

void OffloadedAdamW::stream_in(HostState& st, const at::Tensor& grad) {
  c10::impl::VirtualGuardImpl impl(device_.type());
  c10::Event produced(device_.type());
  produced.record(impl.getStream(device_));  // the gradient is final on the stream that made it
  produced.block(*d2h_);
  c10::StreamGuard on_copy_stream(*d2h_);
  grad.record_stream(*d2h_);  // the layout drops or reuses it: not before this stream read it
  const at::Tensor fp32 = grad.to(at::kFloat);  // a transient on this stream when the gradient is bf16
  if (!st.has_grad) {
    st.grad.copy_(fp32, /*non_blocking=*/true);
    return;
  }
  if (st.adding) {  // the previous micro-batch's addition still reads staging (rare: a whole micro-batch ago)
    workers_.wait_idle();
    for (auto& other : state_) other.adding = false;
  }
  if (!st.staging.defined()) st.staging = at::empty(st.grad.sizes(), st.grad.options().pinned_memory(true));
  st.staging.copy_(fp32, /*non_blocking=*/true);
  auto landed = std::make_shared<c10::Event>(device_.type());
  landed->record(*d2h_);
  st.adding = true;
  float* acc = st.grad.data_ptr<float>();
  const float* add = st.staging.data_ptr<float>();
  const int64_t n = st.grad.numel();
  for (int64_t a = 0; a < n; a += kSpan) {
    const int64_t len = std::min(kSpan, n - a);
    workers_.submit([=] {
      landed->synchronize();
      for (int64_t j = 0; j < len; ++j) acc[a + j] += add[a + j];
    });
  }
}

void OffloadedAdamW::before_reuse() {
  if (!on_device_) return;
  c10::impl::VirtualGuardImpl impl(device_.type());
  c10::Event copied(device_.type());
  copied.record(*d2h_);
  copied.block(impl.getStream(device_));
}

double OffloadedAdamW::squared_norm(size_t index) {
  const HostState& st = state_.at(index);
  if (!st.has_grad) return 0;
  const double n = st.grad.norm().item<double>();
  return n * n;
}

void OffloadedAdamW::parameters_changed() {
  at::NoGradGuard no_grad;
  finish_pending();  // its uploads would overwrite what was written
  if (on_device_) h2d_->synchronize();  // no upload may land after this read
  if (!streaming_ && !held_) {
    for (size_t i = 0; i < state_.size(); ++i) state_[i].master.copy_(params_[i].param);
    return;
  }
  // Streaming or held: checkpoints load into the host master (master_of), which the parameters are the cast of.
  const double before = h2d_bytes_;
  for (size_t i = 0; i < state_.size(); ++i) upload(i);
  h2d_bytes_ = before;
  if (on_device_) h2d_->synchronize();
}

std::map<std::string, at::Tensor> OffloadedAdamW::state_tensors() const {
  // A pending update is still writing the moments (and the master a checkpoint saves): the state is the last
  // step's once it has finished. Finishing it completes work already decided, so the state is unchanged.
  const_cast<OffloadedAdamW*>(this)->finish_pending();
  std::map<std::string, at::Tensor> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    out[params_[i].name + ".exp_avg"] = state_[i].exp_avg;
    out[params_[i].name + ".exp_avg_sq"] = state_[i].exp_avg_sq;
    out[params_[i].name + ".step"] = state_[i].step;
  }
  return out;
}

std::vector<std::pair<std::string, double>> OffloadedAdamW::step_metrics() const {
  return {{"host update ms", host_ms_}, {"D2H MB", d2h_bytes_ / 1e6}, {"H2D MB", h2d_bytes_ / 1e6}};
}

}  // namespace meshtrain::train

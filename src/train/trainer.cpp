#include "meshtrain/train/trainer.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>
#include <torch/cuda.h>

#include <chrono>
#include <cstring>
#include <filesystem>

#include "meshtrain/ckpt/checkpoint.h"
#include "meshtrain/ckpt/safetensors.h"
#include "meshtrain/comm/cpu_communicator.h"
#include "meshtrain/comm/store.h"
#include "meshtrain/comm/world_info.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"
#include "meshtrain/data/data_loader.h"
#include "meshtrain/model/generate.h"
#include "meshtrain/model/transformer.h"
#include "meshtrain/parallel/data_parallel.h"
#include "meshtrain/train/adamw.h"
#include "meshtrain/train/lr_schedule.h"
#include "meshtrain/train/metrics.h"
#include "meshtrain/train/stop_signals.h"

namespace meshtrain::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// bf16 autocast on the training device for the guard's lifetime (fp32 master weights stay fp32).
class AutocastGuard {
 public:
  AutocastGuard(bool on, at::DeviceType dev) : on_(on), dev_(dev) {
    if (!on_) return;
    prev_ = at::autocast::is_autocast_enabled(dev_);
    at::autocast::set_autocast_enabled(dev_, true);
    at::autocast::set_autocast_dtype(dev_, at::kBFloat16);
  }
  ~AutocastGuard() {
    if (!on_) return;
    at::autocast::set_autocast_enabled(dev_, prev_);
    at::autocast::clear_cache();
  }

 private:
  bool on_, prev_ = false;
  at::DeviceType dev_;
};

// Clips the global gradient norm to `max_norm` (0 disables) and returns the norm before clipping as a device
// scalar. No host sync: the scale is computed on the device, so the step keeps queueing kernels.
at::Tensor clip_gradients(const std::vector<at::Tensor>& params, double max_norm) {
  std::vector<at::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return at::zeros({});
  auto total = at::stack(at::_foreach_norm(grads, 2)).to(at::kFloat).norm();
  if (max_norm > 0) {
    at::NoGradGuard no_grad;
    auto scale = at::clamp_max(max_norm / (total + 1e-6), 1.0);
    at::_foreach_mul_(grads, scale);
  }
  return total;
}

uint32_t parameter_checksum(const std::vector<std::pair<std::string, at::Tensor>>& params) {
  uint32_t crc = 0;
  for (const auto& [name, p] : params) {
    auto c = p.detach().cpu().contiguous();
    crc = ckpt::crc32(c.data_ptr(), static_cast<size_t>(c.numel()) * c.element_size(), crc);
  }
  return crc;
}

std::string decode_bytes(const std::vector<int64_t>& tokens) {
  std::string s;
  for (int64_t t : tokens) s.push_back(t >= 0 && t < 256 ? static_cast<char>(t) : '?');
  return s;
}

}  // namespace

TrainResult run_training(const Config& cfg) {
  const auto world = comm::world_info_from_env();
  log::init({.rank = world.world_size > 1 ? world.rank : -1, .level = log::parse_level(cfg.logging.level),
             .all_ranks = cfg.logging.all_ranks});
  if (cfg.train.threads > 0) at::set_num_threads(static_cast<int>(cfg.train.threads));
  MT_USER_CHECK(!cfg.train.activation_checkpointing,
                "train.activation_checkpointing: true is not supported by this version (valid: false)");

  // Device and precision.
  const bool has_cuda = torch::cuda::is_available();
  const std::string dev_name = cfg.train.device == "auto" ? (has_cuda ? "cuda" : "cpu") : cfg.train.device;
  MT_USER_CHECK(dev_name != "cuda" || has_cuda, "train.device: given 'cuda' but no CUDA device is visible");
  const bool cuda = dev_name == "cuda";
  const at::Device device = cuda ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(world.local_rank))
                                 : at::Device(at::kCPU);
  const bool bf16 = cfg.train.dtype == "bf16" || (cfg.train.dtype == "auto" && cuda);

  // Communicator (the CPU backend stages device tensors through host memory until the NCCL backend lands).
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(cfg.parallel.timeout_s * 1000));
  comm::CommPtr comm;
  if (world.world_size > 1) {
    auto store = comm::connect_store_from_env(timeout);
    comm = comm::make_cpu_communicator(store, world.rank, world.world_size, "world", timeout);
  }
  auto barrier = [&] {
    if (comm) comm->barrier();
  };

  // Model: the same seed on every rank gives the same initial weights; the broadcast below makes it certain.
  at::manual_seed(static_cast<uint64_t>(cfg.train.seed));
  model::Transformer net(cfg.model);
  net->init_weights();
  net->to(device);
  net->train();
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (auto& item : net->named_parameters()) named.emplace_back(item.key(), item.value());

  std::vector<AdamW::Param> opt_params;
  std::vector<parallel::DataParallel::Param> dp_params;
  std::vector<at::Tensor> plain;
  for (auto& [name, p] : named) {
    const bool decay = p.dim() >= 2 && !net->is_embedding(name);
    opt_params.push_back({name, p, decay});
    dp_params.push_back({name, p});
    plain.push_back(p);
  }
  AdamW opt(opt_params, cfg.optimizer);
  LrSchedule schedule(cfg.schedule, cfg.optimizer.lr, cfg.train.steps);
  std::unique_ptr<parallel::DataParallel> dp;
  if (comm) dp = std::make_unique<parallel::DataParallel>(dp_params, comm, cfg.parallel.bucket_mb);

  // Data.
  const auto fmt = data::parse_shard_format(cfg.data.format);
  data::DataLoader train_loader({.pattern = cfg.data.train, .what = "data.train", .format = fmt,
                                 .seq_len = cfg.data.seq_len, .batch_size = cfg.train.micro_batch_size,
                                 .rank = world.rank, .world_size = world.world_size,
                                 .seed = static_cast<uint64_t>(cfg.train.seed), .shuffle = true});
  std::unique_ptr<data::DataLoader> val_loader;
  if (!cfg.data.val.empty())
    val_loader = std::make_unique<data::DataLoader>(data::LoaderOptions{
        .pattern = cfg.data.val, .what = "data.val", .format = fmt, .seq_len = cfg.data.seq_len,
        .batch_size = cfg.train.micro_batch_size, .rank = world.rank, .world_size = world.world_size,
        .seed = static_cast<uint64_t>(cfg.train.seed), .shuffle = false});

  // Checkpoints and resume.
  ckpt::CheckpointManager ckpts(cfg.checkpoint.dir, cfg.checkpoint.keep, comm);
  int64_t start_step = 0;
  std::optional<std::string> resume_from;
  if (cfg.checkpoint.resume == "auto") resume_from = ckpts.latest();
  else if (cfg.checkpoint.resume != "none") resume_from = cfg.checkpoint.resume;
  if (resume_from) {
    auto ck = ckpt::CheckpointManager::load(*resume_from);
    at::NoGradGuard no_grad;
    for (auto& [name, p] : named) {
      auto it = ck.tensors.find("model." + name);
      MT_USER_CHECK(it != ck.tensors.end(), ck.path, ": parameter '", name, "' is missing");
      MT_USER_CHECK(it->second.sizes() == p.sizes(), ck.path, ": parameter '", name, "' has shape ",
                    it->second.sizes(), ", the config's model needs ", p.sizes());
      p.copy_(it->second);
    }
    opt.load_state_tensors(ck.tensors, "optim.");
    start_step = ck.step;
    train_loader.restore({ck.state.at("data").at("epoch").get<int64_t>(),
                          ck.state.at("data").at("cursor").get<int64_t>()});
    auto gen = at::detail::getDefaultCPUGenerator();
    gen.set_state(ck.tensors.at("rng.cpu"));
    log::progress("resumed from %s at step %lld", ck.path.c_str(), static_cast<long long>(start_step));
  }
  if (dp) dp->broadcast_parameters();

  MetricsLog metrics(cfg.logging.metrics, world.rank, start_step > 0);
  const int64_t T = cfg.data.seq_len, B = cfg.train.micro_batch_size, A = cfg.train.grad_accum;
  const int64_t tokens_per_step = B * T * A * world.world_size;
  const double flops_per_token = 3.0 * net->flops_per_token(T);
  const double peak = device_peak_flops(cuda, device.index());
  log::progress("model %s: %.2fM parameters, %lld layers, d_model %lld | %s %s | world %d | %lld tokens/step | "
                "train %lld tokens (%lld windows)",
                cfg.model.family.c_str(), net->num_params() / 1e6, static_cast<long long>(cfg.model.n_layer),
                static_cast<long long>(cfg.model.d_model), device.str().c_str(), bf16 ? "bf16" : "fp32",
                world.world_size, static_cast<long long>(tokens_per_step),
                static_cast<long long>(train_loader.num_tokens()), static_cast<long long>(train_loader.num_windows()));

  auto mean_over_ranks = [&](double v) {
    if (!comm) return v;
    auto t = at::full({1}, v, at::kFloat);
    comm->all_reduce(t, comm::ReduceOp::Avg)->wait();
    return static_cast<double>(t.item<float>());
  };
  auto evaluate = [&]() -> double {
    if (!val_loader) return -1;
    torch::NoGradGuard no_grad;
    net->eval();
    val_loader->reset();
    double sum = 0;
    const int64_t n = std::min(cfg.train.eval_batches, val_loader->batches_per_epoch());
    for (int64_t i = 0; i < n; ++i) {
      auto batch = val_loader->next();
      AutocastGuard ac(bf16, device.type());
      sum += net->loss(batch.inputs.to(device), batch.targets.to(device)).item<double>();
    }
    net->train();
    return mean_over_ranks(n > 0 ? sum / static_cast<double>(n) : -1);
  };
  auto save = [&](int64_t step) {
    std::map<std::string, at::Tensor> tensors;
    for (auto& [name, p] : named) tensors["model." + name] = p;
    for (auto& [name, t] : opt.state_tensors()) tensors["optim." + name] = t;
    tensors["rng.cpu"] = at::detail::getDefaultCPUGenerator().get_state();
    const auto st = train_loader.state();
    nlohmann::json state = {{"data", {{"epoch", st.epoch}, {"cursor", st.cursor}}},
                            {"config", nlohmann::json::parse(to_json(cfg))}};
    const auto t0 = Clock::now();
    const std::string dir = ckpts.save(step, tensors, state);
    log::progress("checkpoint %s (%.2fs)", dir.c_str(), seconds_since(t0));
  };

  TrainResult result;
  result.steps_done = start_step;
  StopSignals stop_signals;
  // Every rank must stop at the same step: the highest signal number any rank saw wins (0 = none).
  auto agreed_stop_signal = [&]() -> int {
    int sig = stop_signals.pending();
    if (!comm) return sig;
    auto t = at::full({1}, sig, at::kInt);
    comm->all_reduce(t, comm::ReduceOp::Max)->wait();
    return t.item<int>();
  };
  const auto run_start = Clock::now();
  double ema_step_s = 0;
  for (int64_t step = start_step; step < cfg.train.steps; ++step) {
    const auto t0 = Clock::now();
    at::Tensor loss_sum = at::zeros({}, at::TensorOptions().device(device));  // summed on device: no sync
    for (int64_t micro = 0; micro < A; ++micro) {
      auto batch = train_loader.next();
      at::Tensor loss;
      {
        AutocastGuard ac(bf16, device.type());
        loss = net->loss(batch.inputs.to(device), batch.targets.to(device));
      }
      (loss / static_cast<double>(A)).backward();
      loss_sum += loss.detach();
    }
    if (dp) dp->average_gradients();
    const at::Tensor grad_norm_t = clip_gradients(plain, cfg.optimizer.grad_clip);
    const double lr = schedule.at(step);
    opt.step(lr);
    opt.zero_grad();
    if (cuda) torch::cuda::synchronize(device.index());
    const double step_s = seconds_since(t0);
    // The first step pays for warm-up (allocations, thread start); the ETA starts from the second.
    ema_step_s = step <= start_step + 1 ? step_s : 0.9 * ema_step_s + 0.1 * step_s;

    const int64_t done = step + 1;
    const bool last = done == cfg.train.steps;
    const bool log_now = (cfg.logging.every > 0 && done % cfg.logging.every == 0) || last || step == start_step;
    if (log_now) {
      const double loss = mean_over_ranks(loss_sum.item<double>() / static_cast<double>(A));
      const double grad_norm = grad_norm_t.item<double>();
      if (step == start_step) result.first_loss = loss;
      result.last_loss = loss;
      const double tok_s = static_cast<double>(tokens_per_step) / step_s;
      const double mfu = peak > 0 ? tok_s * flops_per_token / (peak * world.world_size) : -1;
      const double eta = ema_step_s * static_cast<double>(cfg.train.steps - done);
      log::progress("step %6lld/%lld | loss %.4f | lr %.2e | grad norm %.3f | %.0f tok/s%s | %.0f ms/step | "
                    "ETA %s",
                    static_cast<long long>(done), static_cast<long long>(cfg.train.steps), loss, lr, grad_norm,
                    tok_s, mfu >= 0 ? log::sprintf(" | MFU %.1f%%", 100 * mfu).c_str() : "", 1000 * step_s,
                    format_duration(eta).c_str());
      nlohmann::json rec = {{"step", done},        {"loss", loss},         {"lr", lr},
                            {"grad_norm", grad_norm}, {"tokens_per_s", tok_s}, {"step_time_s", step_s},
                            {"tokens", done * tokens_per_step},
                            {"elapsed_s", seconds_since(run_start)},
                            {"peak_memory_bytes", peak_memory_bytes(cuda, device.index())}};
      if (mfu >= 0) rec["mfu"] = mfu;
      metrics.write(rec);
    }
    if ((cfg.train.eval_every > 0 && done % cfg.train.eval_every == 0) || last) {
      const double val = evaluate();
      if (val >= 0) {
        result.last_val_loss = val;
        log::progress("step %6lld | validation loss %.4f", static_cast<long long>(done), val);
        metrics.write({{"step", done}, {"val_loss", val}});
      }
    }
    const bool saved = (cfg.checkpoint.every > 0 && done % cfg.checkpoint.every == 0 && !last) ||
                       (last && cfg.checkpoint.save_final);
    if (saved) save(done);
    result.steps_done = done;
    if (const int sig = agreed_stop_signal(); sig != 0 && !last) {
      log::progress("stop signal %d (%s) at step %lld: saving a checkpoint and exiting", sig, strsignal(sig),
                    static_cast<long long>(done));
      if (!saved) save(done);
      result.stop_signal = sig;
      break;
    }
  }

  result.param_checksum = parameter_checksum(named);
  // Every rank prints its own: data-parallel replicas must hold bit-identical parameters.
  log::info("parameter checksum %08x after step %lld", result.param_checksum,
            static_cast<long long>(result.steps_done));
  if (cfg.train.sample_tokens > 0 && world.rank == 0 && result.stop_signal == 0) {
    std::vector<int64_t> prompt;
    for (unsigned char c : cfg.train.sample_prompt.empty() ? std::string("\n") : cfg.train.sample_prompt)
      prompt.push_back(c);
    model::SampleOptions so{.max_new_tokens = cfg.train.sample_tokens, .temperature = 0.8, .top_k = 40,
                            .seed = static_cast<uint64_t>(cfg.train.seed)};
    auto out = model::generate(net, prompt, so);
    log::progress("sample (temperature 0.8, top-k 40):\n%s", decode_bytes(out).c_str());
  }
  barrier();
  return result;
}

}  // namespace meshtrain::train

// tp_worker: tensor parallelism vs the single-process model, one process per tensor-parallel rank (started by
// meshrun; every rank of the job forms the one TP group). Each rank also builds the plain model from the same
// seed, so the reference is computed in-process: for N AdamW steps on the same batches, the TP model's loss,
// every parameter's gradient block and, at the end, every parameter block and the gathered full logits must
// match the reference's, and greedy decoding through the KV cache (sequence parallelism switched off for it)
// must pick the same tokens. The TP model is built on the meta device, so only this rank's blocks are ever
// allocated and initialised. Tolerances (fp32; TP sums partial matmuls in another order): loss 1e-5 relative;
// per tensor, gradients max|Δ| ≤ 1e-4 · max|ref| + 1e-8 (checked every step, so a wrong reduction or a bias
// counted twice fails here), parameters max|Δ| ≤ 1e-4 · max|ref| + 1e-5 (= lr/100: Adam turns a gradient
// element that is rounding noise — attn.wk.bias's is 0 in exact arithmetic — into a step of up to ~lr·g/eps),
// gathered logits 1e-4 · max|ref|. Seen on x86-64: losses within 2e-7 relative, gradients ≲ 2e-5 relative.
// Each rank prints the worst error as a fraction of its tolerance. Exit 0 when every check passes.
//   tp_worker --family gpt2|llama [--sp] [--ac] [--steps N] [--n-kv-head K]
//   --ac: activation checkpointing on the TP model (applied after TP, as parallelize() does): the recomputed
//         blocks issue their collectives again inside backward.
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "meshtrain/comm/cpu_communicator.h"
#include "meshtrain/comm/store.h"
#include "meshtrain/comm/world_info.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"
#include "meshtrain/model/activation_checkpoint.h"
#include "meshtrain/model/generate.h"
#include "meshtrain/parallel/tp/tensor_parallel.h"
#include "meshtrain/train/adamw.h"
#include "support/tiny_model.h"

using namespace meshtrain;

namespace {

struct Args {
  std::string family = "gpt2";
  bool sp = false;
  bool ac = false;
  int64_t steps = 4;
  int64_t n_kv_head = 0;  // 0: the family's default below
};

// gpt2: tied embeddings, biases, MHA. llama: untied head, GQA (8 query heads over 4 key/value heads), SwiGLU.
// vocab 250 splits unevenly over 4 ranks (62/63 rows).
Config config(const Args& a, int tp) {
  Config c;
  c.model = testing_support::tiny_model({.family = a.family, .vocab_size = 250, .n_head = 8,
                                         .n_kv_head = a.n_kv_head > 0 ? a.n_kv_head : (a.family == "llama" ? 4 : 8),
                                         .d_model = 64, .d_ff = 128, .rope_theta = 10000});
  c.parallel.tp = tp;
  c.parallel.sequence_parallel = a.sp;
  c.data.seq_len = 8;
  c.train.device = TrainDevice::cpu;
  c.train.seed = 1234;
  // Adam's update is g / (√v + eps): for a gradient element near 0 — a near-cancellation whose fp32 value is
  // noise of the summation order — its derivative is lr / eps. The default eps (1e-8) would blow that noise up
  // into real parameter differences (up to 2·lr) after the first step; eps 1e-6 and lr 1e-3 keep the
  // comparison about tensor parallelism, not about Adam's conditioning.
  c.optimizer.lr = 1e-3;
  c.optimizer.eps = 1e-6;
  c.data.train = {kSyntheticData};  // the worker draws its own tokens
  return c;
}

std::vector<train::AdamW::Param> adam_params(model::TransformerImpl& m) {
  std::vector<train::AdamW::Param> out;
  for (auto& item : m.named_parameters())
    out.push_back({item.key(), item.value(), item.value().dim() >= 2 && !m.is_embedding(item.key())});
  return out;
}

// max |got - want| over the tensor against rtol · max|want| + atol; returns the fraction of the tolerance used.
// Tensor-wise rather than element-wise: fp32 sums in another order err relative to the terms' size, and an
// element that is a near-cancellation of large terms (a bias gradient near 0) says nothing by itself.
double compare(const at::Tensor& got, const at::Tensor& want, double rtol, double atol, const std::string& what) {
  MT_CHECK(got.sizes() == want.sizes(), what, ": shape ", got.sizes(), " vs ", want.sizes());
  if (want.numel() == 0) return 0.0;
  const double diff = (got - want).abs().max().item<double>(), scale = want.abs().max().item<double>();
  const double tol = rtol * scale + atol;
  MT_CHECK(diff <= tol, what, ": max |Δ| = ", diff, " beyond ", rtol, " · max|ref| (", scale, ") + ", atol);
  return diff / tol;
}

at::Tensor block_of(const at::Tensor& full, const ShardedTensor& s) {
  auto b = full;
  for (int64_t d = 0; d < full.dim(); ++d) b = b.narrow(d, s.offsets[d], s.local.size(d));
  return b;
}

int run(const Args& a, comm::CommPtr tp) {
  const auto cfg = config(a, tp->size());
  validate(cfg, static_cast<int>(tp->size()));  // as the trainer does before it builds a layout
  model::Transformer ref(cfg.model);
  ref->init_weights(cfg.train.seed);
  model::Transformer net(cfg.model, at::TensorOptions().device(at::kMeta));
  auto layout = parallel::apply_tensor_parallel(*net, tp, cfg);
  if (a.ac) net->set_block_runner(model::activation_checkpointing_runner());
  train::AdamW ref_opt(adam_params(*ref), cfg.optimizer), opt(adam_params(*net), cfg.optimizer);
  const auto ref_params = ref->named_parameters();

  double max_loss = 0, max_grad = 0, max_param = 0, max_logits = 0;
  auto tokens = at::Tensor();
  for (int64_t step = 0; step < a.steps; ++step) {
    at::manual_seed(100 + step);  // the same batch on every rank and for the reference
    tokens = at::randint(0, cfg.model.vocab_size, {2, cfg.data.seq_len}, at::kLong);
    auto targets = at::randint(0, cfg.model.vocab_size, {2, cfg.data.seq_len}, at::kLong);
    auto want = ref->loss(tokens, targets);
    auto got = net->loss(tokens, targets);
    want.backward();
    got.backward();
    layout->finish_gradients(*net);  // sequence parallelism: norms' and row biases' partial gradients
    const double w = want.item<double>(), g = got.item<double>();
    MT_CHECK(std::abs(g - w) <= 1e-5 * std::abs(w), "step ", step, ": loss ", g, " vs reference ", w);
    max_loss = std::max(max_loss, std::abs(g - w));
    for (const auto& s : layout->sharded_parameters(*net))
      max_grad = std::max(max_grad, compare(s.local.grad(), block_of(ref_params[s.name].grad(), s), 1e-4, 1e-8,
                                            cat("step ", step, " grad ", s.name)));
    ref_opt.step(cfg.optimizer.lr);
    opt.step(cfg.optimizer.lr);
    ref_opt.zero_grad();
    opt.zero_grad();
    if (tp->rank() == 0) std::printf("step %lld loss %.6f (reference %.6f)\n", static_cast<long long>(step), g, w);
  }
  for (const auto& s : layout->sharded_parameters(*net))
    max_param = std::max(max_param, compare(s.local.detach(), block_of(ref_params[s.name].detach(), s), 1e-4, 1e-5,
                                            cat("final ", s.name)));
  {  // Full logits gathered from the vocabulary blocks (the path of evaluation and generation).
    at::NoGradGuard no_grad;
    max_logits = compare(net->forward(tokens), ref->forward(tokens), 1e-4, 0, "gathered logits");
  }
  {  // Greedy decoding through the KV cache (local heads per rank) picks the reference's tokens; under sequence
     // parallelism with it switched off, as generation runs it.
    parallel::TensorParallel::SequenceParallelOff plain_tp(layout.get());
    model::SampleOptions greedy;
    greedy.max_new_tokens = 6;
    greedy.temperature = 0;
    const std::vector<int64_t> prompt{3, 141, 59, 26};
    const auto want = model::generate(ref, prompt, greedy), got = model::generate(net, prompt, greedy);
    MT_CHECK(got == want, "greedy decoding under TP differs from the reference");
  }
  std::printf("tp_worker rank %d/%d family=%s sp=%d ac=%d steps=%lld: max |Δloss| %.3g; of tolerance: "
              "grads %.2f, params %.2f, logits %.2f: OK\n",
              tp->rank(), tp->size(), a.family.c_str(), a.sp ? 1 : 0, a.ac ? 1 : 0, static_cast<long long>(a.steps),
              max_loss, max_grad, max_param, max_logits);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (s == "--family" && i + 1 < argc) a.family = argv[++i];
    else if (s == "--sp") a.sp = true;
    else if (s == "--ac") a.ac = true;
    else if (s == "--steps" && i + 1 < argc) a.steps = std::stoll(argv[++i]);
    else if (s == "--n-kv-head" && i + 1 < argc) a.n_kv_head = std::stoll(argv[++i]);
    else {
      std::fprintf(stderr, "usage: tp_worker --family gpt2|llama [--sp] [--ac] [--steps N] [--n-kv-head K]\n");
      return 2;
    }
  }
  try {
    const auto world = comm::world_info_from_env();
    log::init(log::Options{.rank = world.rank});
    at::set_num_threads(1);  // ranks share the cores
    auto store = comm::connect_store_from_env(std::chrono::milliseconds(60000));
    auto tp = comm::make_cpu_communicator(store, world.rank, world.world_size, "tp", std::chrono::milliseconds(60000));
    return run(a, tp);
  } catch (const UserError& e) {
    std::fprintf(stderr, "tp_worker: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tp_worker: error: %s\n", e.what());
    return 1;
  }
}

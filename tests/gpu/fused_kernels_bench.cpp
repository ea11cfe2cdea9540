// Each fused kernel against the composite ATen ops it replaces, forward + backward on one GPU, bf16, at the
// training benchmark's shapes (GPT-2 124M b32 × T1024, Llama 3.2 1B b8 × T2048): mean time per call and the
// peak memory allocated during the calls above what existed before. Prints a table; writes JSON to argv[1]
// (default fused_kernels_bench.json). The FP8 casts (model/kernels/fp8_cast.h) likewise, at the Llama 3.1 8B shape;
// GPT-2's MLP and a biased projection through the cuBLASLt epilogues (gelu_mlp.h, bias_linear.h); the bias
// gradient's column sum (column_sum.h), a linear on fp32 master weights under autocast (master_linear.h), and
// the weight gradient into fp32 four ways (lt_matmul.h) at every projection shape of the three bench models. AdamW's
// update (fused_adamw.h) against ATen's fused AdamW on one Llama 3.1 8B MLP weight and on its embedding, beside a
// copy of as many bytes (op "copy_ref": what the GPU's memory moves, read and write, at its best), with TB/s.
// Exit code 77 without a GPU or without the kernels in the build.
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>
#include <torch/cuda.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#if MESHTRAIN_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include "meshtrain/core/error.h"
#include "meshtrain/model/linear/bias_linear.h"
#include "meshtrain/model/kernels/column_sum.h"
#include "meshtrain/model/kernels/fused_adamw.h"
#include "meshtrain/model/kernels/fp8_cast.h"
#include "meshtrain/model/kernels/fused_add_norm.h"
#include "meshtrain/model/kernels/fused_cross_entropy.h"
#include "meshtrain/model/linear/fused_linear_gelu.h"
#include "meshtrain/model/kernels/fused_rope.h"
#include "meshtrain/model/kernels/fused_swiglu.h"
#include "meshtrain/model/linear/gelu_mlp.h"
#include "meshtrain/model/kernels/lt_matmul.h"
#include "meshtrain/model/linear/master_linear.h"
#include "meshtrain/model/linear/residual_linear.h"
#include "meshtrain/model/rotary.h"

using namespace meshtrain;

namespace {

struct Row {
  std::string op, shape, impl;
  double ms = 0;
  double extra_gib = 0;
};

int64_t allocated(bool peak) {
#if MESHTRAIN_WITH_CUDA
  const auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
  const auto& a = s.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
  return peak ? a.peak : a.current;
#else
  (void)peak;
  return 0;
#endif
}

Row measure(const std::string& op, const std::string& shape, const std::string& impl,
            const std::function<void()>& step) {
  for (int i = 0; i < 3; ++i) step();  // warm-up: allocator, kernels loaded
  torch::cuda::synchronize();
#if MESHTRAIN_WITH_CUDA
  c10::cuda::CUDACachingAllocator::resetPeakStats(0);
#endif
  const int64_t base = allocated(false);
  const int iters = 10;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) step();
  torch::cuda::synchronize();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {op, shape, impl, 1e3 * s / iters, static_cast<double>(allocated(true) - base) / (1 << 30)};
}

// A forward under bf16 autocast as a trainer step runs it (autocast's cast cache cleared after, so each step
// casts the fp32 masters again), then its backward from dy.
void autocast_forward_backward(const std::function<at::Tensor()>& forward, const at::Tensor& dy) {
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
  auto y = forward();
  at::autocast::set_autocast_enabled(at::kCUDA, false);
  at::autocast::clear_cache();
  y.backward(dy);
}

}  // namespace

int main(int argc, char** argv) {
#if !MESHTRAIN_CUDA_KERNELS
  std::puts("built without the fused CUDA kernels: nothing to measure");
  return 77;
#endif
  if (!at::hasCUDA() || at::getNumGPUs() == 0) {
    std::puts("no GPU visible: skipped");
    return 77;
  }
  const std::string json_path = argc > 1 ? argv[1] : "fused_kernels_bench.json";
  const auto bf16 = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  std::vector<Row> rows;

  // Loss on full logits. The fused run overwrites the buffer with its gradient each call (as in training,
  // where the head's matmul writes fresh logits); values stay finite, so the timing is representative.
  for (auto [N, V, name] : {std::tuple<int64_t, int64_t, const char*>{32768, 50257, "gpt2 32768x50257"},
                            {16384, 128256, "llama 16384x128256"}}) {
    auto buf = at::randn({N, V}, bf16);
    auto t = at::randint(0, V, {N}, bf16.dtype(at::kLong));
    rows.push_back(measure("cross_entropy", name, "composite", [&] {
      auto x = buf.detach().requires_grad_(true);
      at::cross_entropy_loss(x.to(at::kFloat), t).backward();
    }));
    rows.push_back(measure("cross_entropy", name, "fused", [&] {
      auto x = buf.detach().requires_grad_(true);
      model::fused_cross_entropy(x, t, -100, /*in_place=*/true).backward();
    }));
  }

  // RoPE on Llama 3.2 1B's q (32 heads) and k (8 heads), [B, T, H, 64] viewed as [B, H, T, 64].
  {
    const int64_t B = 8, T = 2048, hd = 64;
    auto inv = model::rope_inv_freq(hd, 500000.0, model::RopeScaling{.factor = 32.0}).to(at::kCUDA);
    auto [cos, sin] = model::rope_tables(inv, 0, T);
    for (int64_t H : {32, 8}) {
      auto x0 = at::randn({B, T, H, hd}, bf16);
      auto dy = at::randn({B, H, T, hd}, bf16);
      const std::string name = "8x" + std::to_string(H) + "x2048x64";
      rows.push_back(measure("rope", name, "composite", [&] {
        auto x = x0.detach().requires_grad_(true);
        model::apply_rope(x.transpose(1, 2), cos, sin).backward(dy);
      }));
      rows.push_back(measure("rope", name, "fused", [&] {
        auto x = x0.detach().requires_grad_(true);
        model::fused_rope(x.transpose(1, 2), cos, sin).backward(dy);
      }));
    }
  }

  // SwiGLU at Llama 3.2 1B's MLP width: [16384 tokens, 8192].
  {
    auto g0 = at::randn({16384, 8192}, bf16), u0 = at::randn({16384, 8192}, bf16), dy = at::randn({16384, 8192}, bf16);
    rows.push_back(measure("swiglu", "16384x8192", "composite", [&] {
      auto g = g0.detach().requires_grad_(true), u = u0.detach().requires_grad_(true);
      (at::silu(g) * u).backward(dy);
    }));
    rows.push_back(measure("swiglu", "16384x8192", "fused", [&] {
      auto g = g0.detach().requires_grad_(true), u = u0.detach().requires_grad_(true);
      model::fused_swiglu(g, u).backward(dy);
    }));
  }

  // Residual add + norm as the trainer runs it under bf16 autocast: fp32 residual stream, bf16 branch output,
  // fp32 norm weights, the normalised output read by bf16 linears (the composite's cast to bf16 counted).
  // GPT-2 124M (LayerNorm, 32768 tokens × 768) and Llama 3.2 1B (RMSNorm, 16384 × 2048).
  for (auto [N, dim, is_rms, name] : {std::tuple<int64_t, int64_t, bool, const char*>{32768, 768, false, "ln 32768x768"},
                                      {16384, 2048, true, "rms 16384x2048"}}) {
    const int64_t D = dim;  // plain copies: the lambdas below capture them
    const bool rms = is_rms;
    const auto f32 = bf16.dtype(at::kFloat);
    auto x0 = at::randn({N, D}, f32), r0 = at::randn({N, D}, bf16);
    auto w = at::ones({D}, f32).requires_grad_(true), b = rms ? at::Tensor() : at::zeros({D}, f32).requires_grad_(true);
    auto dh = at::randn({N, D}, f32), dy = at::randn({N, D}, bf16);
    auto under_autocast = [](const std::function<std::pair<at::Tensor, at::Tensor>()>& f) {
      at::autocast::set_autocast_enabled(at::kCUDA, true);
      at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
      auto out = f();
      at::autocast::set_autocast_enabled(at::kCUDA, false);
      return out;
    };
    rows.push_back(measure("add_norm", name, "composite", [&] {
      auto x = x0.detach().requires_grad_(true), r = r0.detach().requires_grad_(true);
      auto [h, y] = under_autocast([&] {
        auto h = x + r;
        auto y = rms ? at::rms_norm(h, {D}, w, 1e-5) : at::layer_norm(h, {D}, w, b, 1e-5);
        return std::pair{h, y.to(at::kBFloat16)};
      });
      torch::autograd::backward({h, y}, {dh, dy});
    }));
    rows.push_back(measure("add_norm", name, "fused", [&] {
      auto x = x0.detach().requires_grad_(true), r = r0.detach().requires_grad_(true);
      auto [h, y] = under_autocast([&] { return model::fused_add_norm(x, r, w, b, rms, 1e-5); });
      torch::autograd::backward({h, y}, {dh, dy});
    }));
    // The block's first norm: x feeds it and the residual add, so its gradient is a sum of two.
    rows.push_back(measure("norm_pass", name, "composite", [&] {
      auto x = x0.detach().requires_grad_(true);
      auto [xs, y] = under_autocast([&] {
        auto y = rms ? at::rms_norm(x, {D}, w, 1e-5) : at::layer_norm(x, {D}, w, b, 1e-5);
        return std::pair{x.view_as(x), y.to(at::kBFloat16)};
      });
      torch::autograd::backward({xs, y}, {dh, dy});
    }));
    rows.push_back(measure("norm_pass", name, "fused", [&] {
      auto x = x0.detach().requires_grad_(true);
      auto [xs, y] = under_autocast([&] { return model::fused_norm_pass(x, w, b, rms, 1e-5); });
      torch::autograd::backward({xs, y}, {dh, dy});
    }));
  }

  // GPT-2 124M's MLP input layer: bias + GELU with the matmul, [32768 tokens, 768] → 3072, bf16.
  {
    auto x0 = at::randn({32768, 768}, bf16), dy = at::randn({32768, 3072}, bf16);
    auto w = (at::randn({3072, 768}, bf16) * 0.03).requires_grad_(true), b = at::zeros({3072}, bf16).requires_grad_(true);
    rows.push_back(measure("linear_gelu", "32768x768x3072", "composite", [&] {
      auto x = x0.detach().requires_grad_(true);
      at::gelu(at::linear(x, w, b), "tanh").backward(dy);
    }));
    rows.push_back(measure("linear_gelu", "32768x768x3072", "fused", [&] {
      auto x = x0.detach().requires_grad_(true);
      model::fused_linear_gelu(x, w, b).backward(dy);
    }));
  }

  // GPT-2 124M's whole MLP through the cuBLASLt epilogues (model/linear/gelu_mlp.h) against linear → GELU → linear,
  // and one of its attention projections (model/linear/bias_linear.h: the bias gradient in the weight-gradient GEMM).
  {
    auto x0 = at::randn({32768, 768}, bf16), dy = at::randn({32768, 768}, bf16);
    auto w1 = (at::randn({3072, 768}, bf16) * 0.03).requires_grad_(true);
    auto w2 = (at::randn({768, 3072}, bf16) * 0.02).requires_grad_(true);
    auto b1 = at::zeros({3072}, bf16).requires_grad_(true), b2 = at::zeros({768}, bf16).requires_grad_(true);
    rows.push_back(measure("gelu_mlp", "32768x768x3072", "composite", [&] {
      auto x = x0.detach().requires_grad_(true);
      at::linear(at::gelu(at::linear(x, w1, b1), "tanh"), w2, b2).backward(dy);
    }));
    rows.push_back(measure("gelu_mlp", "32768x768x3072", "fused", [&] {
      auto x = x0.detach().requires_grad_(true);
      model::gelu_mlp(x, w1, b1, w2, b2).backward(dy);
    }));
    auto wq = (at::randn({768, 768}, bf16) * 0.03).requires_grad_(true);
    auto bq = at::zeros({768}, bf16).requires_grad_(true);
    rows.push_back(measure("bias_linear", "32768x768x768", "composite", [&] {
      at::linear(x0.detach().requires_grad_(true), wq, bq).backward(dy);
    }));
    rows.push_back(measure("bias_linear", "32768x768x768", "fused", [&] {
      model::bias_linear(x0.detach().requires_grad_(true), wq, bq).backward(dy);
    }));
  }

  // GPT-2's MLP piece by piece (bf16, 32768 tokens): each cuBLASLt epilogue against the GEMM alone and the
  // GEMM with the separate ops it replaces, to see which epilogue pays.
  {
    using model::lt::Epilogue;
    const auto x = at::randn({32768, 768}, bf16), dy = at::randn({32768, 768}, bf16);
    const auto w1 = at::randn({3072, 768}, bf16) * 0.03, w2 = at::randn({768, 3072}, bf16) * 0.02;
    const auto b1 = at::zeros({3072}, bf16);
    auto pre = at::randn({32768, 3072}, bf16), h = at::empty_like(pre), dpre = at::empty_like(pre);
    auto db = at::empty({3072}, bf16);
    const std::string shape = "32768x768x3072";
    auto lt = [](const model::lt::Gemm& g) { MT_CHECK(model::lt::run(g), "no cuBLASLt kernel"); };
    rows.push_back(measure("mlp_fc_forward", shape, "addmm", [&] { (void)at::addmm(b1, x, w1.t()); }));
    rows.push_back(measure("mlp_fc_forward", shape, "addmm+gelu", [&] {
      (void)at::gelu(at::addmm(b1, x, w1.t()), "tanh");
    }));
    rows.push_back(measure("mlp_fc_forward", shape, "lt-gelu-aux-bias", [&] {
      lt({.a = x, .b = w1, .trans_b = true, .out = h, .epilogue = Epilogue::kGeluAuxBias, .bias = b1, .aux = pre});
    }));
    rows.push_back(measure("mlp_gelu_dgrad", shape, "mm", [&] { (void)dy.mm(w2); }));
    rows.push_back(measure("mlp_gelu_dgrad", shape, "mm+gelu_backward+column_sum", [&] {
      (void)model::column_sum(at::gelu_backward(dy.mm(w2), pre, "tanh"), at::kFloat);
    }));
    rows.push_back(measure("mlp_gelu_dgrad", shape, "lt-dgelu+column_sum", [&] {
      lt({.a = dy, .b = w2, .out = dpre, .epilogue = Epilogue::kDGelu, .aux = pre});
      (void)model::column_sum(dpre, at::kFloat);
    }));
    rows.push_back(measure("mlp_gelu_dgrad", shape, "lt-dgelu-bgrad", [&] {
      lt({.a = dy, .b = w2, .out = dpre, .epilogue = Epilogue::kDGeluBGrad, .bias = db, .aux = pre});
    }));
    auto dw2 = at::empty({768, 3072}, bf16.dtype(at::kFloat)), db2 = at::empty({768}, dw2.options());
    rows.push_back(measure("mlp_proj_param_grads", "32768x768x3072 fp32", "lt+column_sum", [&] {
      lt({.a = dy, .trans_a = true, .b = h, .out = dw2});
      (void)model::column_sum(dy, at::kFloat);
    }));
    rows.push_back(measure("mlp_proj_param_grads", "32768x768x3072 fp32", "lt-bgradb", [&] {
      if (!model::lt::run({.a = dy, .trans_a = true, .b = h, .out = dw2, .epilogue = Epilogue::kBGradB, .bias = db2}))
        std::puts("mlp_proj_param_grads: no fp32 BGRADB kernel");
    }));
  }

  // GPT-2's MLP as a block runs it (fp32 masters under bf16 autocast, the fp32 residual added), forward +
  // backward: the default path (fused_linear_gelu, then residual_linear) against gelu_mlp with the residual
  // (train.gemm_epilogues).
  {
    const auto f32 = bf16.dtype(at::kFloat);
    const auto x0 = at::randn({32768, 768}, f32), r0 = at::randn({32768, 768}, f32);
    const auto dy = at::randn({32768, 768}, f32);
    auto w1 = (at::randn({3072, 768}, f32) * 0.03).requires_grad_(true), b1 = at::zeros({3072}, f32).requires_grad_(true);
    auto w2 = (at::randn({768, 3072}, f32) * 0.02).requires_grad_(true), b2 = at::zeros({768}, f32).requires_grad_(true);
    auto mlp_step = [&](bool one_function) {
      auto x = x0.detach().requires_grad_(true), r = r0.detach().requires_grad_(true);
      autocast_forward_backward([&] {
        return one_function ? model::gelu_mlp(x, w1, b1, w2, b2, r)
                            : model::residual_linear(model::fused_linear_gelu(x, w1, b1), w2, b2, r);
      }, dy);
    };
    rows.push_back(measure("mlp_block", "32768x768x3072 +r", "linear_gelu+residual_linear", [&] { mlp_step(false); }));
    rows.push_back(measure("mlp_block", "32768x768x3072 +r", "gelu_mlp", [&] { mlp_step(true); }));
  }

  // The bias gradient alone, GPT-2's [32768 tokens, 768] bf16 ∂y: ATen's sum against the column-sum kernel
  // (model/kernels/column_sum.h), fp32 out as an fp32 master bias takes it.
  {
    const auto dy = at::randn({32768, 768}, bf16);
    rows.push_back(measure("bias_grad", "32768x768", "composite", [&] { (void)dy.sum(0).to(at::kFloat); }));
    rows.push_back(measure("bias_grad", "32768x768", "fused", [&] { (void)model::column_sum(dy, at::kFloat); }));
  }

  // A linear on fp32 master weights under bf16 autocast, forward + backward, as the trainer runs it:
  // at::linear (bf16 ∂W, then the cast backward's copy to fp32; ATen's bias sum) against master_linear (∂W
  // written in fp32 by the GEMM, the column sum for ∂b). GPT-2's biased projection; Llama 3.2 1B's w1.
  for (auto [N, in, out, bias, name] : {std::tuple<int64_t, int64_t, int64_t, bool, const char*>{
                                            32768, 768, 768, true, "32768x768x768+b"},
                                        {16384, 2048, 8192, false, "16384x2048x8192"}}) {
    const auto f32 = bf16.dtype(at::kFloat);
    auto x0 = at::randn({N, in}, f32), dy = at::randn({N, out}, bf16);
    auto w = (at::randn({out, in}, f32) * 0.03).requires_grad_(true);
    auto b = bias ? at::zeros({out}, f32).requires_grad_(true) : at::Tensor();
    auto autocast_step = [&](const std::function<at::Tensor(const at::Tensor&)>& linear) {
      auto x = x0.detach().requires_grad_(true);
      autocast_forward_backward([&] { return linear(x); }, dy);
    };
    rows.push_back(measure("master_linear", name, "composite", [&] {
      autocast_step([&](const at::Tensor& x) { return at::linear(x, w, b); });
    }));
    rows.push_back(measure("master_linear", name, "fused", [&] {
      autocast_step([&](const at::Tensor& x) { return model::master_linear(x, w, b); });
    }));
  }

  // The weight gradient of an fp32 master, ∂W = ∂yᵀ·x from bf16 operands, for each projection shape of the
  // three bench models (rows K = tokens of a micro-batch): the bf16 GEMM then a cast to fp32 (what autocast's
  // linear did), cuBLASLt into fp32 with its heuristic's first pick and with train.gemm_tuning's timed pick
  // (model/kernels/lt_matmul.h), and ATen's mm with an fp32 out_dtype (cuBLAS's own kernel choice).
  for (auto [K, M, N, name] : {std::tuple<int64_t, int64_t, int64_t, const char*>{32768, 768, 768, "gpt2 qkvo"},
                               {32768, 3072, 768, "gpt2 fc"},
                               {32768, 768, 3072, "gpt2 proj"},
                               {16384, 2048, 2048, "l1b q,o"},
                               {16384, 512, 2048, "l1b k,v"},
                               {16384, 8192, 2048, "l1b w1,w3"},
                               {16384, 2048, 8192, "l1b w2"},
                               {8192, 14336, 4096, "l8b w1,w3"},
                               {8192, 4096, 14336, "l8b w2"}}) {
    const auto dy = at::randn({K, M}, bf16), x = at::randn({K, N}, bf16);
    auto dw = at::empty({M, N}, bf16.dtype(at::kFloat));
    const std::string shape = std::string(name) + " " + std::to_string(M) + "x" + std::to_string(N);
    rows.push_back(measure("weight_grad", shape, "composite", [&] { (void)dy.t().mm(x).to(at::kFloat); }));
    for (bool tune : {false, true}) {
      model::lt::set_tuning(tune);
      rows.push_back(measure("weight_grad", shape, tune ? "lt-tuned" : "lt", [&] {
        MT_CHECK(model::lt::run({.a = dy, .trans_a = true, .b = x, .out = dw}), "no cuBLASLt kernel");
      }));
    }
    model::lt::set_tuning(false);
    rows.push_back(measure("weight_grad", shape, "mm-fp32", [&] { (void)at::mm(dy.t(), x, at::kFloat); }));
  }

  // FP8 casts of train.fp8 at the Llama 3.1 8B shape (mb 4 × T 2048): an activation [8192, 4096] and the MLP's
  // [8192, 14336] in bf16, a weight [14336, 4096] in fp32; both copies (row-major and transposed) each.
  for (auto [R, C, dt, name] : {std::tuple<int64_t, int64_t, at::ScalarType, const char*>{
                                    8192, 4096, at::kBFloat16, "8192x4096 bf16"},
                                {8192, 14336, at::kBFloat16, "8192x14336 bf16"},
                                {14336, 4096, at::kFloat, "14336x4096 fp32"}}) {
    const auto t = at::randn({R, C}, bf16.dtype(dt));
    for (auto [s, op] :
         {std::pair{Fp8Scaling::tensorwise, "fp8_cast_tw"}, std::pair{Fp8Scaling::rowwise, "fp8_cast_rw"}}) {
      rows.push_back(measure(op, name, "composite", [&, s = s] {
        (void)model::fp8_cast_composite(t, s, at::kFloat8_e4m3fn, model::Fp8Copies::both);
      }));
      rows.push_back(measure(op, name, "fused", [&, s = s] {
        (void)model::fp8_cast(t, s, at::kFloat8_e4m3fn, model::Fp8Copies::both);
      }));
    }
  }

  // AdamW: p, g, m, v read and p, m, v written, 28 bytes an element; the copy moves 28 bytes an element too
  // (14 read, 14 written). Each row's TB/s printed as it is measured.
  for (auto [n, name] :
       {std::pair<int64_t, const char*>{14336LL * 4096, "14336x4096"}, {128256LL * 4096, "128256x4096"}}) {
    const auto f32 = bf16.dtype(at::kFloat);
    std::vector<at::Tensor> p{at::randn({n}, f32)}, g{at::randn({n}, f32) * 1e-3}, m{at::zeros({n}, f32)},
        v{at::zeros({n}, f32)}, st{at::ones({}, f32)};
    const auto tbs = [n = n](double ms) { return 28.0 * static_cast<double>(n) / (ms * 1e-3) / 1e12; };
    const auto src = at::empty({n * 7 / 2}, f32), dst = at::empty_like(src);
    Row copy = measure("adamw", name, "copy_ref", [&] { dst.copy_(src); });
    Row aten = measure("adamw", name, "composite", [&] {
      at::_fused_adamw_(p, g, m, v, {}, st, 1e-4, 0.9, 0.95, 0.1, 1e-8, false, false, std::nullopt, std::nullopt);
    });
    Row own = measure("adamw", name, "fused", [&] {
      MT_CHECK(model::fused_adamw({p, g, m, v, st}, {.lr = 1e-4, .beta2 = 0.95, .weight_decay = 0.1}, {}, {}),
               "fused_adamw did not take the tensors");
    });
    for (Row* r : {&copy, &aten, &own}) {
      std::printf("adamw %s %s: %.2f TB/s\n", name, r->impl.c_str(), tbs(r->ms));
      rows.push_back(*r);
    }
  }

  std::printf("%-14s %-24s %-10s %10s %12s %8s\n", "op", "shape", "impl", "ms", "extra GiB", "speedup");
  std::ofstream js(json_path);
  js << "[\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    // Against the same op and shape's composite row (the last one before this row).
    double speedup = 1.0;
    for (size_t j = i; j-- > 0;)
      if (rows[j].impl == "composite" && rows[j].op == r.op && rows[j].shape == r.shape) {
        speedup = rows[j].ms / r.ms;
        break;
      }
    std::printf("%-14s %-24s %-10s %10.3f %12.3f %8.2f\n", r.op.c_str(), r.shape.c_str(), r.impl.c_str(), r.ms,
                r.extra_gib, speedup);
    js << "  {\"op\": \"" << r.op << "\", \"shape\": \"" << r.shape << "\", \"impl\": \"" << r.impl
       << "\", \"ms\": " << r.ms << ", \"extra_gib\": " << r.extra_gib << ", \"speedup\": " << speedup << "}"
       << (i + 1 < rows.size() ? ",\n" : "\n");
  }
  js << "]\n";
  std::printf("JSON: %s\n", json_path.c_str());
  return 0;
}

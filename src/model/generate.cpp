#include "meshtrain/model/generate.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/autograd.h>

#include <algorithm>

#include "meshtrain/core/error.h"

namespace meshtrain::model {

std::vector<int64_t> generate(Transformer& model, const std::vector<int64_t>& prompt, const SampleOptions& opts) {
  MT_USER_CHECK(!prompt.empty(), "generate: the prompt must hold at least one token");
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  const auto device = model->tok_embed->weight.device();
  const int64_t limit = model->config().max_seq_len;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(opts.seed);

  std::vector<int64_t> out(prompt.begin(), prompt.end());
  if (static_cast<int64_t>(out.size()) > limit) out.erase(out.begin(), out.end() - limit);
  KVCache cache = model->make_cache();
  auto input = at::tensor(out, at::kLong).view({1, -1}).to(device);
  for (int64_t i = 0; i < opts.max_new_tokens && static_cast<int64_t>(out.size()) < limit; ++i) {
    auto logits = model->forward(input, &cache).select(1, -1).to(at::kFloat).cpu().squeeze(0);  // [V]
    int64_t next;
    if (opts.temperature <= 0) {
      next = logits.argmax().item<int64_t>();
    } else {
      logits = logits / opts.temperature;
      if (opts.top_k > 0 && opts.top_k < logits.size(0)) {
        auto kth = std::get<0>(logits.topk(opts.top_k)).min();
        logits = at::where(logits < kth, at::full_like(logits, -INFINITY), logits);
      }
      next = at::multinomial(at::softmax(logits, -1), 1, false, gen).item<int64_t>();
    }
    out.push_back(next);
    if (opts.on_token) opts.on_token(next);
    if (std::find(opts.stop_tokens.begin(), opts.stop_tokens.end(), next) != opts.stop_tokens.end()) break;
    input = at::full({1, 1}, next, at::TensorOptions().dtype(at::kLong).device(device));
  }
  if (was_training) model->train();
  return out;
}

}  // namespace meshtrain::model

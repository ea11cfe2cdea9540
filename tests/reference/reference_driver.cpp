// Tier-3 reference driver (docs/architecture.md "Test tiers"): the C++ half of tests/reference/reference_test.py.
//
//   reference_driver IN.safetensors OUT.safetensors
//
// IN (written by Python):
//   __metadata__ "model.<key>" = value    the model config, as `section.key=value` overrides of the schema
//   <parameter name>                      every parameter of model::Transformer, exact name, fp32, exact shape
//   input.tokens, input.targets           [B, T] int64: forward + loss + backward
//   input.prompt  (optional)              [P] int64, with __metadata__ "generate.tokens" = N: greedy decoding
// OUT:
//   logits [B, T, V], loss [], grad.<parameter name> for every parameter, buffer.<name> for every buffer
//   (RoPE's inv_freq), and with a prompt: generated [P + N] (model::generate, temperature 0) and
//   step_logits [N, V] (the logits of each KV-cache step, prefill then one token at a time).
//
// A parameter missing from IN, a shape mismatch, or a tensor in IN that is neither a parameter nor an input
// is an error (exit 2), so a renamed parameter cannot pass silently.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include <cstdio>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "meshtrain/ckpt/safetensors.h"
#include "meshtrain/core/config.h"
#include "meshtrain/core/error.h"
#include "meshtrain/model/generate.h"
#include "meshtrain/model/transformer.h"

namespace mt = meshtrain;

namespace {

int run(const std::string& in_path, const std::string& out_path) {
  mt::ckpt::SafetensorsReader in(in_path);

  // Model config from the metadata, through the real schema (unknown keys and bad values are caught there).
  std::vector<std::string> overrides;
  for (const auto& [k, v] : in.metadata())
    if (k.rfind("model.", 0) == 0) overrides.push_back(k + "=" + v);
  mt::Config cfg = mt::parse_config("{}", in_path + " (metadata)", /*json=*/true, overrides);
  mt::resolve(cfg, 1);

  mt::model::Transformer model(cfg.model);
  std::set<std::string> used = {"input.tokens", "input.targets", "input.prompt"};
  {
    torch::NoGradGuard no_grad;
    for (auto& item : model->named_parameters()) {
      const std::string& name = item.key();
      MT_USER_CHECK(in.contains(name), in_path, ": parameter '", name, "' is missing");
      auto w = in.read(name);
      MT_USER_CHECK(w.sizes() == item.value().sizes(), in_path, ": parameter '", name, "' has shape ", w.sizes(),
                    ", the model's is ", item.value().sizes());
      MT_USER_CHECK(w.scalar_type() == at::kFloat, in_path, ": parameter '", name, "' is not F32");
      item.value().copy_(w);
      used.insert(name);
    }
  }
  for (const auto& [name, e] : in.entries())
    MT_USER_CHECK(used.count(name), in_path, ": tensor '", name, "' is not a parameter of the model");

  std::map<std::string, at::Tensor> out;
  for (const auto& item : model->named_buffers()) out["buffer." + item.key()] = item.value();

  // Forward + loss + backward, fp32 on CPU (dropout is 0 in the reference configs; train mode as in training).
  // The gradients come from Transformer::loss itself; the logits from a second, identical forward, and the
  // loss recomputed from them must be the same number bit for bit.
  auto tokens = in.read("input.tokens");
  auto targets = in.read("input.targets");
  model->train();
  model->zero_grad();
  auto loss = model->loss(tokens, targets);
  loss.backward();
  at::Tensor logits;  // [B, T, V]
  {
    torch::NoGradGuard no_grad;
    logits = model->forward(tokens);
    auto loss2 = at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}).to(at::kFloat), targets.reshape({-1}));
    MT_CHECK(at::equal(loss.detach(), loss2), "Transformer::loss ", loss.item<double>(),
             " differs from cross_entropy(forward) ", loss2.item<double>());
  }
  out["logits"] = logits.detach();
  out["loss"] = loss.detach();
  for (const auto& item : model->named_parameters()) {
    const auto& g = item.value().grad();
    out["grad." + item.key()] = g.defined() ? g : at::zeros_like(item.value());
  }

  // Generation: greedy through model::generate, and the logits of each KV-cache step recorded by hand.
  if (in.contains("input.prompt")) {
    auto it = in.metadata().find("generate.tokens");
    MT_USER_CHECK(it != in.metadata().end(), in_path, ": input.prompt needs metadata generate.tokens");
    const int64_t n = std::stoll(it->second);
    auto prompt_t = in.read("input.prompt").to(at::kLong).contiguous();
    std::vector<int64_t> prompt(prompt_t.data_ptr<int64_t>(), prompt_t.data_ptr<int64_t>() + prompt_t.numel());
    mt::model::SampleOptions opts;
    opts.max_new_tokens = n;
    opts.temperature = 0;
    auto generated = mt::model::generate(model, prompt, opts);
    out["generated"] = at::tensor(generated, at::kLong);

    torch::NoGradGuard no_grad;
    model->eval();
    auto cache = model->make_cache();
    std::vector<at::Tensor> steps;
    auto input = prompt_t.view({1, -1});
    for (int64_t i = 0; i < n; ++i) {
      auto l = model->forward(input, &cache).select(1, -1).squeeze(0);  // [V]
      steps.push_back(l);
      // Follow generate()'s tokens so both sides see the same sequence even if an argmax differed.
      const auto next = static_cast<size_t>(prompt.size()) + static_cast<size_t>(i);
      if (next >= generated.size()) break;
      input = at::full({1, 1}, generated[next], at::kLong);
    }
    out["step_logits"] = at::stack(steps);
  }

  mt::ckpt::write_safetensors(out_path, out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s IN.safetensors OUT.safetensors\n", argv[0]);
    return 2;
  }
  at::set_num_threads(1);  // tiny models; the CI machine's 2 cores are shared with other builds and tests
  try {
    return run(argv[1], argv[2]);
  } catch (const mt::UserError& e) {
    std::fprintf(stderr, "reference_driver: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reference_driver: internal error: %s\n", e.what());
    return 3;
  }
}

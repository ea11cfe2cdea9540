#include "meshtrain/model/init.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <cmath>

#include "meshtrain/core/error.h"

namespace meshtrain::model {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// FNV-1a over the name, mixed with the seed: stable across platforms and runs.
uint64_t parameter_seed(int64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h ^ (static_cast<uint64_t>(seed) * 0x9E3779B97F4A7C15ull);
}

}  // namespace

void init_parameter(const ModelConfig& cfg, const std::string& name, at::Tensor& full, int64_t seed) {
  MT_CHECK(!full.is_meta(), "init_parameter: '", name, "' is on the meta device; materialise it first");
  at::NoGradGuard no_grad;
  if (name.find("norm") != std::string::npos) {
    ends_with(name, ".bias") ? full.zero_() : full.fill_(1.0);
    return;
  }
  if (ends_with(name, ".bias")) {
    full.zero_();
    return;
  }
  // LoRA (model/linear/lora_linear.h), as PEFT starts it: A kaiming-uniform with a = √5, i.e. U(-1/√in, 1/√in); B
  // zero, so the adapted model starts equal to its base.
  if (ends_with(name, ".lora_B")) {
    full.zero_();
    return;
  }
  if (ends_with(name, ".lora_A")) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(full.size(1)));
    auto gen = at::globalContext().defaultGenerator(full.device()).clone();
    gen.set_current_seed(parameter_seed(seed, name));
    full.uniform_(-bound, bound, gen);
    return;
  }
  const bool residual = ends_with(name, "attn.wo.weight") || ends_with(name, "mlp.proj.weight") ||
                        ends_with(name, "mlp.w2.weight");
  const double std = residual ? 0.02 / std::sqrt(2.0 * static_cast<double>(cfg.n_layer)) : 0.02;
  auto gen = at::globalContext().defaultGenerator(full.device()).clone();
  gen.set_current_seed(parameter_seed(seed, name));
  full.normal_(0.0, std, gen);
}

void init_parameter_block(const ModelConfig& cfg, const std::string& name, const std::vector<int64_t>& global_shape,
                          const std::vector<int64_t>& offsets, at::Tensor& block, int64_t seed) {
  MT_CHECK(offsets.size() == global_shape.size() && block.dim() == static_cast<int64_t>(global_shape.size()),
           "init_parameter_block: rank mismatch for '", name, "'");
  // Drawn in fp32 whatever the block holds (a frozen shard may be bf16): the same numbers as every layout.
  auto full = at::empty(global_shape, block.options().dtype(at::kFloat));
  init_parameter(cfg, name, full, seed);
  auto src = full;
  for (size_t d = 0; d < offsets.size(); ++d) src = src.narrow(static_cast<int64_t>(d), offsets[d], block.size(d));
  at::NoGradGuard no_grad;
  block.copy_(src);
}

}  // namespace meshtrain::model

// Named model shapes (`model.preset`): the published configurations of GPT-2 (OpenAI's 2019 release, as in
// Hugging Face `gpt2`, `gpt2-medium`, `gpt2-large`, `gpt2-xl`) and Llama 3.1 / 3.2 (Meta's config.json files),
// plus `tiny` for tests. A preset sets every shape field, so the result does not depend on what the
// ModelConfig held before; the loader applies it first and lets the file's own model keys win.
//
// Llama presets use max_seq_len 8192 rather than the published 131072: the 128K context relies on RoPE
// scaling ("llama3" rope_scaling), which meshtrain does not model, and 8192 is the native pre-training
// context. Set model.max_seq_len to go longer.
#include <algorithm>

#include "meshtrain/core/config.h"
#include "meshtrain/core/config_schema.h"
#include "meshtrain/core/error.h"

namespace meshtrain {
namespace {

struct Preset {
  const char* name;
  Family family;
  int64_t vocab_size, n_layer, n_head, n_kv_head, d_model, d_ff, max_seq_len;
  bool tie_embeddings;
  double rope_theta;  // unused by gpt2 (learned positions); kept at the field default there
};

constexpr double kDefaultTheta = 500000.0;

// clang-format off
constexpr Preset kPresets[] = {
  // name           family          vocab   layer head kv   d_model d_ff   seq   tied  rope_theta
  {"tiny",         Family::gpt2,   256,    2,    4,   4,   64,     256,   64,   true,  kDefaultTheta},
  {"gpt2-124m",    Family::gpt2,   50257,  12,   12,  12,  768,    3072,  1024, true,  kDefaultTheta},
  {"gpt2-350m",    Family::gpt2,   50257,  24,   16,  16,  1024,   4096,  1024, true,  kDefaultTheta},
  {"gpt2-774m",    Family::gpt2,   50257,  36,   20,  20,  1280,   5120,  1024, true,  kDefaultTheta},
  {"gpt2-1.5b",    Family::gpt2,   50257,  48,   25,  25,  1600,   6400,  1024, true,  kDefaultTheta},
  {"llama3.2-1b",  Family::llama,  128256, 16,   32,  8,   2048,   8192,  8192, true,  500000.0},
  {"llama3.2-3b",  Family::llama,  128256, 28,   24,  8,   3072,   8192,  8192, true,  500000.0},
  {"llama3.1-8b",  Family::llama,  128256, 32,   32,  8,   4096,   14336, 8192, false, 500000.0},
  {"llama3.1-70b", Family::llama,  128256, 80,   64,  8,   8192,   28672, 8192, false, 500000.0},
};
// clang-format on

}  // namespace

const std::vector<std::string>& model_preset_names() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> out;
    for (const Preset& p : kPresets) out.emplace_back(p.name);
    return out;
  }();
  return kNames;
}

void apply_model_preset(const std::string& preset, ModelConfig& m) {
  auto it = std::find_if(std::begin(kPresets), std::end(kPresets),
                         [&](const Preset& p) { return preset == p.name; });
  if (it == std::end(kPresets)) {
    std::string valid;
    for (const std::string& n : model_preset_names()) valid += (valid.empty() ? "" : " | ") + n;
    std::string near = nearest_match(preset, model_preset_names());
    throw UserError(cat("model.preset: given '", preset, "'; valid ", valid,
                        near.empty() ? "" : cat(" (did you mean '", near, "'?)")));
  }
  const Preset& p = *it;
  m.preset = p.name;
  m.family = p.family;
  m.vocab_size = p.vocab_size;
  m.n_layer = p.n_layer;
  m.n_head = p.n_head;
  m.n_kv_head = p.n_kv_head;
  m.d_model = p.d_model;
  m.d_ff = p.d_ff;
  m.max_seq_len = p.max_seq_len;
  m.tie_embeddings = p.tie_embeddings;
  m.norm_eps = 1e-5;  // GPT-2 layer_norm_epsilon and Llama 3 rms_norm_eps are both 1e-5
  m.rope_theta = p.rope_theta;
}

}  // namespace meshtrain

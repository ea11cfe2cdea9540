// Driver for the Hugging Face round-trip test (hf_roundtrip_test.py): meshtrain's side of the comparison.
//   logits_driver init OUT_DIR SEED model.key=value...   a random model (init_weights, then noise on every
//                                                        parameter so norms and biases are not trivial),
//                                                        saved as a meshtrain checkpoint with its config
//   logits_driver logits CKPT TOKENS OUT.safetensors     meshtrain's logits [1, T, V] (fp32) for the
//                                                        comma-separated TOKENS, the model loaded as
//                                                        generate loads it (ckpt/inference_checkpoint.h)
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "meshtrain/ckpt/checkpoint.h"
#include "meshtrain/ckpt/inference_checkpoint.h"
#include "meshtrain/ckpt/safetensors.h"
#include "meshtrain/core/config.h"
#include "meshtrain/core/error.h"
#include "meshtrain/model/prompt_logits.h"
#include "meshtrain/model/transformer.h"

namespace mt = meshtrain;

namespace {

int init(const std::string& out, uint64_t seed, const std::vector<std::string>& overrides) {
  mt::Config cfg = mt::parse_config("{}", "logits_driver", /*json=*/true, overrides);
  mt::resolve(cfg, 1);
  at::manual_seed(seed);
  mt::model::Transformer net(cfg.model);
  net->init_weights(static_cast<int64_t>(seed));
  std::map<std::string, at::Tensor> tensors;
  {
    torch::NoGradGuard no_grad;
    for (auto& item : net->named_parameters()) {
      item.value().add_(at::randn_like(item.value()) * 0.05);
      tensors["model." + item.key()] = item.value();
    }
  }
  mt::ckpt::CheckpointManager m(out, 0, nullptr);
  m.save(1, tensors, {{"config", nlohmann::json::parse(mt::to_json(cfg))}});
  std::printf("saved %s\n", m.step_dir(1).c_str());
  return 0;
}

int logits(const std::string& ckpt, const std::string& tokens_csv, const std::string& out) {
  // The model the checkpoint recorded, as `meshtrain generate` loads it.
  mt::model::Transformer net = mt::ckpt::load_model(mt::ckpt::open_for_inference(ckpt));
  std::vector<int64_t> ids;
  std::stringstream ss(tokens_csv);
  for (std::string t; std::getline(ss, t, ',');) ids.push_back(std::stoll(t));
  mt::ckpt::write_safetensors(out, {{"logits", mt::model::prompt_logits(net, ids).unsqueeze(0)}});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "init" && argc >= 4) return init(argv[2], std::stoull(argv[3]), std::vector<std::string>(argv + 4, argv + argc));
    if (mode == "logits" && argc == 5) return logits(argv[2], argv[3], argv[4]);
    std::fprintf(stderr, "usage: logits_driver init OUT SEED model.k=v... | logits CKPT TOKENS OUT.safetensors\n");
    return 2;
  } catch (const mt::UserError& e) {
    std::fprintf(stderr, "logits_driver: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "logits_driver: fatal: %s\n", e.what());
    return 1;
  }
}

// InferenceCheckpoint (ckpt/inference_checkpoint.h): a checkpoint opened for inference — the recorded config
// from either place meta.json has kept it, the model built from it and its weights loaded.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "meshtrain/ckpt/checkpoint.h"
#include "meshtrain/ckpt/inference_checkpoint.h"
#include "meshtrain/core/error.h"
#include "support/test_support.h"
#include "support/json_file.h"

using namespace meshtrain;
using namespace meshtrain::testing_support;
namespace fs = std::filesystem;

namespace {

// A resolved config of a tiny Llama, as the trainer records it.
nlohmann::json llama_config_json() {
  Config cfg = parse_config("{}", "test", /*json=*/true,
                            {"model.family=llama", "model.vocab_size=32", "model.n_layer=1", "model.n_head=2",
                             "model.d_model=16", "model.max_seq_len=8"});
  resolve(cfg, 1);
  return nlohmann::json::parse(to_json(cfg));
}

void write_json(const fs::path& p, const nlohmann::json& j) { std::ofstream(p) << j.dump(1); }

}  // namespace

// Both older meta.json layouts on disk (an empty "config", as earlier trainers wrote, and none, as format 1),
// read through the inference loader: the recorded model is built and its weights loaded.
TEST(InferenceCheckpoint, LoadsTheModelOfEitherLocation) {
  const fs::path d = temp_dir("inference_ckpt");
  const nlohmann::json cj = llama_config_json();
  Config cfg = parse_config(cj.dump(), "test", /*json=*/true);
  at::manual_seed(0);
  model::Transformer saved(cfg.model);
  std::map<std::string, at::Tensor> tensors;
  for (auto& item : saved->named_parameters()) tensors["model." + item.key()] = at::randn(item.value().sizes());
  ckpt::CheckpointManager manager((d / "run").string(), 0, nullptr);
  const std::string step = manager.save(7, tensors, {{"config", cj}});
  const fs::path meta_path = fs::path(step) / "meta.json";
  for (const bool format1 : {false, true}) {
    nlohmann::json meta = testing_support::read_json_file(meta_path);
    ASSERT_EQ(meta["state"]["config"], cj);
    if (format1) {
      meta.erase("config");
    } else {
      meta["config"] = nlohmann::json::object();
    }
    write_json(meta_path, meta);
    const ckpt::InferenceCheckpoint ck = ckpt::open_for_inference((d / "run").string());  // through `latest`
    EXPECT_EQ(ck.dir, step);
    EXPECT_EQ(ck.meta.step, 7);
    model::Transformer net = ckpt::load_model(ck);
    EXPECT_FALSE(net->is_training());
    for (auto& item : net->named_parameters())
      EXPECT_TRUE(at::equal(item.value(), tensors.at("model." + item.key()))) << item.key();
  }
  // Neither location: the loader names the file before reading a tensor.
  nlohmann::json meta = testing_support::read_json_file(meta_path);
  meta["state"].erase("config");
  write_json(meta_path, meta);
  const std::string err = user_error([&] { ckpt::open_for_inference(step); });
  EXPECT_EQ(err.rfind(meta_path.string() + ": no config recorded", 0), 0u) << err;
}

// A LoRA checkpoint (base and adapters in one, adapters non-zero) loads for inference as a model without
// adapters whose weights are W + alpha / r · B A: the logits equal the adapted model's, and no lora_ parameter
// is left to run.
TEST(InferenceCheckpoint, LoraAdaptersComeMergedIntoTheirWeights) {
  const fs::path d = temp_dir("inference_ckpt_lora");
  Config cfg = parse_config("{}", "test", /*json=*/true,
                            {"model.family=llama", "model.vocab_size=32", "model.n_layer=2", "model.n_head=2",
                             "model.d_model=16", "model.max_seq_len=8", "model.lora_rank=2", "model.lora_alpha=8",
                             "model.lora_dropout=0"});
  resolve(cfg, 1);
  const nlohmann::json cj = nlohmann::json::parse(to_json(cfg));
  at::manual_seed(0);
  model::Transformer adapted(cfg.model);
  std::map<std::string, at::Tensor> tensors;
  size_t adapters = 0;
  {
    torch::NoGradGuard no_grad;
    for (auto& item : adapted->named_parameters()) {
      item.value().copy_(at::randn(item.value().sizes()) * 0.3);  // lora_B too: a merge that drops it shows
      tensors["model." + item.key()] = item.value().detach().clone();
      adapters += item.key().find("lora_") != std::string::npos;
    }
  }
  ASSERT_GT(adapters, 0u);
  ckpt::CheckpointManager manager((d / "run").string(), 0, nullptr);
  manager.save(3, tensors, {{"config", cj}});
  model::Transformer net = ckpt::load_model(ckpt::open_for_inference((d / "run").string()));
  for (auto& item : net->named_parameters())
    EXPECT_EQ(item.key().find("lora_"), std::string::npos) << item.key();
  adapted->eval();
  const at::Tensor tokens = at::randint(32, {2, 8}, at::kLong);
  torch::NoGradGuard no_grad;
  const at::Tensor want = adapted->forward(tokens), got = net->forward(tokens);
  EXPECT_TRUE(at::allclose(got, want, 1e-4, 1e-5)) << (got - want).abs().max().item<float>();
  size_t merged = 0;  // weights that differ from their stored base: the adapters went somewhere
  for (auto& item : net->named_parameters())
    merged += !at::equal(item.value(), tensors.at("model." + item.key()));
  EXPECT_EQ(merged, adapters / 2);
}

// A Hugging Face directory read in place (ckpt/hf_model_dir.h) and found by what names it (ckpt/model_path.h,
// ckpt/hf_hub_cache.h): any rectangle of any parameter equals the same block of the imported tensors, in both
// families (GPT-2's transposed and fused tensors included) and across sharded files; the Hub cache resolves
// org/name offline through refs/main; the mistakes are one line each.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "meshtrain/ckpt/checkpoint_reader.h"
#include "meshtrain/ckpt/hf_convert.h"
#include "meshtrain/ckpt/hf_hub_cache.h"
#include "meshtrain/ckpt/hf_model_dir.h"
#include "meshtrain/ckpt/inference_checkpoint.h"
#include "meshtrain/ckpt/model_path.h"
#include "meshtrain/ckpt/safetensors.h"
#include "meshtrain/core/fs.h"
#include "meshtrain/model/transformer.h"
#include "support/test_support.h"
#include "support/tiny_model.h"

using namespace meshtrain;
using namespace meshtrain::testing_support;
namespace fs = std::filesystem;

namespace {

// d_model ≠ d_ff ≠ vocab, GQA for Llama: a swapped or transposed block cannot pass unnoticed.
ModelConfig hf_test_model(const std::string& family) {
  return tiny_model({.family = family, .vocab_size = 40, .n_layer = 2, .n_head = 4,
                     .n_kv_head = family == "llama" ? 2 : 4, .d_model = 16, .d_ff = 24, .max_seq_len = 8});
}

// Random parameters of `m` (meshtrain names, no prefix).
std::map<std::string, at::Tensor> random_params(const ModelConfig& m) {
  model::Transformer net(m);
  at::manual_seed(7);
  std::map<std::string, at::Tensor> ours;
  for (const auto& item : net->named_parameters()) ours[item.key()] = at::randn(item.value().sizes());
  return ours;
}

// `ours` written as save_pretrained lays a model out: config.json and one file, or (shards > 1) several files and
// the index naming them.
void write_hf_dir(const fs::path& dir, const ModelConfig& m, const std::map<std::string, at::Tensor>& ours,
                  int shards = 1) {
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << ckpt::hf_config_from(m, "float32").dump(2);
  const auto hf = ckpt::to_hf_tensors(m, ours);
  if (shards == 1) {
    ckpt::write_safetensors((dir / "model.safetensors").string(), hf);
    return;
  }
  std::vector<std::map<std::string, at::Tensor>> files(static_cast<size_t>(shards));
  nlohmann::json index = {{"weight_map", nlohmann::json::object()}};
  size_t i = 0;
  for (const auto& [name, t] : hf) {
    const std::string f = "model-0000" + std::to_string(i % files.size() + 1) + "-of-0000" + std::to_string(shards) +
                          ".safetensors";
    files[i++ % files.size()][name] = t;
    index["weight_map"][name] = f;
  }
  for (size_t k = 0; k < files.size(); ++k)
    ckpt::write_safetensors((dir / ("model-0000" + std::to_string(k + 1) + "-of-0000" + std::to_string(shards) +
                                    ".safetensors")).string(), files[k]);
  std::ofstream(dir / "model.safetensors.index.json") << index.dump();
}

// Rectangles as the layouts cut them: whole (DDP), dim-0 chunks of 3 (FSDP; the last may be empty), dim-1 halves
// (row-parallel TP) and a dim-0 chunk of a dim-1 half (FSDP × TP). `dtype` of the blocks' storage.
std::vector<ShardedTensor> rectangles(const std::map<std::string, at::Tensor>& ours, at::ScalarType dtype) {
  std::vector<ShardedTensor> out;
  const auto add = [&](const std::string& name, const at::Tensor& t, std::vector<int64_t> off,
                       std::vector<int64_t> len) {
    out.push_back({"model." + name, t.sizes().vec(), off, at::zeros(len, at::TensorOptions().dtype(dtype)), true});
  };
  for (const auto& [name, t] : ours) {
    const auto shape = t.sizes().vec();
    add(name, t, std::vector<int64_t>(shape.size(), 0), shape);
    const int64_t chunk = (shape[0] + 2) / 3;
    for (int64_t lo = 0; lo < shape[0] + chunk; lo += chunk) {
      auto off = std::vector<int64_t>(shape.size(), 0);
      auto len = shape;
      off[0] = std::min(lo, shape[0]);
      len[0] = std::min(chunk, shape[0] - off[0]);
      add(name, t, off, len);
    }
    if (shape.size() == 2 && shape[1] % 2 == 0) {
      const int64_t half = shape[1] / 2;
      add(name, t, {0, half}, {shape[0], half});
      add(name, t, {shape[0] / 2, 0}, {shape[0] - shape[0] / 2, half});
    }
  }
  return out;
}

at::Tensor block_of(const at::Tensor& t, const ShardedTensor& b) {
  at::Tensor v = t;
  for (int64_t d = 0; d < t.dim(); ++d) v = v.narrow(d, b.offsets[static_cast<size_t>(d)], b.local.size(d));
  return v;
}

// Sets an environment variable for the scope, restoring what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value.empty() ? ::unsetenv(name) : ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { old_ ? ::setenv(name_, old_->c_str(), 1) : ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// <cache>/models--org--name with refs/main naming a snapshot that holds `files_from`'s files.
fs::path fake_hub_entry(const fs::path& cache, const std::string& org, const std::string& name, const fs::path& from) {
  const fs::path repo = cache / ("models--" + org + "--" + name);
  const std::string rev = "0123456789abcdef0123456789abcdef01234567";
  fs::create_directories(repo / "refs");
  std::ofstream(repo / "refs" / "main") << rev;
  const fs::path snap = repo / "snapshots" / rev;
  fs::create_directories(snap);
  if (!from.empty())
    for (const auto& e : fs::directory_iterator(from)) fs::copy_file(e.path(), snap / e.path().filename());
  return snap;
}

}  // namespace

class HfModelDirFamilies : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

// Every rectangle of every parameter, read from the files in place, equals that block of the tensors the import
// path (from_hf_tensors) gives; a bf16 destination gets the values rounded, as a load into bf16 rounds them.
TEST_P(HfModelDirFamilies, EveryRectangleEqualsTheImportedTensors) {
  const auto& [family, shards] = GetParam();
  const ModelConfig m = hf_test_model(family);
  const auto ours = random_params(m);
  const fs::path dir = temp_dir("hf_dir_" + family + std::to_string(shards));
  write_hf_dir(dir, m, ours, shards);
  const ckpt::HfModelDir hf(dir.string());
  EXPECT_EQ(hf.model().d_ff, m.d_ff);
  EXPECT_EQ(hf.weight_files().size(), static_cast<size_t>(shards));
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    auto blocks = rectangles(ours, dtype);
    hf.load(blocks);
    for (const ShardedTensor& b : blocks)
      EXPECT_TRUE(at::equal(b.local, block_of(ours.at(b.name.substr(6)), b).to(dtype)))
          << b.name << " at " << shape_text(b.offsets) << " of " << shape_text(b.local.sizes().vec());
  }
  const auto whole = hf.read_model();
  ASSERT_EQ(whole.size(), ours.size());
  for (const auto& [name, t] : ours) EXPECT_TRUE(at::equal(whole.at("model." + name), t)) << name;
}

INSTANTIATE_TEST_SUITE_P(Layouts, HfModelDirFamilies,
                         ::testing::Values(std::tuple{"llama", 1}, std::tuple{"gpt2", 1}, std::tuple{"llama", 2},
                                           std::tuple{"gpt2", 3}),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_files" + std::to_string(std::get<1>(info.param));
                         });

// A Hugging Face directory opened for inference: config.json's model, the whole model's weights, the tokenizer
// looked for in the directory itself.
TEST(HfModelDir, OpensForInferenceInPlace) {
  const ModelConfig m = hf_test_model("llama");
  const auto ours = random_params(m);
  const fs::path dir = temp_dir("hf_dir_inference");
  write_hf_dir(dir, m, ours);
  const ckpt::InferenceCheckpoint ck = ckpt::open_for_inference(dir.string(), {"train.micro_batch_size=3"});
  ASSERT_TRUE(ck.hf);
  EXPECT_EQ(ck.config.model.n_kv_head, 2);
  EXPECT_EQ(ck.config.train.micro_batch_size, 3);
  model::Transformer net = ckpt::load_model(ck);
  for (const auto& item : net->named_parameters())
    EXPECT_TRUE(at::equal(item.value(), ours.at(item.key()))) << item.key();
  EXPECT_EQ(ckpt::tokenizer_dirs(ck, dir.string())[1], dir.string());
}

// A directory has no training config: its sequences are the model's positions up to 2048 (kHfSequenceTokens), not
// a Llama 3.1's 131,072; --set still wins.
TEST(HfModelDir, SequencesForEvaluationAreAFineTunesNotTheWholeContext) {
  ModelConfig m = hf_test_model("llama");
  m.max_seq_len = 4096;
  const fs::path dir = temp_dir("hf_dir_seq_len");
  write_hf_dir(dir, m, random_params(m));
  EXPECT_EQ(ckpt::open_for_inference(dir.string()).config.data.seq_len, ckpt::kHfSequenceTokens);
  EXPECT_EQ(ckpt::open_for_inference(dir.string(), {"data.seq_len=4096"}).config.data.seq_len, 4096);
  const fs::path small = temp_dir("hf_dir_seq_len_small");
  write_hf_dir(small, hf_test_model("llama"), random_params(hf_test_model("llama")));
  EXPECT_EQ(ckpt::open_for_inference(small.string()).config.data.seq_len, 8);  // fewer positions than 2048
}

// The model's mistakes, each before a weight is read and in one line: a tensor of the wrong shape, one
// meshtrain does not know, a parameter the directory lacks (a LoRA adapter), a run's model section that differs.
TEST(HfModelDir, MistakesAreOneLine) {
  const ModelConfig m = hf_test_model("llama");
  const auto ours = random_params(m);
  const fs::path dir = temp_dir("hf_dir_mistakes");
  write_hf_dir(dir, m, ours);
  const ckpt::HfModelDir hf(dir.string());
  std::vector<ShardedTensor> lora{{"model.blocks.0.attn.wq.lora_a", {2, 16}, {0, 0}, at::zeros({2, 16}), true}};
  const std::string missing = user_error([&] { hf.load(lora, "checkpoint.init_from"); });
  EXPECT_NE(missing.find("checkpoint.init_from " + dir.string() + ": holds no tensor for "
                         "'model.blocks.0.attn.wq.lora_a'"), std::string::npos) << missing;
  ModelConfig other = m;
  other.n_head = 2;
  const std::string differs = user_error([&] { hf.check_model(other, "checkpoint.init_from"); });
  EXPECT_NE(differs.find("model.n_head is 2 but " + (dir / "config.json").string() + " gives 4"), std::string::npos)
      << differs;

  const auto hf_tensors = ckpt::to_hf_tensors(m, ours);
  auto wrong = hf_tensors;
  wrong["model.embed_tokens.weight"] = at::randn({41, 16});
  ckpt::write_safetensors((dir / "model.safetensors").string(), wrong);
  const std::string shape = user_error([&] { ckpt::HfModelDir{dir.string()}; });
  EXPECT_EQ(shape, dir.string() + ": tensor 'model.embed_tokens.weight' has shape [41, 16], the config needs [40, 16]");
  auto extra = hf_tensors;
  extra["model.layers.0.self_attn.q_proj.bias"] = at::zeros({16});
  ckpt::write_safetensors((dir / "model.safetensors").string(), extra);
  EXPECT_NE(user_error([&] { ckpt::HfModelDir{dir.string()}; })
                .find("tensor 'model.layers.0.self_attn.q_proj.bias' is not a llama weight meshtrain knows"),
            std::string::npos);
  fs::remove(dir / "config.json");
  EXPECT_EQ(user_error([&] { ckpt::HfModelDir{dir.string()}; }),
            (dir / "config.json").string() + ": not found (expected a Hugging Face model directory)");
}

// The cache's directory from the environment in huggingface_hub's order, and org/name → refs/main's snapshot.
TEST(HfHubCache, ResolvesOrgNameOfflineThroughRefsMain) {
  const fs::path root = temp_dir("hf_hub_cache");
  {
    const ScopedEnv cache("HF_HUB_CACHE", ""), home("HF_HOME", (root / "home").string()), xdg("XDG_CACHE_HOME", "");
    EXPECT_EQ(ckpt::hf_hub_cache_dir(), (root / "home" / "hub").string());
    const fs::path snap = fake_hub_entry(root / "home" / "hub", "org", "tiny.model-1", {});
    EXPECT_EQ(ckpt::hub_snapshot("org/tiny.model-1", ""), snap.string());
    const std::string err = user_error([] { ckpt::hub_snapshot("org/absent", "checkpoint.init_from"); });
    EXPECT_EQ(err, "checkpoint.init_from org/absent: no such directory, and the Hugging Face cache holds no model of "
                   "that id (looked for " + (root / "home" / "hub" / "models--org--absent" / "refs" / "main").string() +
                   "; HF_HUB_CACHE or HF_HOME name another cache; nothing is downloaded)");
    remove_tree(snap.string());  // refs/main naming a snapshot that is gone: the snapshot's path named
    EXPECT_NE(user_error([] { ckpt::hub_snapshot("org/tiny.model-1", ""); }).find(snap.string()), std::string::npos);
  }
  {
    const ScopedEnv cache("HF_HUB_CACHE", (root / "explicit").string()), home("HF_HOME", (root / "home").string());
    EXPECT_EQ(ckpt::hf_hub_cache_dir(), (root / "explicit").string());
  }
  {
    const ScopedEnv cache("HF_HUB_CACHE", ""), home("HF_HOME", ""), xdg("XDG_CACHE_HOME", ""),
        h("HOME", (root / "user").string());
    EXPECT_EQ(ckpt::hf_hub_cache_dir(), (root / "user" / ".cache" / "huggingface" / "hub").string());
  }
  for (const char* id : {"org/name", "meta-llama/Llama-3.2-1B", "a_b/c.d"})
    EXPECT_TRUE(ckpt::is_hub_model_id(id)) << id;
  for (const char* id : {"name", "/abs/path", "a/b/c", "./x", "../x", "org/", "/x", "org/.hidden", "o rg/x"})
    EXPECT_FALSE(ckpt::is_hub_model_id(id)) << id;
}

// What a model argument names: a checkpoint, a Hugging Face directory, a cached org/name; a directory that is
// none of them is one line saying what was expected; a path that does not exist stays a checkpoint path.
TEST(ModelPath, TellsCheckpointsHfDirectoriesAndHubIdsApart) {
  const fs::path root = temp_dir("model_path");
  const ScopedEnv cache("HF_HUB_CACHE", (root / "cache").string());
  const ModelConfig m = hf_test_model("gpt2");
  write_hf_dir(root / "hf", m, random_params(m));
  fs::create_directories(root / "ckpt");
  std::ofstream(root / "ckpt" / "latest") << "step_00000001\n";
  fs::create_directories(root / "empty");
  const fs::path snap = fake_hub_entry(root / "cache", "org", "tiny", root / "hf");

  EXPECT_FALSE(ckpt::locate_model((root / "ckpt").string(), "").hugging_face);
  const auto hf = ckpt::locate_model((root / "hf").string(), "");
  EXPECT_TRUE(hf.hugging_face);
  EXPECT_EQ(hf.dir, (root / "hf").string());
  const auto hub = ckpt::locate_model("org/tiny", "");
  EXPECT_TRUE(hub.hugging_face);
  EXPECT_EQ(hub.dir, snap.string());
  EXPECT_EQ(ckpt::model_files_dir("org/tiny"), snap.string());
  EXPECT_EQ(ckpt::model_files_dir("org/absent"), "org/absent");
  EXPECT_FALSE(ckpt::locate_model((root / "missing").string(), "").hugging_face);
  const std::string neither =
      user_error([&] { ckpt::locate_model((root / "empty").string(), "checkpoint.init_from"); });
  EXPECT_EQ(neither.rfind("checkpoint.init_from " + (root / "empty").string() + ": neither a meshtrain checkpoint "
                          "(meta.json, or `latest` naming a step directory) nor a Hugging Face model directory "
                          "(config.json and model.safetensors", 0), 0u) << neither;
  EXPECT_EQ(neither.find('\n'), std::string::npos);
  // Through the inference opener: the Hub id's weights equal the directory's.
  const auto a = ckpt::load_model(ckpt::open_for_inference("org/tiny"));
  const auto b = ckpt::load_model(ckpt::open_for_inference((root / "hf").string()));
  for (const auto& item : a->named_parameters())
    EXPECT_TRUE(at::equal(item.value(), b->named_parameters()[item.key()])) << item.key();
}

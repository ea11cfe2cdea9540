// hf_name_table (ckpt/hf_name_table.h): one table per family covers every parameter of the model once, and
// export → import through it (to_hf_tensors, from_hf_tensors) gives back every tensor bit for bit.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "meshtrain/ckpt/hf_convert.h"
#include "meshtrain/ckpt/hf_name_table.h"
#include "meshtrain/model/transformer.h"
#include "support/tiny_model.h"

using namespace meshtrain;

// Outside the anonymous namespace: the test classes gtest derives from the fixture are not in it either.
struct HfTableCase {
  std::string family;
  bool tied;
  int64_t n_kv_head;
};

class HfNameTable : public ::testing::TestWithParam<HfTableCase> {};

namespace {

// A model with d_model ≠ d_ff ≠ vocab so that a transposed or swapped shape cannot pass unnoticed.
ModelConfig model_of(const HfTableCase& c) {
  return testing_support::tiny_model({.family = c.family, .vocab_size = 40, .n_layer = 2, .n_head = 4,
                                      .n_kv_head = c.n_kv_head, .d_model = 16, .d_ff = 24, .max_seq_len = 8,
                                      .tie_embeddings = c.tied});
}

}  // namespace

TEST_P(HfNameTable, CoversEveryParameterOnceWithItsShape) {
  const ModelConfig m = model_of(GetParam());
  model::Transformer net(m);
  std::map<std::string, std::vector<int64_t>> params;
  for (const auto& item : net->named_parameters()) params[item.key()] = item.value().sizes().vec();
  std::set<std::string> ours, hf;
  for (const auto& row : ckpt::hf_name_table(m)) {
    EXPECT_TRUE(hf.insert(row.hf).second) << row.hf << " twice";
    for (const auto& name : row.ours) {
      EXPECT_TRUE(ours.insert(name).second) << name << " twice";
      ASSERT_TRUE(params.count(name)) << name << " is no parameter of the model";
      EXPECT_EQ(params.at(name), row.shape) << name;
    }
  }
  EXPECT_EQ(ours.size(), params.size());
}

TEST_P(HfNameTable, ExportThenImportGivesBackEveryTensor) {
  const ModelConfig m = model_of(GetParam());
  model::Transformer net(m);
  at::manual_seed(1);
  std::map<std::string, at::Tensor> ours;
  for (const auto& item : net->named_parameters()) ours[item.key()] = at::randn(item.value().sizes());
  const auto hf = ckpt::to_hf_tensors(m, ours);
  for (const auto& row : ckpt::hf_name_table(m))
    EXPECT_EQ(hf.at(row.hf).sizes().vec(), ckpt::hf_shape(row)) << row.hf;
  const auto back = ckpt::from_hf_tensors(m, hf, "test");
  ASSERT_EQ(back.size(), ours.size());
  for (const auto& [name, t] : ours) EXPECT_TRUE(at::equal(back.at(name), t)) << name;
}

INSTANTIATE_TEST_SUITE_P(Families, HfNameTable,
                         ::testing::Values(HfTableCase{"llama", false, 2}, HfTableCase{"llama", true, 4},
                                           HfTableCase{"gpt2", true, 4}, HfTableCase{"gpt2", false, 4}),
                         [](const auto& info) {
                           return info.param.family + (info.param.tied ? "_tied" : "_untied") +
                                  (info.param.n_kv_head < 4 ? "_gqa" : "");
                         });

TEST(HfNameTable, NamesGpt2sFusedAttentionAndLlamaLayers) {
  const ModelConfig gpt2 = model_of({"gpt2", true, 4});
  const auto rows = ckpt::hf_name_table(gpt2);
  const auto c_attn = std::find_if(rows.begin(), rows.end(),
                                   [](const auto& r) { return r.hf == "transformer.h.1.attn.c_attn.weight"; });
  ASSERT_NE(c_attn, rows.end());
  EXPECT_EQ(c_attn->ours, (std::vector<std::string>{"blocks.1.attn.wq.weight", "blocks.1.attn.wk.weight",
                                                    "blocks.1.attn.wv.weight"}));
  EXPECT_EQ(ckpt::hf_shape(*c_attn), (std::vector<int64_t>{16, 48}));  // Conv1D: [in, 3 × out]
  EXPECT_EQ(ckpt::llama_hf_layer_name("blocks.3.attn.wq.weight"), "model.layers.3.self_attn.q_proj.weight");
  EXPECT_EQ(ckpt::llama_hf_layer_name("blocks.0.mlp.w3.weight"), "model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(ckpt::llama_hf_layer_name("tok_embed.weight"), "");
  EXPECT_EQ(ckpt::llama_hf_layer_name("blocks.0.attn.wq.lora_A"), "");
}

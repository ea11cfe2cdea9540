// GGUF pieces without the Python reference (tests/reference/gguf_quants_test.py and
// tests/e2e/ckpt/gguf_roundtrip_test.py check them against llama.cpp's package): the container written and read
// back, damaged files refused, the q/k permutation, the per-tensor type rule.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "meshtrain/ckpt/gguf/gguf_export_type.h"
#include "meshtrain/ckpt/gguf/gguf_file.h"
#include "meshtrain/ckpt/gguf/gguf_llama.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/fs.h"
#include "support/test_support.h"

namespace fs = std::filesystem;
namespace g = meshtrain::ckpt::gguf;

namespace {

using meshtrain::testing_support::user_error;

std::string fresh_dir(const std::string& name) { return meshtrain::testing_support::temp_dir("gguf_" + name).string(); }

std::vector<g::TensorToWrite> two_tensors(const std::vector<float>& a, const std::vector<float>& b) {
  return {{"a", {32, 2}, g::GgmlType::Q8_0, [a] { return g::quantize(g::GgmlType::Q8_0, a.data(), 64); }},
          {"b", {3}, g::GgmlType::F32, [b] { return g::quantize(g::GgmlType::F32, b.data(), 3); }}};
}

}  // namespace

TEST(Gguf, WrittenFileReadsBack) {
  const std::string dir = fresh_dir("rw"), path = dir + "/m.gguf";
  std::vector<float> a(64), b = {1.5f, -2.0f, 0.25f};
  for (int i = 0; i < 64; ++i) a[i] = 0.01f * static_cast<float>(i - 30);
  g::write_gguf(path, {{"general.architecture", g::string_value("llama")}, {"n", g::u32_value(7)},
                       {"eps", g::f32_value(1e-5)}, {"flag", g::bool_value(true)},
                       {"words", g::array_value(g::ValueType::String, {"x", "y z"})},
                       {"ids", g::array_value(g::ValueType::I32, {1, -2, 3})}},
                two_tensors(a, b));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  const g::GgufReader r(path);
  EXPECT_EQ(r.string("general.architecture"), "llama");
  EXPECT_EQ(r.integer("n"), 7);
  EXPECT_FLOAT_EQ(static_cast<float>(r.number("eps")), 1e-5f);
  EXPECT_EQ(r.metadata().at("words").value, nlohmann::json({"x", "y z"}));
  EXPECT_EQ(r.metadata().at("ids").value, nlohmann::json({1, -2, 3}));
  ASSERT_EQ(r.tensors().size(), 2u);
  for (const g::TensorInfo& t : r.tensors()) EXPECT_EQ(t.offset % 32, 0u) << t.name;
  const auto bytes = r.read(*r.find("b"));
  std::vector<float> back(3);
  g::dequantize(g::GgmlType::F32, bytes.data(), 3, back.data());
  EXPECT_EQ(back, b);
  const auto qa = r.read(*r.find("a"));
  std::vector<float> da(64);
  g::dequantize(g::GgmlType::Q8_0, qa.data(), 64, da.data());
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(da[i], a[i], 0.3f / 127) << i;
}

TEST(Gguf, DamagedFilesAreOneLineNamingTheFile) {
  const std::string dir = fresh_dir("bad"), path = dir + "/m.gguf";
  g::write_gguf(path, {{"general.architecture", g::string_value("llama")}}, two_tensors(std::vector<float>(64, 1.0f), {1, 2, 3}));
  std::ifstream in(path, std::ios::binary);
  const std::string blob((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto write = [&](const std::string& name, const std::string& data) {
    std::ofstream(dir + "/" + name, std::ios::binary) << data;
    return dir + "/" + name;
  };
  for (size_t cut : {size_t{2}, size_t{30}, blob.size() - 25}) {  // the last 20 bytes are padding
    const std::string p = write("cut" + std::to_string(cut), blob.substr(0, cut));
    const std::string msg = user_error([&] { (void)g::GgufReader{p}; });
    EXPECT_EQ(msg.rfind(p + ": " + (cut == 2 ? "not a GGUF file" : "truncated GGUF file"), 0), 0u) << msg;
  }
  std::string magic = blob;
  magic[0] = 'X';
  const std::string p = write("magic", magic);
  EXPECT_EQ(user_error([&] { (void)g::GgufReader{p}; }), p + ": not a GGUF file (the first 4 bytes are not \"GGUF\")");
  std::string version = blob;
  version[4] = 9;
  const std::string v = write("version", version);
  EXPECT_EQ(user_error([&] { (void)g::GgufReader{v}; }), v + ": GGUF version 9 is not supported (valid: 2, 3)");
}

TEST(Gguf, AFailedWriteLeavesNoFile) {
  const std::string dir = fresh_dir("fail"), path = dir + "/m.gguf";
  std::vector<g::TensorToWrite> t = {{"a", {3}, g::GgmlType::F32, []() -> std::vector<uint8_t> {
                                        throw meshtrain::UserError("no bytes");
                                      }}};
  EXPECT_THROW(g::write_gguf(path, {}, t), meshtrain::UserError);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

// convert_hf_to_gguf.py's permute: row (h, i, j) of [heads, 2, head_dim/2, in] moves to (h, j, i).
TEST(Gguf, QkPermutationIsConvertsAndUndoes) {
  const int64_t heads = 2, head_dim = 6, in = 3;
  const at::Tensor w = at::arange(heads * head_dim * in, at::kFloat).reshape({heads * head_dim, in});
  const at::Tensor p = g::permute_for_gguf(w, heads);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < head_dim / 2; ++j)
        EXPECT_TRUE(at::equal(p[h * head_dim + j * 2 + i], w[h * head_dim + i * head_dim / 2 + j]));
  EXPECT_TRUE(at::equal(g::unpermute_from_gguf(p, heads), w));
}

// llama-quantize's Q4_K_M over 32 layers: Q6_K for attn_v / ffn_down in layers 0-3, 6, 9, …, 27, 28-31.
TEST(Gguf, Q4KMTypeRule) {
  const g::ExportType e = g::export_type("q4_k_m");
  std::vector<int64_t> more;
  for (int64_t i = 0; i < 32; ++i) {
    const g::LlamaTensorName v{"", "blk." + std::to_string(i) + ".attn_v.weight", {1024, 4096}, 0, i};
    const g::LlamaTensorName q{"", "blk." + std::to_string(i) + ".attn_q.weight", {4096, 4096}, 0, i};
    EXPECT_EQ(g::tensor_type(e, q, 32, false), g::GgmlType::Q4_K);
    if (g::tensor_type(e, v, 32, false) == g::GgmlType::Q6_K) more.push_back(i);
  }
  EXPECT_EQ(more, (std::vector<int64_t>{0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31}));
  const g::LlamaTensorName out{"", "output.weight", {32000, 4096}, 0, -1}, emb{"", "token_embd.weight", {32000, 4096}, 0, -1};
  EXPECT_EQ(g::tensor_type(e, out, 32, false), g::GgmlType::Q6_K);
  EXPECT_EQ(g::tensor_type(e, emb, 32, false), g::GgmlType::Q4_K);
  EXPECT_EQ(g::tensor_type(e, emb, 32, true), g::GgmlType::Q6_K);  // tied: the embedding is the head
  const g::LlamaTensorName narrow{"", "blk.5.attn_q.weight", {64, 64}, 0, 5}, norm{"", "blk.5.ffn_norm.weight", {64}, 0, 5};
  EXPECT_EQ(g::tensor_type(e, narrow, 32, false), g::GgmlType::Q5_0);  // rows of 64: no K-quant
  EXPECT_EQ(g::tensor_type(e, norm, 32, false), g::GgmlType::F32);
  EXPECT_EQ(g::tensor_type(g::export_type("q8_0"), {"", "x", {8, 48}, 0, 0}, 32, false), g::GgmlType::F16);
  EXPECT_EQ(user_error([] { (void)g::export_type("q3_k"); }), "--type: given 'q3_k'; valid: f32, f16, bf16, q8_0, q4_0, q4_k_m");
}

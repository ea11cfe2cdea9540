// Nf4Tensor and the NF4 base of a QLoRA model: codes that are the nearest level to each value over its block's
// absmax (a brute-force search here), the layout (two codes a byte, a short last block, 8-bit absmaxes in
// blocks of 256), exact zeros and constant blocks, and nf4_linear's forward and gradients equal to the plain
// path run on the dequantized weights — bit for bit on the CPU in fp32. (tests/reference/nf4_test.py holds the
// codec to a reference written from the QLoRA paper's definition, and to bitsandbytes where it is installed.)
#include "meshtrain/model/nf4_tensor.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "meshtrain/core/config_schema.h"
#include "meshtrain/model/block.h"
#include "meshtrain/model/linear/lora_linear.h"
#include "meshtrain/model/linear/nf4_linear.h"
#include "meshtrain/model/nf4_base.h"
#include "meshtrain/model/transformer.h"
#include "support/tiny_model.h"

using namespace meshtrain;
using model::Nf4Tensor;

namespace {

// The codes unpacked: one int64 per value.
at::Tensor unpacked(const Nf4Tensor& q) {
  const auto idx = at::stack({at::bitwise_right_shift(q.codes, 4), at::bitwise_and(q.codes, 15)}, 1).reshape(-1);
  return idx.narrow(0, 0, q.numel()).to(at::kLong);
}

// The nearest level to each x / absmax of its block (ties to the lower level), by trying all 16.
at::Tensor nearest_levels(const at::Tensor& x) {
  const auto flat = x.reshape(-1).to(at::kFloat);
  const int64_t n = flat.numel();
  const auto& l = Nf4Tensor::levels();
  const auto levels = at::tensor(at::ArrayRef<float>(l.data(), l.size()));
  std::vector<at::Tensor> out;
  for (int64_t start = 0; start < n; start += Nf4Tensor::kBlock) {
    const auto block = flat.narrow(0, start, std::min<int64_t>(Nf4Tensor::kBlock, n - start));
    const auto am = block.abs().max().clamp_min(1e-38);
    const auto scaled = start + Nf4Tensor::kBlock <= n ? block * (1.0 / am) : block / am;
    // argmin returns the first minimum: the lower level on a tie.
    out.push_back((scaled.clamp(-1, 1).unsqueeze(1) - levels.unsqueeze(0)).abs().argmin(1));
  }
  return at::cat(out);
}

ModelConfig qlora_model(BaseQuant quant) {
  ModelConfig m = testing_support::tiny_model({.family = "llama", .vocab_size = 50, .n_kv_head = 2});
  m.lora_rank = 4;
  m.lora_alpha = 8.0;
  m.lora_targets = split_field_list("q,v,down");
  m.base_quant = quant;
  Config c;
  c.model = m;
  resolve(c, 1);
  return c.model;
}

}  // namespace

TEST(Nf4Tensor, CodesAreTheNearestLevelOfEachValueOverItsBlocksAbsmax) {
  at::manual_seed(1);
  for (int64_t n : {int64_t{1}, int64_t{63}, int64_t{64}, int64_t{65}, int64_t{1000}, int64_t{64 * 256 + 7}}) {
    const auto x = at::randn({n}) * 0.02;
    const auto q = Nf4Tensor::quantize(x);
    EXPECT_EQ(q.codes.numel(), (n + 1) / 2) << n;
    EXPECT_EQ(q.blocks(), (n + 63) / 64) << n;
    EXPECT_EQ(q.absmax_scales.numel(), (q.blocks() + 255) / 256) << n;
    EXPECT_TRUE(at::equal(unpacked(q), nearest_levels(x))) << n;
    // Each dequantized value is its level times its block's dequantized absmax, which is within half a step
    // of the 8-bit map (at most 1/127 of the block group's largest |absmax − offset|) of the true one.
    const auto deq = q.dequantize(at::kFloat);
    EXPECT_EQ(deq.sizes(), x.sizes());
    const auto& l = Nf4Tensor::levels();
    const auto levels = at::tensor(at::ArrayRef<float>(l.data(), l.size()));
    const auto per_value = q.absmax().repeat_interleave(64).narrow(0, 0, n);
    EXPECT_TRUE(at::equal(deq, levels.index({unpacked(q)}) * per_value)) << n;
  }
}

TEST(Nf4Tensor, ZerosAndConstantBlocksComeBackExactly) {
  const auto zeros = at::zeros({3, 70});
  EXPECT_TRUE(at::equal(Nf4Tensor::quantize(zeros).dequantize(at::kFloat), zeros));
  // Every block the same constant: absmax − offset is 0 everywhere, which the map holds exactly, and the
  // constant is the block's absmax times level 1.
  const auto constant = at::full({5, 64}, 0.125f);
  EXPECT_TRUE(at::equal(Nf4Tensor::quantize(constant).dequantize(at::kFloat), constant));
  const auto negative = at::full({130}, -3.5f);
  EXPECT_TRUE(at::equal(Nf4Tensor::quantize(negative).dequantize(at::kFloat), negative));
}

TEST(Nf4Tensor, DynamicMapIsBitsandbytesSigned8BitMap) {
  const auto map = Nf4Tensor::dynamic_map(at::kCPU);
  ASSERT_EQ(map.numel(), 256);
  EXPECT_TRUE(at::equal(std::get<0>(map.sort()), map));  // sorted
  EXPECT_EQ(map[0].item<float>(), -0.99296874f);          // −(0.9859375 + 1) / 2 in fp32: the last midpoint at 10^0
  EXPECT_EQ(map[255].item<float>(), 1.0f);
  EXPECT_EQ(map.eq(0).sum().item<int64_t>(), 1);
}

TEST(Nf4Tensor, HalfAByteAParameterPlusScales) {
  const auto q = Nf4Tensor::quantize(at::randn({4096, 1024}));
  const double per_param = static_cast<double>(q.bytes()) / static_cast<double>(q.numel());
  EXPECT_NEAR(per_param, 0.5 + 1.0 / 64 + 4.0 / (64 * 256), 1e-3);
}

TEST(Nf4Linear, ForwardAndInputGradientEqualThePlainPathOnTheDequantizedWeight) {
  at::manual_seed(2);
  const auto w = at::randn({24, 40}) * 0.05;
  const auto q = Nf4Tensor::quantize(w);
  const auto wd = q.dequantize(at::kFloat);
  const auto x0 = at::randn({3, 5, 40});
  const auto dy = at::randn({3, 5, 24});
  auto x1 = x0.clone().requires_grad_(true), x2 = x0.clone().requires_grad_(true);
  const auto y1 = model::nf4_linear(x1, q, at::Tensor());
  const auto y2 = at::linear(x2, wd);
  EXPECT_TRUE(at::equal(y1, y2));
  y1.backward(dy);
  y2.backward(dy);
  EXPECT_TRUE(at::equal(x1.grad(), x2.grad()));
}

// A QLoRA model against the LoRA model whose frozen base is the NF4 round trip of the same weights: the same
// loss and the same adapter gradients, bit for bit; the NF4 weights are no parameters any more.
TEST(Nf4Linear, QloraModelEqualsLoraOverTheDequantizedBase) {
  model::Transformer qlora(qlora_model(BaseQuant::nf4)), lora(qlora_model(BaseQuant::none));
  qlora->init_weights(5);
  lora->init_weights(5);
  {
    at::NoGradGuard no_grad;  // adapters' B non-zero, so they take part in the forward
    for (auto* net : {&qlora, &lora})
      for (auto& item : (*net)->named_parameters())
        if (item.key().find("lora_B") != std::string::npos) item.value().fill_(0.01);
  }
  for (auto* net : {&qlora, &lora})
    for (auto& item : (*net)->named_parameters())
      item.value().set_requires_grad(model::is_lora_parameter(item.key()));
  const auto before = qlora->named_parameters().size();
  std::map<std::string, at::Tensor> weights;
  for (auto& item : qlora->named_parameters()) weights[item.key()] = item.value().detach().clone();
  model::quantize_base(*qlora, at::kCPU, [&](const std::string& name, at::IntArrayRef) { return weights.at(name); });
  EXPECT_EQ(qlora->named_parameters().size(), before - 7 * static_cast<size_t>(qlora->config().n_layer));
  // The LoRA model's base: each block linear's weight replaced by its round trip.
  std::map<std::string, at::Tensor> base;
  for (auto& item : lora->named_parameters()) base[item.key()] = item.value().detach();
  model::round_trip_nf4_base(qlora->config(), base);
  {
    at::NoGradGuard no_grad;
    for (auto& item : lora->named_parameters()) item.value().copy_(base.at(item.key()));
  }
  const auto tokens = at::randint(50, {2, 8}), targets = at::randint(50, {2, 8});
  const auto l1 = qlora->head_loss(qlora->run_blocks(qlora->embed(tokens), 8), targets);
  const auto l2 = lora->head_loss(lora->run_blocks(lora->embed(tokens), 8), targets);
  EXPECT_TRUE(at::equal(l1, l2));
  l1.backward();
  l2.backward();
  std::map<std::string, at::Tensor> g2;
  for (auto& item : lora->named_parameters())
    if (item.value().grad().defined()) g2[item.key()] = item.value().grad();
  int64_t compared = 0;
  for (auto& item : qlora->named_parameters()) {
    if (!item.value().grad().defined()) continue;
    EXPECT_TRUE(at::equal(item.value().grad(), g2.at(item.key()))) << item.key();
    ++compared;
  }
  EXPECT_EQ(compared, 2 * 3 * qlora->config().n_layer);
  // The merged weight of an adapted NF4 linear starts from the dequantized base.
  auto* wq = dynamic_cast<model::LoraLinearImpl*>(qlora->blocks->ptr<model::BlockImpl>(0)->attn->wq.get());
  ASSERT_NE(wq, nullptr);
  ASSERT_NE(wq->nf4_weight(), nullptr);
  EXPECT_TRUE(at::equal(wq->weight_values(), base.at("blocks.0.attn.wq.weight")));
}

// The rows FSDP shards (Nf4Tensor::as_rows): one per fp32 scale — 16384 values, 8192 code bytes, 256 absmax
// codes, the scale's 4 bytes — zero past the end, so a piece of whole rows holds whole quantization blocks;
// over_rows reads the same values back. A layer whose rows a layout holds (LinearImpl::hold_nf4_rows) runs
// over them, and new values it is given go to the layout's store, not into the layer.
TEST(Nf4Tensor, RowsHoldWholeQuantizationBlocks) {
  const int64_t n = 3 * Nf4Tensor::kRowValues + 100;  // 770 blocks, a short last one: 4 rows, the last short
  at::manual_seed(3);
  const Nf4Tensor q = Nf4Tensor::quantize(at::randn({n}));
  const auto rows = q.as_rows();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(q.rows(), 4);
  EXPECT_EQ(rows[0].sizes(), at::IntArrayRef({4, 8192}));
  EXPECT_EQ(rows[1].sizes(), at::IntArrayRef({4, 256}));
  EXPECT_EQ(rows[2].sizes(), at::IntArrayRef({4, 4}));
  for (int64_t r = 0; r < 4; ++r) {  // row r: its own 256 blocks' codes, absmax codes and scale
    const int64_t codes = std::min<int64_t>(8192, q.codes.numel() - r * 8192);
    const int64_t blocks = std::min<int64_t>(256, q.blocks() - r * 256);
    EXPECT_TRUE(at::equal(rows[0][r].narrow(0, 0, codes), q.codes.narrow(0, r * 8192, codes)));
    EXPECT_EQ(rows[0][r].narrow(0, codes, 8192 - codes).count_nonzero().item<int64_t>(), 0);
    EXPECT_TRUE(at::equal(rows[1][r].narrow(0, 0, blocks), q.absmax_codes.narrow(0, r * 256, blocks)));
    EXPECT_EQ(rows[2][r].view(at::kFloat).item<float>(), q.absmax_scales[r].item<float>());
  }
  EXPECT_TRUE(at::equal(q.over_rows(rows).dequantize(at::kFloat), q.dequantize(at::kFloat)));

  model::Linear lin(64, 1024, false, at::TensorOptions());  // 65536 values: 4 rows
  lin->weight.set_requires_grad(false);
  at::manual_seed(4);
  lin->hold_weight_as_nf4(Nf4Tensor::quantize(at::randn({1024, 64})));
  const at::Tensor x = at::randn({2, 64});
  const at::Tensor before = lin->forward(x);
  std::vector<at::Tensor> held = lin->nf4_weight()->as_rows(), stored;
  lin->hold_nf4_rows(held, [&](const std::vector<at::Tensor>& r) { stored = r; });
  EXPECT_TRUE(lin->nf4_weight()->codes.is_meta());  // the layer keeps sizes only
  EXPECT_TRUE(at::equal(lin->forward(x), before));
  const Nf4Tensor next = Nf4Tensor::quantize(at::randn({1024, 64}));
  lin->hold_weight_as_nf4(next);
  ASSERT_EQ(stored.size(), 3u);  // handed to the store, which writes them where the layer reads
  for (size_t j = 0; j < 3; ++j) held[j].copy_(stored[j]);
  EXPECT_TRUE(at::equal(lin->weight_values(), next.dequantize(at::kFloat)));
}

// Packed documents (model/documents.h): several documents in one row, positions restarting at each and
// block-causal attention, give the same loss and gradients as the documents run one by one — on the CPU's
// masked SDPA, for both families (RoPE and learned positions), with GQA, with the chunked head + loss.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <cmath>

#include "meshtrain/model/documents.h"
#include "meshtrain/model/transformer.h"
#include "support/tiny_model.h"

using namespace meshtrain;

namespace {

ModelConfig tiny_doc_model(const std::string& family) {
  return testing_support::tiny_model({.family = family, .n_kv_head = family == "llama" ? 2 : 4,
                                      .d_ff = family == "gpt2" ? 128 : 96, .max_seq_len = 32, .rope_theta = 10000});
}

// Targets of a document: the next token, -100 at its last position (nothing of it predicts the next one).
at::Tensor doc_targets(const at::Tensor& doc) {
  auto t = doc.roll(-1, 0).clone();
  t[-1] = -100;
  return t;
}

std::vector<at::Tensor> grads(model::Transformer& net) {
  std::vector<at::Tensor> out;
  for (auto& p : net->parameters()) out.push_back(p.grad().clone());
  return out;
}

void zero_grads(model::Transformer& net) {
  for (auto& p : net->parameters()) p.mutable_grad() = at::Tensor();
}

// Documents of `lengths` packed into rows of T tokens: row-major, a document never split (the test's rows
// are chosen to fit), the rest of a row padding (token 0, target -100, its own document).
struct Packed {
  at::Tensor tokens, targets, positions;
};

Packed pack(const std::vector<at::Tensor>& docs, const std::vector<std::vector<int>>& rows, int64_t T) {
  Packed p{at::zeros({static_cast<int64_t>(rows.size()), T}, at::kLong),
           at::full({static_cast<int64_t>(rows.size()), T}, -100, at::kLong),
           at::zeros({static_cast<int64_t>(rows.size()), T}, at::kLong)};
  for (size_t r = 0; r < rows.size(); ++r) {
    int64_t at_ = 0;
    for (int d : rows[r]) {
      const int64_t n = docs[d].size(0);
      p.tokens[r].narrow(0, at_, n).copy_(docs[d]);
      p.targets[r].narrow(0, at_, n).copy_(doc_targets(docs[d]));
      p.positions[r].narrow(0, at_, n).copy_(at::arange(n, at::kLong));
      at_ += n;
    }
    if (at_ < T) p.positions[r].narrow(0, at_, T - at_).copy_(at::arange(T - at_, at::kLong));
  }
  return p;
}

}  // namespace

TEST(Documents, BlockCausalMaskAndCumulativeLengths) {
  auto pos = at::tensor({0, 1, 2, 0, 1, 3, 0, 0}, at::kLong).view({2, 4});  // row 1 starts mid-document
  auto m = model::block_causal_mask(pos).squeeze(1);
  EXPECT_TRUE(m[0][2][0].item<bool>());
  EXPECT_FALSE(m[0][3][2].item<bool>());  // another document
  EXPECT_FALSE(m[0][1][2].item<bool>());  // the future
  EXPECT_TRUE(m[1][1][0].item<bool>());   // position 3 at a row start continues nothing: same document as col 0
  EXPECT_FALSE(m[1][2][1].item<bool>());
  auto d = model::documents_from_positions(pos);
  EXPECT_TRUE(at::equal(d.cu_seqlens, at::tensor({0, 3, 4, 6, 7, 8}, at::kInt))) << d.cu_seqlens;
  EXPECT_EQ(d.max_len, 3);
}

TEST(Documents, PackedEqualsOneByOneInLossAndGradients) {
  for (const std::string family : {"llama", "gpt2"}) {
    for (int64_t chunk : {0, 512}) {
      at::manual_seed(3);
      model::Transformer net(tiny_doc_model(family));
      net->init_weights(7);
      net->set_loss_chunk_bytes(chunk);
      std::vector<at::Tensor> docs;
      for (int64_t n : {5, 7, 3, 9, 4}) docs.push_back(at::randint(1, 64, {n}, at::kLong));
      // Unpacked: each document alone; the loss over all their targets is Σ sum_d / N.
      int64_t N = 0;
      for (const auto& d : docs) N += d.size(0) - 1;
      at::Tensor want_loss = at::zeros({});
      for (const auto& d : docs) {
        auto l = net->loss(d.unsqueeze(0), doc_targets(d).unsqueeze(0)) * (static_cast<double>(d.size(0) - 1) / N);
        l.backward();
        want_loss += l.detach();
      }
      const auto want = grads(net);
      zero_grads(net);
      // Packed: rows of 16 tokens holding {5, 7, 3 + padding 1} and {9, 4 + padding 3}.
      auto p = pack(docs, {{0, 1, 2}, {3, 4}}, 16);
      auto packed = model::documents_from_positions(p.positions);
      auto got_loss = net->loss(p.tokens, p.targets, &packed);
      got_loss.backward();
      const auto got = grads(net);
      const std::string what = family + (chunk ? " chunked loss" : " full logits");
      EXPECT_NEAR(got_loss.item<double>(), want_loss.item<double>(), 1e-5) << what;
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_TRUE(at::allclose(got[i], want[i], 1e-4, 1e-6)) << what << ": parameter " << i << " max diff "
                                                                << (got[i] - want[i]).abs().max().item<double>();
      // Without the documents the same rows attend across documents: a different loss (the test can fail).
      EXPECT_GT(std::abs(net->loss(p.tokens, p.targets).item<double>() - want_loss.item<double>()), 1e-4) << what;
    }
  }
}

TEST(Documents, MaskedTargetsTakeNoLossInEveryLossPath) {
  at::manual_seed(4);
  model::Transformer net(tiny_doc_model("llama"));
  net->init_weights(5);
  auto x = at::randint(0, 64, {2, 12}, at::kLong);
  auto t = at::randint(0, 64, {2, 12}, at::kLong);
  auto masked = t.clone();
  masked.narrow(1, 0, 5).fill_(-100);
  const double full = net->loss(x, masked).item<double>();
  const double plain = at::cross_entropy_loss(net->forward(x).narrow(1, 5, 7).reshape({-1, 64}),
                                              t.narrow(1, 5, 7).reshape({-1})).item<double>();
  EXPECT_NEAR(full, plain, 1e-5);
  net->set_loss_chunk_bytes(4 * 64 * 5);  // chunks of 5 rows: some all masked, some mixed
  EXPECT_NEAR(net->loss(x, masked).item<double>(), plain, 1e-5);
}

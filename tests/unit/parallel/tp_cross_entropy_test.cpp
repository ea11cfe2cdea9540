// Vocab-parallel cross-entropy against at::cross_entropy_loss: with one rank holding the whole vocabulary, and
// with 3 ranks (threads, each its own CPU communicator over an in-process store) holding uneven vocabulary
// blocks — the loss and every logit's gradient must match the full computation (fp32, 1e-6).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <thread>

#include "meshtrain/comm/cpu_communicator.h"
#include "meshtrain/comm/fake_communicator.h"
#include "meshtrain/parallel/tp/tp_cross_entropy.h"
#include "meshtrain/parallel/tp/tp_vocab_parallel_embedding.h"

using namespace meshtrain;
using namespace meshtrain::parallel;

namespace {

constexpr int64_t kN = 6, kVocab = 11;

struct Case {
  at::Tensor logits, targets, loss, grad;  // reference loss (mean) and d loss / d logits
};

Case reference() {
  at::manual_seed(7);
  Case c;
  c.logits = at::randn({kN, kVocab}) * 3;
  c.targets = at::tensor(std::vector<int64_t>{0, 10, 4, 5, 3, 7});
  auto x = c.logits.clone().requires_grad_(true);
  c.loss = at::cross_entropy_loss(x, c.targets);
  c.loss.backward();
  c.grad = x.grad();
  return c;
}

}  // namespace

TEST(TpCrossEntropy, OneRankMatchesCrossEntropy) {
  auto ref = reference();
  auto x = ref.logits.clone().requires_grad_(true);
  auto loss = vocab_parallel_cross_entropy(x, ref.targets, 0, comm::make_fake_communicator(0, 1)).mean();
  loss.backward();
  EXPECT_NEAR(loss.item<float>(), ref.loss.item<float>(), 1e-6);
  EXPECT_TRUE(at::allclose(x.grad(), ref.grad, 1e-5, 1e-6));
}

TEST(TpCrossEntropy, ThreeRanksWithUnevenBlocksMatchCrossEntropy) {
  using namespace std::chrono_literals;
  auto ref = reference();
  constexpr int kRanks = 3;  // 11 rows: blocks of 3, 4, 4
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<at::Tensor> losses(kRanks), grads(kRanks);
  std::vector<std::string> errors(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto c = comm::make_cpu_communicator(store, r, kRanks, "tp_ce", 20000ms);
        auto b = vocab_block(kVocab, r, kRanks);
        auto x = ref.logits.narrow(1, b.start, b.rows()).clone().requires_grad_(true);
        auto loss = vocab_parallel_cross_entropy(x, ref.targets, b.start, c).mean();
        loss.backward();
        losses[r] = loss.detach();
        grads[r] = x.grad();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) ASSERT_EQ(errors[r], "") << "rank " << r;
  for (int r = 0; r < kRanks; ++r) EXPECT_NEAR(losses[r].item<float>(), ref.loss.item<float>(), 1e-6) << r;
  EXPECT_TRUE(at::allclose(at::cat(grads, 1), ref.grad, 1e-5, 1e-6));
}

TEST(TpCrossEntropy, VocabBlocksCoverTheVocabularyEvenly) {
  int64_t next = 0;
  for (int r = 0; r < 4; ++r) {
    auto b = vocab_block(50257, r, 4);
    EXPECT_EQ(b.start, next);
    EXPECT_TRUE(b.rows() == 12564 || b.rows() == 12565) << b.rows();
    EXPECT_EQ(b.max_rows, 12565);
    next = b.end;
  }
  EXPECT_EQ(next, 50257);
}

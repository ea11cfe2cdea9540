// The chunked head + loss equals linear → fp32 cross-entropy, in value and in both gradients, with the
// vocabulary padded for the GEMMs or not.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <string>

#include "meshtrain/model/linear/linear_cross_entropy.h"

using namespace meshtrain;

TEST(LinearCrossEntropy, MatchesLinearThenCrossEntropyForAnyChunking) {
  at::manual_seed(0);
  const int64_t N = 37, d = 16, V = 53;
  auto x0 = at::randn({N, d}, at::kDouble), w0 = at::randn({V, d}, at::kDouble);
  auto t = at::randint(0, V, {N}, at::kLong);

  auto x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
  auto ref = at::cross_entropy_loss(at::linear(x, w), t);
  ref.backward();
  for (int64_t chunk : {1, 5, 36, 37, 1000}) {
    auto xc = x0.clone().requires_grad_(true), wc = w0.clone().requires_grad_(true);
    auto loss = model::linear_cross_entropy(xc, wc, t, chunk);
    (loss * 3.0).backward();  // the incoming gradient scales both
    EXPECT_NEAR(loss.item<double>(), ref.item<double>(), 1e-6) << "chunk " << chunk;
    EXPECT_TRUE(at::allclose(xc.grad(), 3.0 * x.grad(), 1e-9, 1e-12)) << "chunk " << chunk;
    EXPECT_TRUE(at::allclose(wc.grad(), 3.0 * w.grad(), 1e-9, 1e-12)) << "chunk " << chunk;
  }
}

TEST(LinearCrossEntropy, NoGradModeComputesOnlyTheLoss) {
  at::NoGradGuard no_grad;
  auto x = at::randn({4, 8}), w = at::randn({10, 8});
  auto t = at::randint(0, 10, {4}, at::kLong);
  auto loss = model::linear_cross_entropy(x, w, t, 3);
  EXPECT_NEAR(loss.item<double>(), at::cross_entropy_loss(at::linear(x, w), t).item<double>(), 1e-5);
}

TEST(LinearCrossEntropy, PaddedVocabularyGivesTheSameLossAndGradients) {
  at::manual_seed(1);
  const int64_t N = 37, d = 16, V = 53;  // V a multiple of nothing: padded to 56 or 64 rows
  for (auto dt : {at::kDouble, at::kFloat}) {
    auto x0 = at::randn({N, d}, dt), w0 = at::randn({V, d}, dt);
    auto t = at::randint(0, V, {N}, at::kLong);
    t.slice(0, 0, N, 7).fill_(-100);  // some masked rows
    t[1] = V - 1;                     // the last real class, next to the padding
    const double tol = dt == at::kDouble ? 1e-12 : 1e-5;
    for (int64_t chunk : {5, 37}) {
      auto x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
      auto ref = model::linear_cross_entropy(x, w, t, chunk);
      ref.backward();
      for (int64_t multiple : {8, 64}) {
        auto xp = x0.clone().requires_grad_(true), wp = w0.clone().requires_grad_(true);
        auto loss = model::linear_cross_entropy(xp, wp, t, chunk, multiple);
        loss.backward();
        const std::string what = std::string(c10::toString(dt)) + " chunk " + std::to_string(chunk) +
                                 " padded to a multiple of " + std::to_string(multiple);
        EXPECT_NEAR(loss.item<double>(), ref.item<double>(), tol) << what;
        ASSERT_EQ(wp.grad().sizes(), w.grad().sizes()) << what;
        EXPECT_TRUE(at::allclose(xp.grad(), x.grad(), tol, tol)) << what;
        EXPECT_TRUE(at::allclose(wp.grad(), w.grad(), tol, tol)) << what;
      }
    }
  }
}

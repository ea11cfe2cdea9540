// The step's micro-batches cut into a pipeline's m (src/parallel/pipeline/pipeline_batch.h): each piece's
// packed documents are those of its own rows, and the loss weights keep the step's token mean of loss-masked
// data however the pieces cut the trainer's micro-batches — a piece without a target weighing 0.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cmath>

#include "meshtrain/core/error.h"
#include "parallel/pipeline/pipeline_batch.h"

using namespace meshtrain;
using namespace meshtrain::parallel;

namespace {

constexpr int64_t kT = 8;

// Positions [rows, kT] of documents of 1 to 5 tokens, drawn from `seed`.
at::Tensor random_positions(int64_t rows, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor pos = at::zeros({rows, kT}, at::kLong);
  auto p = pos.accessor<int64_t, 2>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < kT;)
      for (int64_t len = at::randint(1, 6, {1}, gen, at::kLong).item<int64_t>(), i = 0; i < len && t < kT; ++i, ++t)
        p[r][t] = i;
  return pos;
}

ParallelModel::MicroBatch batch(int64_t rows, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto tokens = at::randint(50, {rows, kT}, gen, at::kLong);
  return {tokens, tokens.clone(), {}, std::nullopt};
}

// The mean of `values` over the unmasked `targets` (what a piece's loss is), 0 / 0 left as it falls.
double masked_mean(const at::Tensor& values, const at::Tensor& targets) {
  auto keep = targets.ne(-100);
  return (values * keep).sum().item<double>() / keep.sum().item<double>();
}

}  // namespace

TEST(PipelineBatch, PiecesCarryTheirOwnDocuments) {
  // Two micro-batches of 3 rows cut into 3 pieces of 2: the middle piece spans both micro-batches.
  std::vector<ParallelModel::MicroBatch> batches{batch(3, 1), batch(3, 2)};
  for (size_t b = 0; b < batches.size(); ++b)
    batches[b].docs = model::documents_from_positions(random_positions(3, 10 + b));
  const auto pieces = cut_pipeline_batch(batches, 3);
  ASSERT_EQ(pieces.size(), 3u);
  const at::Tensor all = at::cat({batches[0].docs.positions, batches[1].docs.positions});
  for (int64_t p = 0; p < 3; ++p) {
    const PipelinePiece& piece = pieces[static_cast<size_t>(p)];
    ASSERT_TRUE(piece.docs.packed());
    const at::Tensor mine = all.narrow(0, 2 * p, 2);
    EXPECT_TRUE(at::equal(piece.docs.positions, mine)) << "piece " << p;
    const model::Documents want = model::documents_from_positions(mine);
    EXPECT_TRUE(at::equal(piece.docs.cu_seqlens, want.cu_seqlens)) << "piece " << p << ": " << piece.docs.cu_seqlens
                                                                    << " vs " << want.cu_seqlens;
    EXPECT_EQ(piece.docs.max_len, want.max_len) << "piece " << p;
    EXPECT_FALSE(piece.weight.defined());  // unweighted: the executor divides by m
  }
}

TEST(PipelineBatch, WeightsKeepTheStepsTokenMean) {
  // Two micro-batches of 4 rows (the trainer's grad_accum 2) cut into 4 pieces of 2; rows 2 and 3 (piece 1)
  // have no unmasked target, the rest random prompt masks.
  std::vector<ParallelModel::MicroBatch> batches{batch(4, 3), batch(4, 4)};
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  for (auto& b : batches) b.targets.masked_fill_(at::rand({4, kT}, gen).lt(0.4), -100);
  batches[0].targets.narrow(0, 2, 2).fill_(-100);
  const at::Tensor caller_targets = batches[0].targets.clone();
  // As the trainer weighs them over 2 data-parallel ranks whose step has `global` unmasked targets.
  const double global = 40;
  for (auto& b : batches) b.loss_weight = b.targets.ne(-100).sum().item<double>() * 2 / global;
  const at::Tensor values = at::rand({8, kT}, gen);  // a per-token "loss"

  double want = 0;
  for (size_t b = 0; b < 2; ++b)
    want += *batches[b].loss_weight * masked_mean(values.narrow(0, 4 * static_cast<int64_t>(b), 4), batches[b].targets);
  const auto pieces = cut_pipeline_batch(batches, 4);
  double got = 0;
  for (int64_t p = 0; p < 4; ++p) {
    const PipelinePiece& piece = pieces[static_cast<size_t>(p)];
    ASSERT_TRUE(piece.weight.defined());
    const double mean = masked_mean(values.narrow(0, 2 * p, 2), piece.targets);
    ASSERT_TRUE(std::isfinite(mean)) << "piece " << p << " has no target to average";
    got += piece.weight.item<double>() * mean;
  }
  EXPECT_NEAR(got, want, 1e-6);
  // The piece without a target weighs 0 and runs on one target made valid; the caller's targets are untouched.
  EXPECT_EQ(pieces[1].weight.item<float>(), 0.0f);
  EXPECT_EQ(pieces[1].targets.ne(-100).sum().item<int64_t>(), 1);
  EXPECT_TRUE(at::equal(batches[0].targets, caller_targets));
}

TEST(PipelineBatch, RowsMustSplitIntoTheSchedulesMicroBatches) {
  EXPECT_THROW(cut_pipeline_batch({batch(3, 1)}, 2), Error);
}

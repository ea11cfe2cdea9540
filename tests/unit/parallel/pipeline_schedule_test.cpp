// The schedules as data against the published tables: Megatron-LM's 1F1B and interleaved 1F1B (Narayanan et
// al. 2021, figure 4: pp 4, m 8, v 2), Zero Bubble's ZB-H1 (Qi et al. 2023, figure 3: pp 4, m 8), GPipe; and
// against the closed forms of their step length with fixed action costs (F 1, B 2 = I 1 + W 1).
#include <gtest/gtest.h>

#include "meshtrain/core/error.h"
#include "meshtrain/parallel/pipeline/pipeline_schedule.h"

using namespace meshtrain;
using namespace meshtrain::parallel;

TEST(PipelineSchedule, GPipeRunsEveryForwardThenEveryBackward) {
  auto s = make_pipeline_schedule(PipelineKind::gpipe, 2, 4);
  EXPECT_EQ(s.describe(0), "F0 F1 F2 F3 B0 B1 B2 B3");
  EXPECT_EQ(s.describe(1), "F0 F1 F2 F3 B0 B1 B2 B3");
}

TEST(PipelineSchedule, OneFOneBMatchesMegatronTable) {
  auto s = make_pipeline_schedule(PipelineKind::one_f_one_b, 4, 8);
  EXPECT_EQ(s.describe(0), "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  EXPECT_EQ(s.describe(1), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");
  EXPECT_EQ(s.describe(2), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
  EXPECT_EQ(s.describe(3), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
}

TEST(PipelineSchedule, OneFOneBWithFewerMicroBatchesThanStages) {
  auto s = make_pipeline_schedule(PipelineKind::one_f_one_b, 4, 2);
  EXPECT_EQ(s.describe(0), "F0 F1 B0 B1");
  EXPECT_EQ(s.describe(3), "F0 B0 F1 B1");
}

TEST(PipelineSchedule, InterleavedMatchesMegatronTable) {
  auto s = make_pipeline_schedule(PipelineKind::interleaved_1f1b, 4, 8, 2);
  EXPECT_EQ(s.describe(0),
            "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 F4.0 F5.0 F6.0 B0.1 F7.0 B1.1 F4.1 B2.1 F5.1 B3.1 F6.1 B0.0 "
            "F7.1 B1.0 B2.0 B3.0 B4.1 B5.1 B6.1 B7.1 B4.0 B5.0 B6.0 B7.0");
  EXPECT_EQ(s.describe(3),
            "F0.0 F1.0 F2.0 F3.0 F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.1 B3.1 F4.0 B0.0 F5.0 B1.0 F6.0 B2.0 F7.0 B3.0 "
            "F4.1 B4.1 F5.1 B5.1 F6.1 B6.1 F7.1 B7.1 B4.0 B5.0 B6.0 B7.0");
  EXPECT_EQ(s.virtual_stages(), 8);
  EXPECT_EQ(s.virtual_stage(3, 1), 7);
}

TEST(PipelineSchedule, ZeroBubbleH1MatchesPaperTable) {
  auto s = make_pipeline_schedule(PipelineKind::zb_h1, 4, 8);
  EXPECT_EQ(s.describe(0), "F0 F1 F2 F3 I0 W0 F4 I1 W1 F5 I2 W2 F6 I3 W3 F7 I4 W4 I5 W5 I6 W6 I7 W7");
  EXPECT_EQ(s.describe(1), "F0 F1 F2 I0 F3 I1 W0 F4 I2 W1 F5 I3 W2 F6 I4 W3 F7 I5 W4 I6 W5 I7 W6 W7");
  EXPECT_EQ(s.describe(2), "F0 F1 I0 F2 I1 F3 I2 W0 F4 I3 W1 F5 I4 W2 F6 I5 W3 F7 I6 W4 I7 W5 W6 W7");
  EXPECT_EQ(s.describe(3), "F0 I0 F1 I1 F2 I2 F3 I3 W0 F4 I4 W1 F5 I5 W2 F6 I6 W3 F7 I7 W4 W5 W6 W7");
}

TEST(PipelineSchedule, EveryActionOnceOnEveryRank) {
  for (auto kind : {PipelineKind::gpipe, PipelineKind::one_f_one_b, PipelineKind::interleaved_1f1b,
                    PipelineKind::zb_h1}) {
    const int v = kind == PipelineKind::interleaved_1f1b ? 3 : 1;
    auto s = make_pipeline_schedule(kind, 4, 12, v);
    const size_t per_micro = kind == PipelineKind::zb_h1 ? 3 : 2;  // F + B, or F + I + W
    for (const auto& list : s.ranks) EXPECT_EQ(list.size(), per_micro * 12 * v) << kind;
  }
}

// Step length with F = 1, B = 2 (I = W = 1): GPipe and 1F1B idle (pp − 1)·3 per rank, interleaving divides
// that by v in chunk units, ZB-H1 idles (pp − 1)·(F + I − W) = pp − 1 (m ≥ pp).
TEST(PipelineSchedule, StepLengthMatchesTheClosedForms) {
  for (int pp : {2, 3, 4, 8}) {
    for (int m : {pp, 2 * pp, 16}) {
      const double g = simulate_pipeline(make_pipeline_schedule(PipelineKind::gpipe, pp, m)).makespan;
      EXPECT_EQ(g, 3 * m + 3 * (pp - 1));
      auto f = simulate_pipeline(make_pipeline_schedule(PipelineKind::one_f_one_b, pp, m));
      EXPECT_EQ(f.makespan, 3 * m + 3 * (pp - 1));
      EXPECT_NEAR(f.bubble[0], ideal_bubble_fraction(pp, m), 1e-12);
      EXPECT_EQ(simulate_pipeline(make_pipeline_schedule(PipelineKind::zb_h1, pp, m)).makespan, 3 * m + pp - 1);
      for (int v : {2, 3}) {
        if (m % pp) continue;
        auto i = simulate_pipeline(make_pipeline_schedule(PipelineKind::interleaved_1f1b, pp, m, v));
        EXPECT_EQ(i.makespan, 3 * m * v + 3 * (pp - 1)) << "pp " << pp << " m " << m << " v " << v;
      }
    }
  }
}

TEST(PipelineSchedule, OneFOneBHoldsAtMostPpMicroBatchesWhereGPipeHoldsAll) {
  const int pp = 4, m = 12;
  auto g = simulate_pipeline(make_pipeline_schedule(PipelineKind::gpipe, pp, m));
  auto f = simulate_pipeline(make_pipeline_schedule(PipelineKind::one_f_one_b, pp, m));
  auto z = simulate_pipeline(make_pipeline_schedule(PipelineKind::zb_h1, pp, m));
  for (int r = 0; r < pp; ++r) {
    EXPECT_EQ(g.peak_in_flight[r], m);
    EXPECT_EQ(f.peak_in_flight[r], pp - r);
    EXPECT_LE(z.peak_in_flight[r], pp);
  }
}

TEST(PipelineSchedule, RejectsImpossibleShapes) {
  EXPECT_THROW(make_pipeline_schedule(PipelineKind::interleaved_1f1b, 4, 6, 2), Error);
  EXPECT_THROW(make_pipeline_schedule(PipelineKind::one_f_one_b, 4, 8, 2), Error);
}

// What a resume keeps and says (train/resume_settings.h): the global batch across data-parallel widths, the
// re-derived learning-rate schedule.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "meshtrain/core/error.h"
#include "meshtrain/train/resume_settings.h"

using namespace meshtrain;

namespace {

// A run of `dp` data-parallel ranks, micro-batch 4, as its checkpoint records it (the config resolved).
Config saved_run(int64_t dp, int64_t micro_batch = 4, int64_t accum = 1) {
  Config c;
  c.data.train = {kSyntheticData};
  c.train.micro_batch_size = micro_batch;
  c.train.grad_accum = accum;
  resolve(c, static_cast<int>(dp));
  return c;
}

ckpt::CheckpointMeta meta_of(const Config& saved) {
  ckpt::CheckpointMeta m;
  m.step = 2;
  m.config = nlohmann::json::parse(to_json(saved));
  return m;
}

}  // namespace

TEST(ResumeSettings, DerivesTheAccumulationThatKeepsTheGlobalBatch) {
  const auto d = train::keep_global_batch_for(saved_run(1), 1, "ck", meta_of(saved_run(2)));
  EXPECT_EQ(d.grad_accum, 2);
  EXPECT_NE(d.note.find("train.grad_accum 1 → 2 keeps its global batch of 8 (micro_batch_size 4 × grad_accum 2 × 1 "
                        "data-parallel rank)"),
            std::string::npos)
      << d.note;
}

TEST(ResumeSettings, TheSameGlobalBatchSaysNothing) {
  const auto d = train::keep_global_batch_for(saved_run(2), 2, "ck", meta_of(saved_run(2)));
  EXPECT_EQ(d.grad_accum, 1);
  EXPECT_EQ(d.note, "");
}

TEST(ResumeSettings, RefusesWithTheArithmeticWhereNoAccumulationFits) {
  try {
    train::keep_global_batch_for(saved_run(3), 3, "ck", meta_of(saved_run(2)));
    FAIL() << "no error";
  } catch (const UserError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("8 (micro_batch_size 4 × grad_accum 1 × 2 data-parallel ranks)"), std::string::npos) << what;
    EXPECT_NE(what.find("8 is not a multiple of 4 × 3"), std::string::npos) << what;
  }
}

TEST(ResumeSettings, ChangedBatchSettingsAreTakenAndSaid) {
  const auto d = train::keep_global_batch_for(saved_run(1, 2), 1, "ck", meta_of(saved_run(2)));
  EXPECT_EQ(d.grad_accum, 1);
  EXPECT_NE(d.note.find("global batch 2 (micro_batch_size 2"), std::string::npos) << d.note;
}

TEST(ResumeSettings, TheRecordedBatchIsWhatTheRunWasGiven) {
  // Saved by a run at 1 rank that derived grad_accum 2 from its given 1: it resumes deriving again.
  ckpt::CheckpointMeta m = meta_of(saved_run(1, 4, 2));
  m.state["batch"] = train::batch_record(saved_run(1), 8);
  const auto d = train::keep_global_batch_for(saved_run(1), 1, "ck", m);
  EXPECT_EQ(d.grad_accum, 2);
}

TEST(ResumeSettings, ARaisedStepCountSaysTheScheduleIsReDerived) {
  Config before = saved_run(1), after = saved_run(1);
  before.train.steps = 4;
  after.train.steps = 6;
  EXPECT_EQ(train::schedule_change_note(before, before, 4), "");
  const std::string note = train::schedule_change_note(before, after, 4);
  EXPECT_NE(note.find("(train.steps 4 → 6)"), std::string::npos) << note;
  EXPECT_NE(note.find("at step 4"), std::string::npos) << note;
}

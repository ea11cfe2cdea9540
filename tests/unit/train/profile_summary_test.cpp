// The profile summary's grouping and arithmetic on hand-made event lists (train/profile_summary.h).
#include "meshtrain/train/profile_summary.h"

#include <gtest/gtest.h>

namespace meshtrain::train {
namespace {

ProfileEvent cpu(const std::string& name, int64_t start, int64_t end, uint64_t thread = 1, uint64_t corr = 0) {
  return {.name = name, .on_device = false, .thread = thread, .start_ns = start, .end_ns = end, .correlation = corr};
}
ProfileEvent kernel(const std::string& name, int64_t start, int64_t end, uint64_t corr) {
  return {.name = name, .on_device = true, .thread = 0, .start_ns = start, .end_ns = end, .correlation = corr};
}

const ProfileRow* row(const ProfileSummary& s, StepPhase phase, const std::string& name) {
  for (const auto& r : s.rows)
    if (r.phase == phase && r.name == name) return &r;
  return nullptr;
}

// One CPU step: a forward op with a nested op, a backward function, the optimizer, and an op after the step.
std::vector<ProfileEvent> cpu_step() {
  return {cpu("meshtrain::step", 0, 100),
          cpu("aten::mm", 10, 30),
          cpu("aten::add", 12, 15),
          cpu("autograd::engine::evaluate_function: MmBackward0", 40, 60),
          cpu("aten::mm", 41, 59),
          cpu("meshtrain::optimizer", 70, 95),
          cpu("aten::_fused_adamw_", 71, 90),
          cpu("aten::zeros", 200, 210)};
}

TEST(ProfileSummary, CpuOpsSelfTimeByPhase) {
  const auto s = summarize_profile(cpu_step());
  EXPECT_FALSE(s.device);
  EXPECT_EQ(s.steps, 1);
  EXPECT_EQ(s.wall_ns, 100);
  ASSERT_NE(row(s, StepPhase::forward, "aten::mm"), nullptr);
  EXPECT_EQ(row(s, StepPhase::forward, "aten::mm")->total_ns, 17);  // 20 less the nested add's 3
  EXPECT_EQ(row(s, StepPhase::forward, "aten::add")->total_ns, 3);
  EXPECT_EQ(row(s, StepPhase::backward, "aten::mm")->total_ns, 18);
  EXPECT_EQ(row(s, StepPhase::optimizer, "aten::_fused_adamw_")->total_ns, 19);
  EXPECT_EQ(row(s, StepPhase::other, "aten::zeros")->total_ns, 10);
  // Scopes and autograd wrappers are not work of their own.
  for (const auto& r : s.rows) {
    EXPECT_NE(r.name, "meshtrain::step");
    EXPECT_EQ(r.name.find("evaluate_function"), std::string::npos);
  }
  EXPECT_EQ(s.phase_ns[static_cast<int>(StepPhase::forward)], 20);
  EXPECT_EQ(s.phase_ns[static_cast<int>(StepPhase::backward)], 18);
  EXPECT_EQ(s.rows.front().total_ns, 19);  // largest first
}

TEST(ProfileSummary, OpsOnTheBackwardThreadAreBackward) {
  // CUDA autograd runs backward functions on its own thread, outside the step scope's thread.
  auto events = cpu_step();
  events.push_back(cpu("autograd::engine::evaluate_function: AddBackward0", 61, 69, /*thread=*/2));
  events.push_back(cpu("aten::sum", 62, 66, /*thread=*/2));
  const auto s = summarize_profile(events);
  ASSERT_NE(row(s, StepPhase::backward, "aten::sum"), nullptr);
  EXPECT_EQ(row(s, StepPhase::backward, "aten::sum")->total_ns, 4);
}

TEST(ProfileSummary, KernelsTakeTheLaunchingOpsPhase) {
  std::vector<ProfileEvent> events = {
      cpu("meshtrain::step", 0, 1000),
      cpu("aten::mm", 10, 20, 1, /*corr=*/7),
      cpu("autograd::engine::evaluate_function: MmBackward0", 30, 60, 2),
      cpu("aten::mm", 31, 40, 2, /*corr=*/8),
      cpu("meshtrain::optimizer", 100, 120),
      cpu("aten::_fused_adamw_", 101, 110, 1, /*corr=*/9),
      // Kernels run later than their launch: the correlation decides, not the time.
      kernel("sm90_gemm_fwd", 200, 300, 7),
      kernel("sm90_gemm_bwd", 300, 450, 8),
      kernel("fused_adamw_kernel", 460, 500, 9),
      kernel("ncclDevKernel_AllReduce_Sum_f32", 350, 400, 8),  // overlaps the backward gemm
      kernel("unlinked_kernel", 105, 115, 0),                  // no launcher known: by its own start time
  };
  const auto s = summarize_profile(events);
  EXPECT_TRUE(s.device);
  EXPECT_EQ(row(s, StepPhase::forward, "sm90_gemm_fwd")->total_ns, 100);
  EXPECT_EQ(row(s, StepPhase::backward, "sm90_gemm_bwd")->total_ns, 150);
  EXPECT_EQ(row(s, StepPhase::optimizer, "fused_adamw_kernel")->total_ns, 40);
  EXPECT_EQ(row(s, StepPhase::communication, "ncclDevKernel_AllReduce_Sum_f32")->total_ns, 50);
  EXPECT_EQ(row(s, StepPhase::optimizer, "unlinked_kernel")->total_ns, 10);
  EXPECT_EQ(row(s, StepPhase::forward, "aten::mm"), nullptr);  // device rows only when there are device events
  EXPECT_EQ(s.busy_ns, 10 + 100 + 150 + 40);                   // overlap counted once
  const std::string table = profile_table(s, 3);
  EXPECT_NE(table.find("sm90_gemm_bwd"), std::string::npos);
  EXPECT_EQ(table.find("unlinked_kernel"), std::string::npos);  // beyond the top 3
  EXPECT_NE(profile_json(s).find("\"communication\": 50"), std::string::npos);
}

TEST(ProfileSummary, EmptyProfile) {
  const auto s = summarize_profile({});
  EXPECT_EQ(s.steps, 0);
  EXPECT_TRUE(s.rows.empty());
  EXPECT_NE(profile_table(s, 10).find("0 step(s)"), std::string::npos);
}

}  // namespace
}  // namespace meshtrain::train

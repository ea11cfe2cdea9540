// meshrun --preflight: the doctor's command line for a plan (the config and its --set overrides; --gpus on a
// GPU node only).
#include "meshtrain/launch/preflight.h"

#include <gtest/gtest.h>

using namespace meshtrain::launch;

TEST(Preflight, DoctorCommandForAConfigOnAGpuNode) {
  LaunchPlan p;
  p.kind = ProgramKind::Config;
  p.command = {"/opt/bin/meshtrain", "train", "run.yaml", "--set", "checkpoint.dir=/ckpt", "--set=train.steps=9"};
  p.opts.nproc_per_node = "gpu";
  p.nproc_per_node = 8;
  p.gpu_count = 8;
  EXPECT_EQ(preflight_command(p, "/opt/bin"),
            (std::vector<std::string>{"/opt/bin/meshtrain", "doctor", "run.yaml", "--set", "checkpoint.dir=/ckpt",
                                      "--set=train.steps=9", "--gpus", "8"}));
}

TEST(Preflight, NoGpuChecksForACpuRunOrAScript) {
  LaunchPlan p;
  p.kind = ProgramKind::Python;
  p.command = {"python", "-u", "train.py"};
  p.opts.nproc_per_node = "cpu";
  p.nproc_per_node = 4;
  p.gpu_count = 8;
  EXPECT_EQ(preflight_command(p, "/b"), (std::vector<std::string>{"/b/meshtrain", "doctor"}));
  p.opts.nproc_per_node = "2";
  p.gpu_count = 0;
  EXPECT_EQ(preflight_command(p, "/b"), (std::vector<std::string>{"/b/meshtrain", "doctor"}));
}

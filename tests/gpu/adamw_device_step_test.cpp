// AdamW::device_step on CUDA (train/adamw.h): ATen's CUDA fused kernel takes the clip divisor and the skip flag
// as the trainer hands them over, as its CPU kernel does in the train room's unit tests (the same checks:
// support/adamw_device_step.h). Exit code 77 (skipped) without a GPU.
#include "support/adamw_device_step.h"
#include "support/gpu_test_main.h"

using namespace meshtrain;

TEST(AdamWOnCuda, DeviceStepDividesByTheClipAsTheLayoutsClipInPlace) {
  testing_support::expect_divisor_matches_in_place_clip(at::Device(at::kCUDA, 0));
}

TEST(AdamWOnCuda, DeviceStepSkipLeavesParametersAndStateUntouched) {
  testing_support::expect_skip_leaves_state(at::Device(at::kCUDA, 0));
}

int main(int argc, char** argv) { return testing_support::run_gpu_tests(argc, argv); }

// AdamW on CUDA (train/adamw.h): its step with the clip divisor and the skip flag as the trainer hands them over,
// as the CPU kernel does in the train room's unit tests (the same checks: support/adamw_device_step.h), now through
// meshtrain's own kernel (model/kernels/fused_adamw.h, optimizer.fused_kernel); and that kernel against ATen's
// fused AdamW, bit for bit. Exit code 77 (skipped) without a GPU.
#include "support/adamw_device_step.h"
#include "support/gpu_test_main.h"

using namespace meshtrain;

TEST(AdamWOnCuda, DeviceStepDividesByTheClipAsTheLayoutsClipInPlace) {
  testing_support::expect_divisor_matches_in_place_clip(at::Device(at::kCUDA, 0));
}

TEST(AdamWOnCuda, DeviceStepSkipLeavesParametersAndStateUntouched) {
  testing_support::expect_skip_leaves_state(at::Device(at::kCUDA, 0));
}

// meshtrain's kernel and ATen's (optimizer.fused_kernel on and off) over the same parameters and gradients: five
// steps — plain, with clip divisors, a skipped one with non-finite gradients — leave parameters, moments and step
// counters the same bit for bit. The sizes take every path: one element, fewer than four, a vector tail (4k + 3),
// a parameter that starts 4 bytes into its storage (not 16-byte aligned: the scalar kernel), and 2^20 + 5 (many
// blocks, each thread several float4s).
TEST(AdamWOnCuda, OwnKernelGivesAtensUpdateBitForBit) {
  const at::Device d(at::kCUDA, 0);
  const auto opts = at::TensorOptions(at::kFloat).device(d);
  at::manual_seed(5);
  const at::Tensor storage = at::randn({1001}, opts);
  std::vector<train::Optimizer::Param> ours{{"one", at::randn({1}, opts).requires_grad_(), false},
                                            {"three", at::randn({3}, opts).requires_grad_(), false},
                                            {"w", at::randn({37, 29}, opts).requires_grad_(), true},
                                            {"offset", storage.narrow(0, 1, 1000).detach().requires_grad_(), true},
                                            {"big", at::randn({(1 << 20) + 5}, opts).requires_grad_(), true}};
  ASSERT_NE(reinterpret_cast<uintptr_t>(ours[3].param.const_data_ptr()) % 16, 0u) << "the offset view is aligned";
  auto atens = testing_support::clone_params(ours);
  const at::Tensor big_before = ours[4].param.detach().clone();
  OptimizerConfig own_cfg = testing_support::device_step_config(), aten_cfg = own_cfg;
  own_cfg.fused_kernel = true;
  aten_cfg.fused_kernel = false;
  train::AdamW own(ours, own_cfg), aten(atens, aten_cfg);
  const auto scalar = [&](double v) { return at::full({}, v, opts); };
  const double lr = 3e-3;
  for (int step = 0; step < 5; ++step) {
    auto grads = testing_support::gradients_like(ours, step == 2 ? 40.0 : 1.0);
    at::Tensor divisor = step == 0 ? at::Tensor() : scalar(1.0 + 7.5 * step), skip = scalar(0.0);
    if (step == 3) {  // what a nan loss leaves: the flag set, the gradients and the divisor non-finite
      grads[2].view({-1})[5].fill_(std::numeric_limits<float>::infinity());
      divisor = scalar(std::numeric_limits<float>::quiet_NaN());
      skip = scalar(1.0);
    }
    testing_support::set_gradients(ours, grads);
    testing_support::set_gradients(atens, grads);
    own.device_step(lr, divisor, skip);
    aten.device_step(lr, divisor, skip);
    testing_support::expect_identical(own, aten, "step " + std::to_string(step + 1));
  }
  // Five updates asked for, one skipped: every counter says four.
  EXPECT_EQ(own.state_tensors().at("big.step").item<float>(), 4.0f);
  // The parameters moved (a kernel that did nothing would match an ATen that did nothing).
  EXPECT_FALSE(at::equal(own.params()[4].param, big_before));
}

int main(int argc, char** argv) { return testing_support::run_gpu_tests(argc, argv); }

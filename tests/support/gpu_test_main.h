// main() of the GPU-labelled gtest binaries: where the tests cannot run they say why and return 77, which
// ctest reports as skipped (SKIP_RETURN_CODE), never as passed.
#pragma once

#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <string>

namespace meshtrain::testing_support {

// Whether this build has meshtrain's own CUDA kernels (MESHTRAIN_CUDA_KERNELS: CUDA and nvcc were found).
#if MESHTRAIN_CUDA_KERNELS
inline constexpr bool kCudaKernels = true;
#else
inline constexpr bool kCudaKernels = false;
#endif

// Runs the binary's tests if a GPU is visible and `unmet` — asked only then, for what the tests need beyond a
// GPU — returns "" ; otherwise prints the reason and returns 77.
inline int run_gpu_tests(int argc, char** argv, const std::function<std::string()>& unmet = {}) {
  ::testing::InitGoogleTest(&argc, argv);
  if (!at::hasCUDA() || at::getNumGPUs() == 0) {
    std::puts("no GPU visible: skipped");
    return 77;
  }
  if (const std::string why = unmet ? unmet() : std::string(); !why.empty()) {
    std::printf("%s: skipped\n", why.c_str());
    return 77;
  }
  return RUN_ALL_TESTS();
}

}  // namespace meshtrain::testing_support

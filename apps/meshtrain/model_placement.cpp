#include "model_placement.h"

#include <torch/cuda.h>

#include "meshtrain/core/error.h"

namespace meshtrain::cli {

c10::TensorOptions placement_from_flags(const std::string& dev, const std::string& dt) {
  MT_USER_CHECK(dev == "cpu" || dev.rfind("cuda", 0) == 0, "--device ", dev, ": expected cpu, cuda or cuda:N");
  c10::Device device = c10::Device(c10::kCPU);
  try {
    device = c10::Device(dev);
  } catch (const std::exception&) {
    throw UserError(cat("--device ", dev, ": expected cpu, cuda or cuda:N"));
  }
  if (device.is_cuda()) {
    const int n = static_cast<int>(torch::cuda::device_count());
    MT_USER_CHECK(n > 0, "--device ", dev, ": no CUDA device is visible (use --device cpu)");
    MT_USER_CHECK(device.index() < n, "--device ", dev, ": only ", n, " CUDA device(s) are visible");
  }
  MT_USER_CHECK(dt == "fp32" || dt == "bf16", "--dtype ", dt, ": expected fp32 or bf16");
  return c10::TensorOptions().device(device).dtype(dt == "bf16" ? at::kBFloat16 : at::kFloat);
}

}  // namespace meshtrain::cli

// AutocastGuard: bf16 autocast on one device type for the guard's lifetime; the fp32 master weights stay fp32.
// The parallel model holds one around each micro-batch's forward (parallel/parallel_model.h), so every caller
// of a training or evaluation step computes in the configured precision without setting it up itself.
#pragma once

#include <c10/core/DeviceType.h>

namespace meshtrain::parallel {

class AutocastGuard {
 public:
  // `on` false: the guard does nothing (fp32 compute).
  AutocastGuard(bool on, c10::DeviceType device);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool on_, prev_ = false;
  c10::DeviceType device_;
};

}  // namespace meshtrain::parallel

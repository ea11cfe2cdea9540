#include "meshtrain/parallel/autocast_guard.h"

#include <ATen/autocast_mode.h>

namespace meshtrain::parallel {

AutocastGuard::AutocastGuard(bool on, c10::DeviceType device) : on_(on), device_(device) {
  if (!on_) return;
  prev_ = at::autocast::is_autocast_enabled(device_);
  at::autocast::set_autocast_enabled(device_, true);
  at::autocast::set_autocast_dtype(device_, at::kBFloat16);
}

AutocastGuard::~AutocastGuard() {
  if (!on_) return;
  at::autocast::set_autocast_enabled(device_, prev_);
  at::autocast::clear_cache();
}

}  // namespace meshtrain::parallel

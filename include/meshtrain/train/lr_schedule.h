// Learning-rate schedules: linear warmup from 0 to the peak, then one of
//   cosine   — half cosine from peak to min_lr_ratio × peak at the last step
//   linear   — straight line from peak to min_lr_ratio × peak
//   constant — peak
//   wsd      — warmup-stable-decay: peak until the last decay_fraction of the steps, then linear to the floor
#pragma once

#include <cstdint>

#include "meshtrain/core/config.h"

namespace meshtrain::train {

class LrSchedule {
 public:
  LrSchedule(const ScheduleConfig& s, double peak_lr, int64_t total_steps);
  // Learning rate for optimizer step `step` (0-based).
  double at(int64_t step) const;

 private:
  double wsd(int64_t step, double floor) const;

  ScheduleConfig s_;
  double peak_;
  int64_t total_;
};

}  // namespace meshtrain::train

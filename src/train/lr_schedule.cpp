#include "meshtrain/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "meshtrain/core/error.h"

namespace meshtrain::train {

LrSchedule::LrSchedule(const ScheduleConfig& s, double peak_lr, int64_t total_steps)
    : s_(s), peak_(peak_lr), total_(total_steps) {}

double LrSchedule::at(int64_t step) const {
  const double floor = peak_ * s_.min_lr_ratio;
  // Warmup reaches the peak at step warmup_steps - 1 (step 0 gets peak / warmup, never 0).
  if (step < s_.warmup_steps) return peak_ * static_cast<double>(step + 1) / static_cast<double>(s_.warmup_steps);
  const double span = static_cast<double>(std::max<int64_t>(1, total_ - 1 - s_.warmup_steps));
  const double progress = std::clamp(static_cast<double>(step - s_.warmup_steps) / span, 0.0, 1.0);
  switch (s_.kind) {
    case LrShape::constant: return peak_;
    case LrShape::linear: return peak_ + (floor - peak_) * progress;
    case LrShape::cosine: return floor + 0.5 * (peak_ - floor) * (1.0 + std::cos(M_PI * progress));
    case LrShape::wsd: return wsd(step, floor);
  }
  throw Error("bad schedule.kind");
}

// Warmup-stable-decay: the peak until the last decay_fraction of the steps, then linear down to the floor.
double LrSchedule::wsd(int64_t step, double floor) const {
  const int64_t decay_steps = static_cast<int64_t>(std::ceil(s_.decay_fraction * static_cast<double>(total_)));
  const int64_t decay_start = total_ - decay_steps;
  if (step < decay_start || decay_steps <= 0) return peak_;
  const double p = static_cast<double>(step - decay_start + 1) / static_cast<double>(decay_steps);
  return peak_ + (floor - peak_) * std::min(p, 1.0);
}

}  // namespace meshtrain::train

#include "meshtrain/serve/engine/latency_histogram.h"

namespace meshtrain::serve {

void LatencyHistogram::observe(double seconds) {
  for (size_t i = 0; i < kBounds.size(); ++i)
    if (seconds <= kBounds[i]) ++cumulative_[i];
  ++count_;
  sum_ += seconds;
}

}  // namespace meshtrain::serve

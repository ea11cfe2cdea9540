#include "meshtrain/data/source_mix.h"

#include <cmath>
#include <numeric>

#include "meshtrain/core/error.h"

namespace meshtrain::data {

SourceMix::SourceMix(const std::vector<double>& weights) : shares_(weights) {
  MT_CHECK(!weights.empty(), "a mixture of no sources");
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  for (double& w : shares_) {
    MT_CHECK(std::isfinite(w) && w > 0, "source weight ", w, " (validate() admits only > 0)");
    w /= total;
  }
}

size_t SourceMix::pick(const std::vector<int64_t>& drawn) const {
  MT_CHECK(drawn.size() == shares_.size(), "drawn counts for ", drawn.size(), " of ", shares_.size(), " sources");
  const double next = static_cast<double>(std::accumulate(drawn.begin(), drawn.end(), int64_t{0}) + 1);
  size_t best = 0;
  double best_behind = 0;
  for (size_t s = 0; s < shares_.size(); ++s) {
    // How far source s would lag its share after the next entry if it were not chosen.
    const double behind = next * shares_[s] - static_cast<double>(drawn[s]);
    if (s == 0 || behind > best_behind) {
      best = s;
      best_behind = behind;
    }
  }
  return best;
}

}  // namespace meshtrain::data

// SourceMix: which source each sequence of a mixture comes from (data.train with several sources).
//
// The stream of sequences is dealt to the sources by their shares, deterministically: entry k goes to the
// source furthest behind its share, the one with the largest (k + 1) · share − drawn (the lowest index on a
// tie). So every prefix of the stream holds each source within one sequence of its share — exact over any window
// of steps, not only on average — and the choice depends only on the counts drawn so far, which a checkpoint's
// data position already holds: a resumed run deals exactly as an uninterrupted one.
//
//   SourceMix mix({0.7, 0.3});
//   const size_t s = mix.pick(drawn);   // drawn[s]: sequences taken from source s so far
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace meshtrain::data {

class SourceMix {
 public:
  // Weights > 0 (MT_CHECK: validate() refuses any other), normalised to shares.
  explicit SourceMix(const std::vector<double>& weights);

  // The source of the next entry, after drawn[s] entries from each source s.
  size_t pick(const std::vector<int64_t>& drawn) const;
  const std::vector<double>& shares() const { return shares_; }

 private:
  std::vector<double> shares_;  // Σ = 1
};

}  // namespace meshtrain::data

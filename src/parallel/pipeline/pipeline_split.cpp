#include "meshtrain/parallel/pipeline/pipeline_split.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "meshtrain/core/error.h"

namespace meshtrain::parallel {
namespace {

// Blocks per stage minimising (largest stage, sum of squared block counts), by dynamic programming over
// (stages so far, blocks so far): n_layer and the stage count are small.
std::vector<int64_t> balanced_counts(const StageSizes& z, int S) {
  const int64_t L = z.n_layer;
  auto extra = [&](int s) { return (s == 0 ? z.embed : 0.0) + (s == S - 1 ? z.head : 0.0); };
  using Score = std::pair<double, int64_t>;  // (largest stage, Σ count²)
  const Score kNone{std::numeric_limits<double>::infinity(), 0};
  // best[s][k]: the first s stages holding the first k blocks; from[s][k]: blocks of stage s − 1.
  std::vector<std::vector<Score>> best(S + 1, std::vector<Score>(L + 1, kNone));
  std::vector<std::vector<int64_t>> from(S + 1, std::vector<int64_t>(L + 1, 0));
  best[0][0] = {0.0, 0};
  for (int s = 1; s <= S; ++s)
    for (int64_t k = s; k <= L; ++k)
      for (int64_t n = 1; n <= k - (s - 1); ++n) {
        const Score& prev = best[s - 1][k - n];
        if (prev.first == kNone.first) continue;
        Score cand{std::max(prev.first, n * z.block + extra(s - 1)), prev.second + n * n};
        if (cand < best[s][k]) {
          best[s][k] = cand;
          from[s][k] = n;
        }
      }
  std::vector<int64_t> counts(S);
  for (int s = S, k = static_cast<int>(L); s >= 1; --s) {
    counts[s - 1] = from[s][k];
    k -= static_cast<int>(from[s][k]);
  }
  return counts;
}

// The first/last stage fixed, the stages between sharing the rest (earlier ones one more where uneven).
std::vector<int64_t> fixed_counts(const StageSizes& z, int S, int64_t first, int64_t last) {
  std::vector<int64_t> counts(S, 0);
  int64_t left = z.n_layer;
  int free_lo = 0, free_hi = S;  // the stages [free_lo, free_hi) share what is left
  if (first > 0) {
    counts[0] = first;
    left -= first;
    free_lo = 1;
  }
  if (last > 0 && S > 1) {
    counts[S - 1] = last;
    left -= last;
    free_hi = S - 1;
  }
  const int n = free_hi - free_lo;
  MT_CHECK(left >= n && (n > 0 || left == 0), "pipeline split: ", z.n_layer, " blocks over ", S,
           " stages with first ", first, ", last ", last, " leaves ", left, " for ", n, " stages");
  for (int i = 0; i < n; ++i) counts[free_lo + i] = left / n + (i < left % n ? 1 : 0);
  return counts;
}

}  // namespace

StageSizes stage_sizes(const model::TransformerImpl& net) {
  StageSizes z;
  z.n_layer = net.config().n_layer;
  for (const auto& item : net.named_parameters()) {
    const std::string& name = item.key();
    const double n = static_cast<double>(item.value().numel());
    if (name.rfind("blocks.0.", 0) == 0) z.block += n;
    else if (name.rfind("tok_embed.", 0) == 0 || name.rfind("pos_embed.", 0) == 0) z.embed += n;
    else if (name.rfind("blocks.", 0) != 0) z.head += n;
    // A tied embedding: the last stage holds its copy for the head (parallel/pipeline/tied_embedding.h).
    if (name == "tok_embed.weight" && net.config().tie_embeddings) z.head += n;
  }
  return z;
}

std::vector<model::ModelSpan> split_pipeline_stages(const StageSizes& sizes, int stages, int64_t first_blocks,
                                                    int64_t last_blocks) {
  MT_CHECK(stages >= 1 && sizes.n_layer >= stages, "pipeline split: ", sizes.n_layer, " blocks over ", stages,
           " stages");
  const auto counts = first_blocks > 0 || last_blocks > 0 ? fixed_counts(sizes, stages, first_blocks, last_blocks)
                                                          : balanced_counts(sizes, stages);
  std::vector<model::ModelSpan> out;
  int64_t at = 0;
  for (int s = 0; s < stages; ++s) {
    out.push_back({at, at + counts[s], s == 0, s == stages - 1});
    at += counts[s];
  }
  MT_CHECK(at == sizes.n_layer, "pipeline split covers ", at, " of ", sizes.n_layer, " blocks");
  return out;
}

}  // namespace meshtrain::parallel

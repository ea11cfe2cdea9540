#include "parallel/pipeline/pipeline_batch.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "meshtrain/core/error.h"

namespace meshtrain::parallel {
namespace {

using MicroBatch = ParallelModel::MicroBatch;

// The document starts of the concatenated batch over its flattened tokens (host): each micro-batch's
// cu_seqlens moved past the rows before it, the shared boundary between two micro-batches kept once.
std::vector<int64_t> step_boundaries(const std::vector<MicroBatch>& batches, int64_t seq_len) {
  std::vector<int64_t> out{0};
  int64_t offset = 0;
  for (const auto& b : batches) {
    MT_CHECK(b.docs.cu_seqlens.defined(), "pipeline: packed documents without cu_seqlens");
    const at::Tensor cu = b.docs.cu_seqlens.to(at::kCPU, at::kLong).contiguous();
    const int64_t* v = cu.data_ptr<int64_t>();
    for (int64_t i = 1; i < cu.numel(); ++i) out.push_back(offset + v[i]);
    offset += b.tokens.size(0) * seq_len;
  }
  return out;
}

// The documents of the flattened tokens [lo, hi) (a piece's rows): the boundaries inside, re-based to lo.
// Every row starts a document, so lo and hi are boundaries themselves.
model::Documents piece_documents(const std::vector<int64_t>& bounds, int64_t lo, int64_t hi,
                                 const at::Tensor& positions) {
  auto first = std::lower_bound(bounds.begin(), bounds.end(), lo);
  auto last = std::upper_bound(bounds.begin(), bounds.end(), hi);
  MT_CHECK(first != last && *first == lo && *(last - 1) == hi, "pipeline: rows [", lo, ", ", hi,
           ") do not start and end at document boundaries");
  std::vector<int32_t> cu;
  int64_t max_len = 0;
  for (auto it = first; it != last; ++it) {
    if (it != first) max_len = std::max(max_len, *it - *(it - 1));
    cu.push_back(static_cast<int32_t>(*it - lo));
  }
  model::Documents d;
  d.positions = positions;
  d.cu_seqlens = at::tensor(cu, at::kInt).to(positions.device());
  d.max_len = max_len;
  return d;
}

// Piece weights n_p · Σ_b w_b / Σ_b n_b on the device; a piece without an unmasked target gets its first
// target made valid (its weight is 0, so it adds nothing).
std::vector<at::Tensor> piece_weights(const std::vector<MicroBatch>& batches, std::vector<at::Tensor>& targets) {
  double weight_sum = 0;
  for (const auto& b : batches) weight_sum += *b.loss_weight;
  std::vector<at::Tensor> counts;
  for (const auto& t : targets) counts.push_back(t.ne(-100).sum());
  const at::Tensor n = at::stack(counts).to(at::kDouble);  // [m]
  const at::Tensor k = weight_sum / n.sum().clamp_min(1.0);
  const at::Tensor w = (n * k).to(at::kFloat);
  std::vector<at::Tensor> out;
  for (size_t p = 0; p < targets.size(); ++p) {
    at::Tensor head = targets[p].view({-1}).narrow(0, 0, 1);  // a view: writes into the concatenated targets
    head.copy_(at::where(n[static_cast<int64_t>(p)].eq(0), at::zeros_like(head), head));
    out.push_back(w[static_cast<int64_t>(p)]);
  }
  return out;
}

}  // namespace

std::vector<PipelinePiece> cut_pipeline_batch(const std::vector<MicroBatch>& batches, int m) {
  MT_CHECK(!batches.empty() && m > 0, "cut_pipeline_batch: ", batches.size(), " micro-batches into ", m);
  const bool packed = batches.front().docs.packed(), weighted = batches.front().loss_weight.has_value();
  std::vector<at::Tensor> toks, tgts, pos;
  for (const auto& b : batches) {
    MT_CHECK(b.docs.packed() == packed && b.loss_weight.has_value() == weighted,
             "pipeline: the step's micro-batches mix packed and plain, or weighted and unweighted");
    toks.push_back(b.tokens);
    tgts.push_back(b.targets);
    if (packed) pos.push_back(b.docs.positions);
  }
  // at::cat copies: the targets a weightless piece changes are the step's own, never the caller's.
  const at::Tensor tokens = at::cat(toks), targets = at::cat(tgts);
  MT_CHECK(tokens.size(0) % m == 0, "pipeline: a batch of ", tokens.size(0), " sequences does not split into ", m,
           " micro-batches");
  std::vector<PipelinePiece> pieces(static_cast<size_t>(m));
  const auto tok = tokens.chunk(m);
  auto tgt = targets.chunk(m);
  const std::vector<at::Tensor> weights = weighted ? piece_weights(batches, tgt) : std::vector<at::Tensor>{};
  const int64_t T = tokens.size(1), rows = tokens.size(0) / m;
  const std::vector<int64_t> bounds = packed ? step_boundaries(batches, T) : std::vector<int64_t>{};
  const at::Tensor positions = packed ? at::cat(pos) : at::Tensor();
  for (int p = 0; p < m; ++p) {
    PipelinePiece& piece = pieces[static_cast<size_t>(p)];
    piece.tokens = tok[static_cast<size_t>(p)];
    piece.targets = tgt[static_cast<size_t>(p)];
    if (weighted) piece.weight = weights[static_cast<size_t>(p)];
    if (packed)
      piece.docs = piece_documents(bounds, p * rows * T, (p + 1) * rows * T, positions.narrow(0, p * rows, rows));
  }
  return pieces;
}

}  // namespace meshtrain::parallel

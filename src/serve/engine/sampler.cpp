// Every step below is row by row, so a row's result does not depend on the rows beside it. The top-k and top-p
// cuts work on the logits sorted once (stable, so ties keep the lower id first, as argmax does).
#include "meshtrain/serve/engine/sampler.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "meshtrain/core/error.h"
#include "meshtrain/serve/splitmix64.h"

namespace meshtrain::serve {
namespace {

bool any_row(std::span<const SampleRow> rows, bool (*pred)(const SamplingParams&)) {
  return std::any_of(rows.begin(), rows.end(), [&](const SampleRow& r) { return pred(*r.params); });
}

// A per-row column [B, 1] of `f`'s values, on the logits' device.
template <typename F>
at::Tensor sampler_column(std::span<const SampleRow> rows, const at::Tensor& like, F f) {
  std::vector<double> v;
  v.reserve(rows.size());
  for (const SampleRow& r : rows) v.push_back(f(*r.params, r));
  return at::tensor(v, at::kDouble).to(like.device(), like.scalar_type()).view({-1, 1});
}

// HF's repetition penalty: a seen token's logit divided by the penalty when positive, multiplied when not.
void apply_repetition_penalty(at::Tensor& logits, std::span<const SampleRow> rows) {
  size_t longest = 0;
  for (const SampleRow& r : rows) longest = std::max(longest, r.history.size());
  // [B, longest], each row padded with its own first token: penalising a token twice writes the same value.
  std::vector<int64_t> ids;
  ids.reserve(rows.size() * longest);
  for (const SampleRow& r : rows)
    for (size_t i = 0; i < longest; ++i) ids.push_back(r.history[i < r.history.size() ? i : 0]);
  const auto idx = at::tensor(ids, at::kLong).view({static_cast<int64_t>(rows.size()), -1}).to(logits.device());
  const auto pen = sampler_column(rows, logits, [](const SamplingParams& p, const SampleRow&) {
    return p.repetition_penalty;
  });
  const auto seen = logits.gather(1, idx);
  logits.scatter_(1, idx, at::where(seen > 0, seen / pen, seen * pen));
}

// The step's one device-to-host copy.
std::vector<TokenId> sampled_to_host(const at::Tensor& chosen) {
  const auto host = chosen.to(at::kCPU, at::kLong).contiguous();
  return {host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + host.numel()};
}

}  // namespace

void check_sampling_params(RequestId id, const SamplingParams& p) {
  MT_USER_CHECK(std::isfinite(p.temperature) && p.temperature >= 0, "request ", id, ": temperature ",
                p.temperature, " is not valid; use 0 (greedy) or a positive number");
  MT_USER_CHECK(p.top_k >= 0, "request ", id, ": top_k ", p.top_k, " is not valid; use 0 (off) or a positive count");
  MT_USER_CHECK(p.top_p > 0 && p.top_p <= 1, "request ", id, ": top_p ", p.top_p, " is not in (0, 1]");
  MT_USER_CHECK(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0, "request ", id,
                ": repetition_penalty ", p.repetition_penalty, " is not valid; use a positive number (1 = off)");
}

double sampling_uniform(uint64_t seed, int64_t index) {
  const uint64_t bits = splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(index));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

bool argmax_samples(std::span<const SampleRow> rows) {
  return std::all_of(rows.begin(), rows.end(), [](const SampleRow& r) {
    return r.params->greedy() && r.params->repetition_penalty == 1.0;
  });
}

std::vector<TokenId> sample_tokens(const at::Tensor& logits_in, std::span<const SampleRow> rows) {
  MT_CHECK(logits_in.dim() == 2 && logits_in.size(0) == static_cast<int64_t>(rows.size()),
           "sample_tokens: logits ", logits_in.sizes(), " for ", rows.size(), " rows");
  if (rows.empty()) return {};
  if (argmax_samples(rows)) return sampled_to_host(logits_in.argmax(-1));  // the common case: no copy of the logits
  auto logits = logits_in.to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);  // [B, V], ours to change
  const int64_t V = logits.size(1);
  if (any_row(rows, [](const SamplingParams& p) { return p.repetition_penalty != 1.0; }))
    apply_repetition_penalty(logits, rows);
  auto chosen = logits.argmax(-1);  // greedy
  if (any_row(rows, [](const SamplingParams& p) { return !p.greedy(); })) {
    const auto temp = sampler_column(rows, logits, [](const SamplingParams& p, const SampleRow&) {
      return p.greedy() ? 1.0 : p.temperature;
    });
    auto [sorted, order] = (logits / temp).sort(/*stable=*/true, -1, /*descending=*/true);
    const auto rank = at::arange(V, logits.options()).unsqueeze(0);  // [1, V]
    const auto k = sampler_column(rows, logits, [V](const SamplingParams& p, const SampleRow&) {
      return static_cast<double>(p.top_k > 0 ? std::min(p.top_k, V) : V);
    });
    auto probs = at::softmax(sorted.masked_fill(rank >= k, -std::numeric_limits<float>::infinity()), -1);
    // Nucleus: drop a token once the mass before it reaches top_p (the most likely token always stays).
    const auto top_p = sampler_column(rows, logits, [](const SamplingParams& p, const SampleRow&) {
      return p.top_p >= 1.0 ? 2.0 : p.top_p;
    });
    probs = probs.masked_fill(probs.cumsum(-1) - probs >= top_p, 0.0f);
    // Inverse CDF: the first token whose cumulative mass exceeds u × the kept mass.
    const auto cum = probs.cumsum(-1);
    const auto u = sampler_column(rows, logits, [](const SamplingParams& p, const SampleRow& r) {
      return sampling_uniform(p.seed, r.draw_index);
    });
    const auto pick = (cum < u * cum.narrow(1, V - 1, 1)).sum(-1, /*keepdim=*/true).clamp_max(V - 1);
    const auto drawn = order.gather(1, pick).squeeze(1);
    const auto greedy = sampler_column(rows, logits, [](const SamplingParams& p, const SampleRow&) {
      return p.greedy() ? 1.0 : 0.0;
    });
    chosen = at::where(greedy.squeeze(1) > 0, chosen, drawn);
  }
  return sampled_to_host(chosen);
}

}  // namespace meshtrain::serve

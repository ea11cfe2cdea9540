#include "meshtrain/parallel/pipeline/pipeline_schedule.h"

#include <algorithm>
#include <map>

#include "meshtrain/core/error.h"

namespace meshtrain::parallel {
namespace {

using Op = PipeAction::Op;

PipeAction act(Op op, int micro, int chunk = 0) { return PipeAction{op, micro, chunk}; }

std::vector<PipeAction> gpipe(int m) {
  std::vector<PipeAction> out;
  for (int i = 0; i < m; ++i) out.push_back(act(Op::F, i));
  for (int i = 0; i < m; ++i) out.push_back(act(Op::B, i));
  return out;
}

// Warm-up forwards fill the pipeline below this rank; then one forward, one backward; then the rest.
std::vector<PipeAction> one_f_one_b(int pp, int m, int rank) {
  const int warmup = std::min(pp - rank - 1, m);
  std::vector<PipeAction> out;
  for (int i = 0; i < warmup; ++i) out.push_back(act(Op::F, i));
  for (int i = 0; i < m - warmup; ++i) {
    out.push_back(act(Op::F, warmup + i));
    out.push_back(act(Op::B, i));
  }
  for (int i = m - warmup; i < m; ++i) out.push_back(act(Op::B, i));
  return out;
}

// Megatron-LM's interleaved schedule (forward_backward_pipelining_with_interleaving): the k-th forward of a
// rank is micro-batch (k / (pp·v))·pp + k % pp of chunk (k % (pp·v)) / pp; backwards walk the chunks in reverse.
std::vector<PipeAction> interleaved(int pp, int m, int v, int rank) {
  const int total = m * v, group = pp * v;
  auto micro = [&](int k) { return (k / group) * pp + k % pp; };
  auto fwd = [&](int k) { return act(Op::F, micro(k), (k % group) / pp); };
  auto bwd = [&](int k) { return act(Op::B, micro(k), v - 1 - (k % group) / pp); };
  // With m == pp every forward goes first (Megatron's all-warm-up case).
  const int warmup = m == pp ? total : std::min((pp - rank - 1) * 2 + (v - 1) * pp, total);
  std::vector<PipeAction> out;
  for (int k = 0; k < warmup; ++k) out.push_back(fwd(k));
  for (int k = 0; k < total - warmup; ++k) {
    out.push_back(fwd(warmup + k));
    out.push_back(bwd(k));
  }
  for (int k = total - warmup; k < total; ++k) out.push_back(bwd(k));
  return out;
}

// ZB-H1: 1F1B's order with each backward split into I then W. Rank r runs its first r steady steps without
// a weight gradient (so input gradients reach the ranks above sooner) and takes those W's at the end, where
// 1F1B would idle. Peak activations stay 1F1B's (pp micro-batches on rank 0).
std::vector<PipeAction> zb_h1(int pp, int m, int rank) {
  const int warmup = std::min(pp - rank - 1, m);
  std::vector<PipeAction> out;
  int next_w = 0;
  auto weight_after = [&](int op) {
    if (op - warmup >= rank) out.push_back(act(Op::W, next_w++));
  };
  for (int i = 0; i < warmup; ++i) out.push_back(act(Op::F, i));
  for (int op = warmup; op < m; ++op) {
    out.push_back(act(Op::F, op));
    out.push_back(act(Op::I, op - warmup));
    weight_after(op);
  }
  for (int op = m; op < m + warmup; ++op) {
    out.push_back(act(Op::I, op - warmup));
    weight_after(op);
  }
  while (next_w < m) out.push_back(act(Op::W, next_w++));
  return out;
}

char letter(Op op) { return op == Op::F ? 'F' : op == Op::B ? 'B' : op == Op::I ? 'I' : 'W'; }

}  // namespace

std::string PipelineSchedule::describe(int rank) const {
  std::string out;
  for (const auto& a : ranks.at(rank)) {
    if (!out.empty()) out += ' ';
    out += letter(a.op) + std::to_string(a.micro);
    if (chunks > 1) out += "." + std::to_string(a.chunk);
  }
  return out;
}

PipelineSchedule make_pipeline_schedule(PipelineKind kind, int pp, int m, int v) {
  MT_CHECK(pp >= 1 && m >= 1 && v >= 1, "pipeline schedule: pp ", pp, ", m ", m, ", v ", v);
  if (kind == PipelineKind::interleaved_1f1b)
    MT_CHECK(v >= 2 && m % pp == 0, "interleaved-1f1b needs v ≥ 2 and m % pp == 0: v ", v, ", m ", m, ", pp ", pp);
  else
    MT_CHECK(v == 1, kind, " runs one chunk per rank, not ", v);
  PipelineSchedule s{kind, pp, m, v, {}};
  for (int r = 0; r < pp; ++r) {
    switch (kind) {
      case PipelineKind::gpipe: s.ranks.push_back(gpipe(m)); break;
      case PipelineKind::one_f_one_b: s.ranks.push_back(one_f_one_b(pp, m, r)); break;
      case PipelineKind::interleaved_1f1b: s.ranks.push_back(interleaved(pp, m, v, r)); break;
      case PipelineKind::zb_h1: s.ranks.push_back(zb_h1(pp, m, r)); break;
    }
  }
  return s;
}

PipelineTimeline simulate_pipeline(const PipelineSchedule& s, const PipelineCosts& costs) {
  const int V = s.virtual_stages();
  // Finish times of what other actions wait for, by (virtual stage, micro-batch): the forward's output and
  // the input gradient (from B or I). W waits on its own rank's I.
  std::map<std::pair<int, int>, double> fwd_done, grad_done;
  PipelineTimeline t;
  t.start.resize(s.pp);
  std::vector<size_t> next(s.pp, 0);
  std::vector<double> free_at(s.pp, 0), busy(s.pp, 0);
  auto cost = [&](Op op) {
    return op == Op::F ? costs.forward : op == Op::B ? costs.backward : op == Op::I ? costs.backward_input
                                                                                 : costs.backward_weight;
  };
  // When the action may start, or -1 while something it needs has not been scheduled yet.
  auto ready_at = [&](int r, const PipeAction& a) -> double {
    const int vs = s.virtual_stage(r, a.chunk);
    auto need = [&](const std::map<std::pair<int, int>, double>& m, int stage) {
      auto it = m.find({stage, a.micro});
      return it == m.end() ? -1.0 : it->second;
    };
    double dep = 0;
    if (a.op == Op::F && vs > 0) dep = need(fwd_done, vs - 1);
    if ((a.op == Op::B || a.op == Op::I) && vs < V - 1) dep = need(grad_done, vs + 1);
    if ((a.op == Op::B || a.op == Op::I) && vs == V - 1) dep = need(fwd_done, vs);
    if (a.op == Op::W) dep = need(grad_done, vs);
    return dep < 0 ? -1.0 : std::max(dep, free_at[r]);
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < s.pp; ++r) {
      while (next[r] < s.ranks[r].size()) {
        const PipeAction& a = s.ranks[r][next[r]];
        const double at = ready_at(r, a);
        if (at < 0) break;
        const double end = at + cost(a.op);
        const int vs = s.virtual_stage(r, a.chunk);
        if (a.op == Op::F) fwd_done[{vs, a.micro}] = end;
        if (a.op == Op::B || a.op == Op::I) grad_done[{vs, a.micro}] = end;
        t.start[r].push_back(at);
        free_at[r] = end;
        busy[r] += cost(a.op);
        ++next[r];
        progress = true;
      }
    }
  }
  for (int r = 0; r < s.pp; ++r)
    MT_CHECK(next[r] == s.ranks[r].size(), "pipeline schedule deadlocks: rank ", r, " stuck at action ", next[r],
             " of '", s.describe(r), "'");
  t.makespan = *std::max_element(free_at.begin(), free_at.end());
  for (int r = 0; r < s.pp; ++r) {
    t.bubble.push_back(t.makespan > 0 ? 1.0 - busy[r] / t.makespan : 0.0);
    int live = 0, peak = 0;
    for (const auto& a : s.ranks[r]) {
      live += a.op == Op::F ? 1 : (a.op == Op::B || a.op == Op::W) ? -1 : 0;
      peak = std::max(peak, live);
    }
    t.peak_in_flight.push_back(peak);
  }
  return t;
}

double ideal_bubble_fraction(int pp, int m) { return static_cast<double>(pp - 1) / (m + pp - 1); }

}  // namespace meshtrain::parallel

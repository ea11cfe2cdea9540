// Runs scheduler steps the way an engine would, with a deterministic stand-in for sampling: the tests decide the
// sampled token and whether it stops the sequence.
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "meshtrain/serve/scheduler.h"

namespace meshtrain::serve::testing {

// The token sampled for a sequence (its tokens so far given), and whether it ends the sequence.
using SampleFn = std::function<SampledToken(const Sequence&)>;

inline SampledToken sample_counting(const Sequence& s) {
  return {s.request.id, 1000 + s.num_tokens(), false};  // never stops: max_new_tokens ends the sequence
}

struct StepResult {
  StepPlan plan;
  std::vector<Finished> finished;
};

// One step: plan, then every sampling chunk's token reported.
inline StepResult run_step(Scheduler& sched, const SampleFn& sample = sample_counting) {
  StepResult r{sched.step(), {}};
  if (r.plan.empty()) return r;
  std::vector<SampledToken> sampled;
  for (const auto* chunks : {&r.plan.decodes, &r.plan.prefills}) {
    for (const Chunk& c : *chunks) {
      if (c.samples) sampled.push_back(sample(sched.sequence(c.id)));
    }
  }
  r.finished = sched.on_tokens(sampled);
  return r;
}

inline Request make_request(RequestId id, std::vector<TokenId> prompt, int32_t max_new_tokens) {
  return Request{id, std::move(prompt), max_new_tokens};
}

}  // namespace meshtrain::serve::testing

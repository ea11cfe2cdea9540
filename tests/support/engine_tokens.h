// engine_tokens(): the generated tokens of `requests` through an Engine's own loop (Engine::step on a Scheduler of
// `so`, Scheduler::on_tokens, Engine::remove), what generate_all runs, for the tests that compare two engines or
// look at one's graphs afterwards (tests/unit/serve/decode_graphs_test.cpp, tests/gpu/decode_graphs_test.cpp).
// Header-only; tests/ is on every test binary's include path.
#pragma once

#include <map>
#include <vector>

#include "meshtrain/serve/engine/engine.h"
#include "meshtrain/serve/engine/generate_all.h"
#include "meshtrain/serve/scheduler.h"

namespace meshtrain::testing_support {

inline std::map<serve::RequestId, std::vector<serve::TokenId>> engine_tokens(
    serve::Engine& engine, const serve::SchedulerOptions& so, const std::vector<serve::GenerationRequest>& requests) {
  serve::Scheduler sched(so);
  for (const auto& r : requests) {
    engine.add(r.request, r.sampling);
    sched.add(r.request);
  }
  std::map<serve::RequestId, std::vector<serve::TokenId>> out;
  while (sched.has_work()) {
    const auto sampled = engine.step(sched.step(), sched);
    for (const serve::SampledToken& t : sampled) out[t.id].push_back(t.token);
    for (const serve::Finished& f : sched.on_tokens(sampled)) engine.remove(f.id);
  }
  return out;
}

}  // namespace meshtrain::testing_support

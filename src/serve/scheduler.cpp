#include "meshtrain/serve/scheduler.h"

#include <algorithm>
#include <utility>

#include "meshtrain/core/error.h"

namespace meshtrain::serve {
namespace {

SchedulerOptions validated_scheduler_options(SchedulerOptions o) {
  MT_USER_CHECK(o.max_tokens_per_step > 0,
                "serve: max_tokens_per_step is the token budget of one step, a positive number, got ",
                o.max_tokens_per_step);
  MT_USER_CHECK(o.max_running > 0,
                "serve: max_running is the most sequences running at once, a positive number, got ", o.max_running);
  return o;
}

}  // namespace

Scheduler::Scheduler(SchedulerOptions options)
    : options_(validated_scheduler_options(options)),
      kv_(options.num_blocks, options.block_size, options.prefix_caching) {}

void Scheduler::add(Request r) {
  MT_USER_CHECK(!r.prompt.empty(), "request ", r.id, ": the prompt is empty; a request needs at least one token");
  MT_USER_CHECK(r.max_new_tokens >= 1, "request ", r.id, ": max_new_tokens must be at least 1, got ",
                r.max_new_tokens);
  MT_USER_CHECK(!sequences_.contains(r.id), "request ", r.id, ": the id is in use by a waiting or running request");
  // Its longest state: every token but the last sampled one has keys and values in the cache.
  const int64_t bs = options_.block_size;
  const int64_t kv_tokens = static_cast<int64_t>(r.prompt.size()) + r.max_new_tokens - 1;
  const int64_t blocks = (kv_tokens + bs - 1) / bs;
  MT_USER_CHECK(blocks <= options_.num_blocks, "request ", r.id, ": the prompt (", r.prompt.size(),
                " tokens) and max_new_tokens (", r.max_new_tokens, ") need ", blocks, " KV blocks of ", bs,
                " tokens, the cache has ", options_.num_blocks, "; shorten the prompt or lower max_new_tokens");
  const RequestId id = r.id;
  auto [it, inserted] = sequences_.emplace(id, Sequence(std::move(r), next_arrival_++, options_.block_size));
  waiting_.push_back(&it->second);
}

bool Scheduler::abort(RequestId id) {
  MT_CHECK(!step_in_flight_, "abort: request ", id, " while a step is in flight");
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return false;
  Sequence* s = &it->second;
  kv_.free(s->table);
  std::erase(running_, s);
  std::erase(waiting_, s);
  sequences_.erase(it);
  return true;
}

StepPlan Scheduler::step() {
  MT_CHECK(!step_in_flight_, "step: the previous step's tokens were not reported (on_tokens)");
  StepPlan plan;
  in_flight_.clear();
  int32_t budget = options_.max_tokens_per_step;
  schedule_decodes(plan, budget);
  schedule_running_prefills(plan, budget);
  // Admitting right after a preemption would hand the freed blocks to a newcomer and preempt again next step.
  if (plan.preempted.empty()) admit_waiting(plan, budget);
  step_in_flight_ = !plan.empty();
  if (step_in_flight_) {
    ++stats_.steps;
    stats_.computed_tokens += plan.num_tokens();
  }
  return plan;
}

void Scheduler::schedule_decodes(StepPlan& plan, int32_t& budget) {
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* s = running_[i];
    if (!s->is_decoding()) continue;
    bool preempted_itself = false;
    while (!preempted_itself && !kv_.grow(s->table, 1)) {
      // The newest running sequence, maybe `s` itself: everything after position i is still unplanned.
      Sequence* victim = running_.back();
      preempted_itself = victim == s;
      preempt(victim, plan);
    }
    if (preempted_itself) return;  // every sequence admitted after it went first
    add_chunk(s, 1, plan.decodes);
    --budget;
  }
}

void Scheduler::schedule_running_prefills(StepPlan& plan, int32_t& budget) {
  // At most one running sequence is part-way through its prefill, the newest: an admission that stops short of
  // its last token has used up the budget, and a prefill that stops short for want of blocks has left none for an
  // admission. So a prefill never preempts: it takes what fits, and the decodes before it preempt it when they
  // need its blocks (it is the newest). Sequences that all wait on each other's blocks cannot arise.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* s = running_[i];
    if (s->is_decoding()) continue;
    const int32_t n = std::min({s->num_uncomputed(), budget, kv_.room(s->table)});
    if (n == 0) continue;
    const bool grown = kv_.grow(s->table, n);
    MT_CHECK(grown, "prefill of request ", s->request.id, ": ", n, " tokens had room but no blocks");
    add_chunk(s, n, plan.prefills);
    budget -= n;
  }
}

void Scheduler::admit_waiting(StepPlan& plan, int32_t& budget) {
  while (!waiting_.empty() && budget > 0 && static_cast<int32_t>(running_.size()) < options_.max_running) {
    Sequence* s = waiting_.front();
    const PrefixMatch match = kv_.match(s->tokens);
    const int32_t cached = static_cast<int32_t>(match.hits.size()) * options_.block_size;
    const int32_t n = std::min(s->num_tokens() - cached, budget);
    if (!kv_.admit(s->table, match, n)) return;  // first come, first served: nobody overtakes the head
    s->num_computed = cached;
    stats_.prefix_hit_tokens += cached;
    waiting_.pop_front();
    running_.push_back(s);
    add_chunk(s, n, plan.prefills);
    budget -= n;
  }
}

void Scheduler::preempt(Sequence* s, StepPlan& plan) {
  kv_.free(s->table);
  s->num_computed = 0;  // recomputed from the start: its prompt and the tokens generated so far
  ++s->num_preemptions;
  std::erase(running_, s);
  waiting_.push_front(s);  // preempted newest first, so the waiting queue stays in arrival order
  plan.preempted.push_back(s->request.id);
  ++stats_.preemptions;
}

void Scheduler::add_chunk(Sequence* s, int32_t n, std::vector<Chunk>& out) {
  const Chunk c{s->request.id, s->num_computed, n, s->num_computed + n == s->num_tokens()};
  out.push_back(c);
  in_flight_.push_back(c);
}

std::vector<Finished> Scheduler::on_tokens(std::span<const SampledToken> sampled) {
  MT_CHECK(step_in_flight_, "on_tokens: no step in flight");
  std::unordered_map<RequestId, const SampledToken*> by_id;
  for (const SampledToken& t : sampled) {
    MT_CHECK(by_id.emplace(t.id, &t).second, "on_tokens: request ", t.id, " twice");
  }
  const auto sampling = std::count_if(in_flight_.begin(), in_flight_.end(), [](const Chunk& c) { return c.samples; });
  MT_CHECK(static_cast<size_t>(sampling) == by_id.size(), "on_tokens: ", by_id.size(), " tokens for ", sampling,
           " sampling chunks");
  for (const Chunk& c : in_flight_) {
    MT_CHECK(!c.samples || by_id.contains(c.id), "on_tokens: no token for request ", c.id);
  }
  std::vector<Finished> done;
  for (const Chunk& c : in_flight_) {
    Sequence& s = lookup(c.id);
    s.num_computed += c.num_tokens;
    // Published before a finished sequence frees them: its blocks stay cached for the next turn of a chat.
    kv_.publish(s.table, s.tokens, s.num_computed);
    if (!c.samples) continue;
    const SampledToken& t = *by_id.at(c.id);
    s.tokens.push_back(t.token);
    if (t.stop) {
      finish(&s, FinishReason::kStop, done);
    } else if (s.num_generated() >= s.request.max_new_tokens) {
      finish(&s, FinishReason::kLength, done);
    }
  }
  in_flight_.clear();
  step_in_flight_ = false;
  return done;
}

void Scheduler::finish(Sequence* s, FinishReason reason, std::vector<Finished>& out) {
  kv_.free(s->table);
  std::erase(running_, s);
  const RequestId id = s->request.id;  // erase() must not read the key from the node it destroys
  out.push_back({id, reason});
  sequences_.erase(id);
}

std::vector<RequestId> Scheduler::waiting() const {
  std::vector<RequestId> ids;
  for (const Sequence* s : waiting_) ids.push_back(s->request.id);
  return ids;
}

std::vector<RequestId> Scheduler::running() const {
  std::vector<RequestId> ids;
  for (const Sequence* s : running_) ids.push_back(s->request.id);
  return ids;
}

const Sequence& Scheduler::sequence(RequestId id) const {
  auto it = sequences_.find(id);
  MT_CHECK(it != sequences_.end(), "request ", id, " is neither waiting nor running");
  return it->second;
}

Sequence& Scheduler::lookup(RequestId id) {
  auto it = sequences_.find(id);
  MT_CHECK(it != sequences_.end(), "request ", id, " is neither waiting nor running");
  return it->second;
}

}  // namespace meshtrain::serve

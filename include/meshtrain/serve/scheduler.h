// Scheduler: continuous batching over a paged KV cache (docs/serving.md "Scheduler"), after vLLM's. Requests
// join and leave the running batch at every step. Each step() plans, within a token budget:
//   1. decodes: every running sequence with one token left to compute, oldest first. When one needs a block and
//      none is free, the most recently admitted running sequence is preempted: its blocks are freed and it goes
//      back to the front of the waiting queue, to be recomputed later (prompt and generated tokens prefilled
//      again; its published blocks may still be cached then, which makes that cheap);
//   2. the prefill chunk of a running sequence admitted earlier, as many tokens as the budget and the free blocks
//      allow (chunked prefill);
//   3. admissions, first come first served: the head of the waiting queue joins while fewer than max_running
//      sequences run and the free blocks hold its next chunk (after its published prefix, which it shares);
//      otherwise nothing behind it joins either. A step that preempted admits nothing.
// The caller runs the plan and reports each sampled token through on_tokens() before the next step(); EOS or a
// stop string is the caller's to detect (it says `stop`), max_new_tokens the scheduler's. No clocks: the plan
// depends only on the calls made, so a run can be replayed.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <unordered_map>
#include <vector>

#include "meshtrain/serve/kv_cache_manager.h"
#include "meshtrain/serve/request.h"
#include "meshtrain/serve/sequence.h"
#include "meshtrain/serve/step_plan.h"

namespace meshtrain::serve {

struct SchedulerOptions {
  int32_t num_blocks = 1024;            // KV blocks in the cache
  int32_t block_size = 16;              // tokens per KV block
  int32_t max_tokens_per_step = 2048;   // token budget of one step: a decode counts 1, a prefill chunk its length
  int32_t max_running = 256;            // sequences holding KV blocks at once (the batch's rows)
  bool prefix_caching = true;           // share published blocks between sequences with a common prefix
};

// One token the step sampled, for a chunk with `samples` set.
struct SampledToken {
  RequestId id = 0;
  TokenId token = 0;
  bool stop = false;  // EOS or a stop string: the sequence finishes with this token
};

struct Finished {
  RequestId id = 0;
  FinishReason reason = FinishReason::kStop;
};

// Counters for /metrics and tests.
struct SchedulerStats {
  int64_t steps = 0;
  int64_t preemptions = 0;
  int64_t prefix_hit_tokens = 0;  // prompt tokens taken from published blocks instead of computed
  int64_t computed_tokens = 0;    // tokens in the plans: decodes and prefill chunks
};

class Scheduler {
 public:
  // UserError naming the option when one is not positive.
  explicit Scheduler(SchedulerOptions options);

  // Queues `r` behind the requests already waiting. UserError for an empty prompt, a max_new_tokens under 1,
  // an id in use, or a request that could never fit in the cache on its own.
  void add(Request r);
  // Removes a waiting or running request (a client went away) and frees its blocks; false if unknown. Not while
  // a step is in flight.
  bool abort(RequestId id);

  // The next step's plan; empty when there is nothing to run. Each non-empty plan is followed by on_tokens().
  StepPlan step();
  // The tokens the step sampled, one for each chunk with `samples`, in any order. Returns the sequences that
  // finished (their blocks are back in the pool, their published blocks stay cached).
  std::vector<Finished> on_tokens(std::span<const SampledToken> sampled);

  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  // Request ids in queue order: waiting front first, running oldest admission first.
  std::vector<RequestId> waiting() const;
  std::vector<RequestId> running() const;
  // A waiting or running sequence; Error if unknown.
  const Sequence& sequence(RequestId id) const;
  const BlockPool& pool() const { return kv_.pool(); }
  const SchedulerStats& stats() const { return stats_; }
  const SchedulerOptions& options() const { return options_; }

 private:
  void schedule_decodes(StepPlan& plan, int32_t& budget);
  void schedule_running_prefills(StepPlan& plan, int32_t& budget);
  void admit_waiting(StepPlan& plan, int32_t& budget);
  void preempt(Sequence* s, StepPlan& plan);
  void add_chunk(Sequence* s, int32_t n, std::vector<Chunk>& out);
  void finish(Sequence* s, FinishReason reason, std::vector<Finished>& out);
  Sequence& lookup(RequestId id);

  SchedulerOptions options_;
  KvCacheManager kv_;
  std::unordered_map<RequestId, Sequence> sequences_;  // every waiting or running sequence
  std::deque<Sequence*> waiting_;                      // arrival order; preempted ones back at the front
  std::vector<Sequence*> running_;                     // admission order, newest last
  std::vector<Chunk> in_flight_;                       // the last plan's chunks, until on_tokens
  bool step_in_flight_ = false;
  int64_t next_arrival_ = 0;
  SchedulerStats stats_;
};

}  // namespace meshtrain::serve

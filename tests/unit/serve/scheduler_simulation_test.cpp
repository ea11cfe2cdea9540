// A seeded random workload through the scheduler, with a stand-in engine that keeps a fake KV cache: the "keys
// and values" of position p are a hash of the sequence's tokens up to p, as real ones depend on the whole
// prefix, and the sampled token is a function of the last position's value read back from the cache. So a block
// shared with the wrong prefix, a slot overwritten by another sequence, or a recompute that lost a token changes
// the generated text, which is compared with the same generation run alone. Invariants are checked every step.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "meshtrain/serve/scheduler.h"
#include "meshtrain/serve/splitmix64.h"

namespace meshtrain::serve {
namespace {

constexpr TokenId kEos = 0;
constexpr uint64_t kVocab = 24;

// values[p]: the fake keys and values of position p, a hash of tokens[0..p].
std::vector<uint64_t> sim_prefix_values(const std::vector<TokenId>& tokens, size_t n) {
  std::vector<uint64_t> values(n);
  uint64_t h = 0;
  for (size_t p = 0; p < n; ++p) values[p] = h = splitmix64(h ^ static_cast<uint64_t>(tokens[p]));
  return values;
}

TokenId sim_next_token(uint64_t last_value) { return static_cast<TokenId>(splitmix64(last_value ^ 0x5eedULL) % kVocab); }

// The generation run alone: what every request must produce however it is batched, preempted or shared.
std::vector<TokenId> sim_reference(std::vector<TokenId> tokens, int32_t max_new_tokens) {
  std::vector<TokenId> out;
  while (static_cast<int32_t>(out.size()) < max_new_tokens) {
    out.push_back(sim_next_token(sim_prefix_values(tokens, tokens.size()).back()));
    tokens.push_back(out.back());
    if (out.back() == kEos) break;
  }
  return out;
}

class FakeEngine {
 public:
  FakeEngine(int32_t num_blocks, int32_t block_size)
      : cache_(static_cast<size_t>(num_blocks) * static_cast<size_t>(block_size), 0) {}

  // Reads each chunk's context from the cache, writes the chunk's positions, samples where a chunk ends.
  std::vector<SampledToken> run(const Scheduler& sched, const StepPlan& plan) {
    std::vector<const Chunk*> chunks;
    for (const Chunk& c : plan.decodes) chunks.push_back(&c);
    for (const Chunk& c : plan.prefills) chunks.push_back(&c);
    for (const Chunk* c : chunks) {  // every read before any write: one forward pass
      const Sequence& s = sched.sequence(c->id);
      const auto values = sim_prefix_values(s.tokens, static_cast<size_t>(c->start));
      for (int32_t q = 0; q < c->start; ++q) {
        EXPECT_EQ(cache_[static_cast<size_t>(s.table.slot(q))], values[static_cast<size_t>(q)])
            << "request " << c->id << " position " << q;
      }
    }
    std::set<int64_t> written;
    std::vector<SampledToken> sampled;
    for (const Chunk* c : chunks) {
      const Sequence& s = sched.sequence(c->id);
      const auto values = sim_prefix_values(s.tokens, static_cast<size_t>(c->start + c->num_tokens));
      for (int32_t p = c->start; p < c->start + c->num_tokens; ++p) {
        const BlockId block = s.table.blocks()[static_cast<size_t>(p / s.table.block_size())];
        EXPECT_EQ(sched.pool().ref_count(block), 1) << "request " << c->id << " writes a shared block";
        EXPECT_FALSE(sched.pool().is_published(block)) << "request " << c->id << " writes a published block";
        const int64_t slot = s.table.slot(p);
        EXPECT_TRUE(written.insert(slot).second) << "slot " << slot << " written twice in one step";
        cache_[static_cast<size_t>(slot)] = values[static_cast<size_t>(p)];
      }
      if (c->samples) {
        const TokenId t = sim_next_token(cache_[static_cast<size_t>(s.table.slot(s.num_tokens() - 1))]);
        sampled.push_back({c->id, t, t == kEos});
      }
    }
    return sampled;
  }

 private:
  std::vector<uint64_t> cache_;
};

struct SimConfig {
  int32_t num_blocks, block_size, budget, max_running;
  bool prefix_caching;
};

std::vector<Request> sim_workload(std::mt19937_64& rng) {
  auto tokens = [&rng](size_t n) {
    std::vector<TokenId> t;
    for (size_t i = 0; i < n; ++i) t.push_back(static_cast<TokenId>(1 + rng() % (kVocab - 1)));
    return t;
  };
  std::vector<std::vector<TokenId>> system_prompts;
  for (int i = 0; i < 3; ++i) system_prompts.push_back(tokens(5 + rng() % 16));
  std::vector<Request> requests;
  for (RequestId id = 0; id < 40; ++id) {
    std::vector<TokenId> prompt;
    if (!requests.empty() && rng() % 8 == 0) {
      prompt = requests[rng() % requests.size()].prompt;  // the same prompt again
    } else if (rng() % 2 == 0) {
      prompt = system_prompts[rng() % system_prompts.size()];
      const auto tail = tokens(1 + rng() % 16);
      prompt.insert(prompt.end(), tail.begin(), tail.end());
    } else {
      prompt = tokens(1 + rng() % 30);
    }
    requests.push_back(Request{id, prompt, static_cast<int32_t>(1 + rng() % 20)});
  }
  return requests;
}

// Between steps: every block's count is the number of running tables holding it, waiting sequences hold
// nothing and wait in arrival order, at most the newest running sequence is part-way through its prefill.
void check_between_steps(const Scheduler& sched) {
  std::map<BlockId, int32_t> holders;
  const auto running = sched.running();
  ASSERT_LE(static_cast<int32_t>(running.size()), sched.options().max_running);
  for (size_t i = 0; i < running.size(); ++i) {
    const Sequence& s = sched.sequence(running[i]);
    ASSERT_EQ(s.table.num_tokens(), s.num_computed);
    ASSERT_TRUE(s.is_decoding() || i + 1 == running.size()) << "request " << running[i] << " is mid-prefill";
    for (BlockId b : s.table.blocks()) ++holders[b];
  }
  int32_t free_blocks = 0;
  for (BlockId b = 0; b < sched.pool().num_blocks(); ++b) {
    ASSERT_EQ(sched.pool().ref_count(b), holders.contains(b) ? holders[b] : 0) << "block " << b;
    free_blocks += holders.contains(b) ? 0 : 1;
  }
  ASSERT_EQ(sched.pool().num_free(), free_blocks);
  int64_t last_arrival = -1;
  for (RequestId id : sched.waiting()) {
    const Sequence& s = sched.sequence(id);
    ASSERT_TRUE(s.table.blocks().empty());
    ASSERT_EQ(s.num_computed, 0);
    ASSERT_GT(s.arrival, last_arrival) << "the waiting queue is out of arrival order";
    last_arrival = s.arrival;
  }
}

void check_plan(const Scheduler& sched, const StepPlan& plan) {
  ASSERT_LE(plan.num_tokens(), sched.options().max_tokens_per_step);
  std::set<RequestId> ids;
  for (const auto* chunks : {&plan.decodes, &plan.prefills}) {
    for (const Chunk& c : *chunks) {
      ASSERT_TRUE(ids.insert(c.id).second) << "request " << c.id << " twice in a plan";
      const Sequence& s = sched.sequence(c.id);
      ASSERT_GE(c.num_tokens, 1);
      ASSERT_EQ(c.start, s.num_computed);
      ASSERT_EQ(s.table.num_tokens(), c.start + c.num_tokens);
      ASSERT_EQ(c.samples, c.start + c.num_tokens == s.num_tokens());
    }
  }
  for (const Chunk& c : plan.decodes) ASSERT_TRUE(c.num_tokens == 1 && c.samples);
}

struct SimTotals {
  int64_t preemptions = 0;
  int64_t prefix_hit_tokens = 0;
};

void simulate(const SimConfig& cfg, uint64_t seed, SimTotals& totals) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed << ", " << cfg.num_blocks << " blocks of " << cfg.block_size
                                    << ", budget " << cfg.budget << ", max_running " << cfg.max_running);
  std::mt19937_64 rng(seed);
  const std::vector<Request> requests = sim_workload(rng);
  Scheduler sched(SchedulerOptions{cfg.num_blocks, cfg.block_size, cfg.budget, cfg.max_running, cfg.prefix_caching});
  FakeEngine engine(cfg.num_blocks, cfg.block_size);
  std::map<RequestId, std::vector<TokenId>> outputs;
  std::map<RequestId, FinishReason> finished;
  size_t next = 0;
  for (int step = 0; (next < requests.size() || sched.has_work()) && step < 20000; ++step) {
    while (next < requests.size() && (!sched.has_work() || rng() % 3 == 0)) sched.add(requests[next++]);
    const StepPlan plan = sched.step();
    ASSERT_FALSE(plan.empty()) << "nothing planned at step " << step << " with work queued";
    ASSERT_NO_FATAL_FAILURE(check_plan(sched, plan));
    const auto sampled = engine.run(sched, plan);
    for (const SampledToken& t : sampled) outputs[t.id].push_back(t.token);
    for (const Finished& f : sched.on_tokens(sampled)) finished[f.id] = f.reason;
    ASSERT_NO_FATAL_FAILURE(check_between_steps(sched));
  }
  ASSERT_FALSE(sched.has_work()) << "the workload did not finish";
  EXPECT_EQ(sched.pool().num_free(), cfg.num_blocks);
  for (const Request& r : requests) {
    const auto want = sim_reference(r.prompt, r.max_new_tokens);
    EXPECT_EQ(outputs[r.id], want) << "request " << r.id;
    EXPECT_EQ(finished.at(r.id), want.back() == kEos ? FinishReason::kStop : FinishReason::kLength);
  }
  totals.preemptions += sched.stats().preemptions;
  totals.prefix_hit_tokens += sched.stats().prefix_hit_tokens;
}

TEST(SchedulerSimulation, RandomWorkloadsFinishWithTheirOwnOutputs) {
  // The smallest pool fits the longest request (20 + 16 + 20 - 1 tokens) and little else: preemption is routine.
  const std::vector<SimConfig> configs{
      {14, 4, 64, 8, true}, {16, 4, 16, 4, true}, {16, 4, 16, 4, false},
      {40, 2, 8, 8, true},  {60, 1, 12, 6, true}, {128, 4, 64, 16, true},
  };
  for (const SimConfig& cfg : configs) {
    SimTotals totals;
    for (uint64_t seed = 1; seed <= 25; ++seed) {
      ASSERT_NO_FATAL_FAILURE(simulate(cfg, seed, totals));
    }
    // The paths under test were taken: small pools preempt, prefix caching finds shared prompts.
    if (cfg.num_blocks <= 16) {
      EXPECT_GT(totals.preemptions, 0) << cfg.num_blocks << " blocks";
    }
    if (cfg.prefix_caching) {
      EXPECT_GT(totals.prefix_hit_tokens, 0) << cfg.num_blocks << " blocks";
    } else {
      EXPECT_EQ(totals.prefix_hit_tokens, 0);
    }
  }
}

}  // namespace
}  // namespace meshtrain::serve

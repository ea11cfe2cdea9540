#include "meshtrain/serve/engine/engine_loop.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <iostream>

#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"
#include "meshtrain/serve/engine/tp_steps.h"

namespace meshtrain::serve {

EngineLoop::EngineLoop(model::Transformer model, GenerateOptions options, int64_t max_waiting)
    : options_(std::move(options)), max_waiting_(max_waiting), model_(std::move(model)) {
  MT_USER_CHECK(max_waiting_ >= 1, "max_waiting is ", max_waiting_, "; valid: an integer >= 1");
  scheduler_ = std::make_unique<Scheduler>(options_.scheduler);
  cache_ = std::make_unique<PagedKvCache>(*model_, options_.scheduler.num_blocks, options_.scheduler.block_size);
  engine_ = std::make_unique<Engine>(model_, *cache_, engine_options(options_));
  metrics_.blocks_total = metrics_.blocks_free = options_.scheduler.num_blocks;
  if (model_->head_weight().is_cuda()) warm_up();
  thread_ = std::thread([this] { run(); });
}

void EngineLoop::warm_up() {
  const auto t0 = Clock::now();
  const SchedulerOptions& so = options_.scheduler;
  const int64_t fits = std::min<int64_t>({so.max_tokens_per_step, model_->config().max_seq_len - 1,
                                          static_cast<int64_t>(so.num_blocks - 1) * so.block_size});
  SamplingParams greedy;
  greedy.temperature = 0;
  for (const int64_t n : {std::min<int64_t>(so.block_size + 1, fits), fits}) {
    if (n < 1) continue;
    const Request r{next_id_++, std::vector<TokenId>(static_cast<size_t>(n), 0), 2};
    engine_->add(r, greedy);
    scheduler_->add(r);
    while (scheduler_->has_work())
      for (const Finished& f : scheduler_->on_tokens(engine_->step(scheduler_->step(), *scheduler_)))
        engine_->remove(f.id);
  }
  log::info("engine warmed up in %.2f s (a short prompt and one of %lld tokens)",
            std::chrono::duration<double>(Clock::now() - t0).count(), static_cast<long long>(fits));
}

EngineLoop::~EngineLoop() { stop(); }

std::shared_ptr<RequestStream> EngineLoop::submit(std::vector<TokenId> prompt, int32_t max_new_tokens,
                                                  const SamplingParams& sampling) {
  auto stream = std::make_shared<RequestStream>();
  std::lock_guard lock(mu_);
  if (stopping_ || draining_) {
    stream->fail("the server is shutting down: it takes no new requests", false);
    return stream;
  }
  // Waiting: queued here, being admitted, or in the scheduler's queue (as of the last step or admission).
  if (static_cast<int64_t>(incoming_.size()) + admitting_ + metrics_.waiting >= max_waiting_) {
    ++metrics_.requests_refused;
    stream->fail(cat("the server is busy: ", max_waiting_,
                     " requests are already waiting (--max-waiting); retry later"),
                 /*rejected=*/false);
    return stream;
  }
  incoming_.push_back({{{next_id_++, std::move(prompt), max_new_tokens}, sampling}, stream, Clock::now()});
  cv_.notify_all();
  return stream;
}

void EngineLoop::drain() {
  std::lock_guard lock(mu_);
  draining_ = true;
}

bool EngineLoop::draining() const {
  std::lock_guard lock(mu_);
  return draining_;
}

bool EngineLoop::wait_idle(Clock::time_point deadline) {
  {
    std::unique_lock lock(mu_);
    if (!cv_.wait_until(lock, deadline, [&] { return incoming_.empty() && admitting_ == 0 && open_ == 0; }))
      return false;
  }
  delivery_.flush();  // the ends the engine thread posted reach their streams (microseconds)
  return true;
}

int64_t EngineLoop::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopped_) return 0;
    stopped_ = stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  delivery_.close();  // every stream the loop ended has its end before stop() returns
  std::lock_guard lock(mu_);
  return ended_at_stop_;
}

EngineLoopMetrics EngineLoop::metrics() const {
  std::lock_guard lock(mu_);
  EngineLoopMetrics m = metrics_;
  const Clock::time_point now = Clock::now();
  m.generation_tokens_per_second = generated_rate_.per_second(now);
  m.computed_tokens_per_second = computed_rate_.per_second(now);
  return m;
}

void EngineLoop::run() {
  for (;;) {
    std::vector<Pending> incoming;
    bool idle = false;
    {
      std::unique_lock lock(mu_);
      idle = !wait_for_work(lock);  // idle: nothing queued and no stop either
      if (stopping_) break;
      incoming.swap(incoming_);
      admitting_ = static_cast<int64_t>(incoming.size());
    }
    try {
      if (idle) {
        options_.tp->idle();  // nothing to run for a while: the other ranks hear so before their wait times out
        continue;
      }
      admit(incoming);
      end_cancelled_and_stopped();
      if (scheduler_->has_work()) run_step();
      std::lock_guard lock(mu_);
      publish_open();
    } catch (const std::exception& e) {
      if (options_.tp) abandon_group(e.what());
      // A step failed (not a request's fault): its requests cannot go on; the loop serves the next ones.
      end_all(cat("the engine failed: ", e.what()));
      scheduler_ = std::make_unique<Scheduler>(options_.scheduler);
      std::lock_guard lock(mu_);
      admitting_ = 0;
      snapshot_scheduler();
      publish_open();
      engine_ = std::make_unique<Engine>(model_, *cache_, engine_options(options_));
    }
  }
  std::lock_guard lock(mu_);
  for (Pending& p : incoming_) p.stream->fail("the server is shutting down", false);
  ended_at_stop_ = static_cast<int64_t>(incoming_.size()) + end_all("the server is shutting down");
  incoming_.clear();
  publish_open();
}

void EngineLoop::abandon_group(const std::string& what) {
  // The other ranks may be inside a collective this rank will never join, or gone: no step can run again. Exiting
  // non-zero makes meshrun stop the whole group and report it; the clients' connections close.
  std::cerr << "meshtrain serve: a tensor-parallel step failed, the group cannot go on: " << what << std::endl;
  std::_Exit(1);
}

bool EngineLoop::wait_for_work(std::unique_lock<std::mutex>& lock) {
  // Wake for new requests, for a stop, or at once while requests run (a cancel is seen between steps).
  const auto ready = [&] { return stopping_ || !incoming_.empty() || scheduler_->has_work(); };
  if (!options_.tp) {
    cv_.wait(lock, ready);
    return true;
  }
  return cv_.wait_for(lock, options_.tp->heartbeat(), ready);
}

void EngineLoop::admit(std::vector<Pending>& incoming) {
  for (Pending& p : incoming) {
    const RequestId id = p.request.request.id;
    if (p.stream->cancelled()) {  // gone before it started
      p.stream->finish(FinishReason::kAborted);
      std::lock_guard lock(mu_);
      ++metrics_.requests_aborted;
      continue;
    }
    try {
      engine_->add(p.request.request, p.request.sampling);
      scheduler_->add(p.request.request);
    } catch (const UserError& e) {
      engine_->remove(id);
      p.stream->fail(e.what(), /*rejected=*/true);
      continue;
    }
    streams_[id] = p.stream;
    clocks_[id] = {p.submitted, std::nullopt};
    std::lock_guard lock(mu_);
    metrics_.prompt_tokens += static_cast<int64_t>(p.request.request.prompt.size());
  }
  std::lock_guard lock(mu_);
  metrics_.waiting = static_cast<int64_t>(scheduler_->waiting().size());
  admitting_ = 0;
  publish_open();  // with admitting_: wait_idle() never sees the admitted requests as neither queued nor held
}

void EngineLoop::end_cancelled_and_stopped() {
  std::vector<StreamDelivery::Update> ends;
  for (auto it = streams_.begin(); it != streams_.end();) {
    const bool stopped = it->second->stop_requested();
    if (!stopped && !it->second->cancelled()) {
      ++it;
      continue;
    }
    // A stop string is the reader's to find (it has the text); the scheduler frees the blocks at once.
    scheduler_->abort(it->first);
    engine_->remove(it->first);
    ends.push_back({it->second, {.finish = stopped ? FinishReason::kStop : FinishReason::kAborted}});
    clocks_.erase(it->first);
    it = streams_.erase(it);
    std::lock_guard lock(mu_);
    snapshot_scheduler();
    ++(stopped ? metrics_.requests_finished : metrics_.requests_aborted);
  }
  delivery_.post(std::move(ends));
}

void EngineLoop::run_step() {
  const Clock::time_point start = Clock::now();
  const int64_t computed_before = scheduler_->stats().computed_tokens;
  const StepPlan plan = scheduler_->step();
  MT_CHECK(!plan.empty(), "engine loop: the scheduler has work but planned an empty step");
  const std::vector<SampledToken> sampled = engine_->step(plan, *scheduler_);
  const std::vector<Finished> finished = scheduler_->on_tokens(sampled);
  {
    // The metrics first: a reader that sees its request end then also sees the step counted.
    const Clock::time_point end = Clock::now();
    std::lock_guard lock(mu_);
    snapshot_scheduler();
    time_tokens(sampled);
    metrics_.requests_finished += static_cast<int64_t>(finished.size());
    metrics_.generated_tokens += static_cast<int64_t>(sampled.size());
    metrics_.step_time.observe(std::chrono::duration<double>(end - start).count());
    generated_rate_.add(end, static_cast<int64_t>(sampled.size()));
    computed_rate_.add(end, scheduler_->stats().computed_tokens - computed_before);
  }
  // A stream's token and, where the request ended with it, its end: one part, one wake-up of its reader.
  std::vector<StreamDelivery::Update> updates;
  updates.reserve(sampled.size());
  for (const SampledToken& t : sampled) updates.push_back({streams_.at(t.id), {.tokens = {t.token}}});
  for (const Finished& f : finished) {
    const std::shared_ptr<RequestStream>& stream = streams_.at(f.id);
    const auto it = std::find_if(updates.begin(), updates.end(), [&](const auto& u) { return u.first == stream; });
    if (it != updates.end()) {
      it->second.finish = f.reason;
    } else {
      updates.push_back({stream, {.finish = f.reason}});
    }
    forget(f.id);
    engine_->remove(f.id);
  }
  delivery_.post(std::move(updates));
}

void EngineLoop::snapshot_scheduler() {
  metrics_.running = static_cast<int64_t>(scheduler_->running().size());
  metrics_.waiting = static_cast<int64_t>(scheduler_->waiting().size());
  metrics_.blocks_free = scheduler_->pool().num_free();
  metrics_.steps = scheduler_->stats().steps;
  metrics_.preemptions = scheduler_->stats().preemptions;
  metrics_.computed_tokens = scheduler_->stats().computed_tokens;
  metrics_.prefix_hit_tokens = scheduler_->stats().prefix_hit_tokens;
  metrics_.blocks_cached = scheduler_->pool().num_published();
}

void EngineLoop::time_tokens(const std::vector<SampledToken>& sampled) {
  const Clock::time_point now = Clock::now();  // one step samples all its tokens at once
  for (const SampledToken& t : sampled) {
    TokenClock& c = clocks_.at(t.id);
    LatencyHistogram& h = c.last_token ? metrics_.time_between_tokens : metrics_.time_to_first_token;
    h.observe(std::chrono::duration<double>(now - c.last_token.value_or(c.submitted)).count());
    c.last_token = now;
  }
}

void EngineLoop::forget(RequestId id) {
  streams_.erase(id);
  clocks_.erase(id);
}

int64_t EngineLoop::end_all(const std::string& message) {
  std::vector<StreamDelivery::Update> ends;
  for (auto& [id, stream] : streams_) ends.push_back({stream, {.finish = FinishReason::kAborted, .error = message}});
  delivery_.post(std::move(ends));
  const auto n = static_cast<int64_t>(streams_.size());
  streams_.clear();
  clocks_.clear();
  return n;
}

void EngineLoop::publish_open() {
  open_ = static_cast<int64_t>(streams_.size());
  cv_.notify_all();  // wait_idle()
}

}  // namespace meshtrain::serve

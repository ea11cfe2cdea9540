// EngineLoop: the serving engine on a thread of its own (docs/serving.md "meshtrain serve"). Other threads
// submit requests through a queue; between two steps the loop admits them to the Scheduler and the Engine,
// ends the cancelled ones and those whose text reached a stop string, then runs one step and hands each sampled
// token to its request's RequestStream (through a StreamDelivery, so that the next step need not wait for the
// readers' wake-ups). Requests therefore join and leave the running batch at every step
// (continuous batching). Under tensor parallelism (GenerateOptions::tp) this is rank 0's loop: its engine
// broadcasts each step, and an idle loop broadcasts a heartbeat (serve/engine/tp_steps.h).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "meshtrain/model/transformer.h"
#include "meshtrain/serve/engine/engine.h"
#include "meshtrain/serve/engine/generate_all.h"
#include "meshtrain/serve/engine/latency_histogram.h"
#include "meshtrain/serve/engine/paged_kv_cache.h"
#include "meshtrain/serve/engine/request_stream.h"
#include "meshtrain/serve/engine/stream_delivery.h"
#include "meshtrain/serve/engine/token_rate.h"

namespace meshtrain::serve {

// A snapshot for /metrics, taken after each step.
struct EngineLoopMetrics {
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t blocks_total = 0;
  int64_t blocks_free = 0;
  int64_t requests_finished = 0;
  int64_t prompt_tokens = 0;       // prompt tokens of the admitted requests
  int64_t generated_tokens = 0;
  int64_t steps = 0;
  int64_t preemptions = 0;
  int64_t requests_refused = 0;    // turned away because max_waiting requests were already waiting
  int64_t requests_aborted = 0;    // ended unfinished because their client went away (RequestStream::cancel)
  int64_t computed_tokens = 0;     // tokens through the model: prefill chunks and decodes (SchedulerStats)
  int64_t prefix_hit_tokens = 0;   // prompt tokens taken from cached blocks instead of computed
  int64_t blocks_cached = 0;       // published blocks: a prompt prefix a later request can share
  LatencyHistogram time_to_first_token;   // submit() to the step that sampled a request's first token
  LatencyHistogram time_between_tokens;   // between the steps that sampled two consecutive tokens of a request
  LatencyHistogram step_time;             // one engine step: the scheduler's plan, the model, the sampling
  // Over the last 10 s (serve/engine/token_rate.h), as of the snapshot: tokens generated, tokens computed.
  double generation_tokens_per_second = 0;
  double computed_tokens_per_second = 0;
};

class EngineLoop {
 public:
  using Clock = std::chrono::steady_clock;

  // Starts the thread. UserError for bad scheduler options or a max_waiting under 1. At most `max_waiting`
  // requests wait for admission (queued or in the scheduler's waiting queue); submit() refuses the next ones.
  // On CUDA, runs warm-up requests first (warm_up()), so the first client does not pay for the GPU's set-up.
  EngineLoop(model::Transformer model, GenerateOptions options, int64_t max_waiting = 256);
  ~EngineLoop();  // stop()
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Queues a request (its id is assigned here); a request the scheduler or the engine refuses ends its stream
  // with a `rejected` error, and one beyond max_waiting with a (not rejected) "the server is busy" error.
  std::shared_ptr<RequestStream> submit(std::vector<TokenId> prompt, int32_t max_new_tokens,
                                        const SamplingParams& sampling);
  // The start of a graceful shutdown: submit() refuses every new request ("the server is shutting down") while
  // the queued and running ones go on to their end. Idempotent.
  void drain();
  bool draining() const;
  // True once every request submitted has ended (its stream finished or failed, the end appended to it); false if
  // `deadline` comes first.
  bool wait_idle(Clock::time_point deadline);
  // Ends every open stream with an error and joins the thread; returns how many requests it so ended unfinished
  // (queued or running). Idempotent: later calls return 0.
  int64_t stop();
  EngineLoopMetrics metrics() const;

 private:
  struct Pending {
    GenerationRequest request;
    std::shared_ptr<RequestStream> stream;
    Clock::time_point submitted;
  };
  // When a running request was submitted and when its last token was sampled (none yet: nullopt).
  struct TokenClock {
    Clock::time_point submitted;
    std::optional<Clock::time_point> last_token;
  };
  // Two requests of its own through the engine before any client's (CUDA only): a short prompt and one of a
  // whole step's tokens, each prefilled and decoded once. CUDA loads kernels on first use and cuBLAS and flash
  // attention set up per shape; without this the first requests' time to first token carries that (a fifth of
  // a second on an 8B model). Their blocks are freed; the scheduler's step count includes their steps.
  void warm_up();
  void run();
  // Waits until there is work or a stop; false when, under tensor parallelism, the heartbeat's time passed first.
  bool wait_for_work(std::unique_lock<std::mutex>& lock);
  // Under tensor parallelism a failed step or heartbeat leaves the ranks out of step: one line on stderr, exit 1.
  [[noreturn]] static void abandon_group(const std::string& what);
  void admit(std::vector<Pending>& incoming);
  void end_cancelled_and_stopped();  // cancelled: aborted; stopped on a stop string: finished
  void run_step();
  int64_t end_all(const std::string& message);  // returns how many it ended
  void publish_open();  // streams_' size for wait_idle(); mu_ held
  void snapshot_scheduler();  // the scheduler's figures into metrics_; mu_ held
  void time_tokens(const std::vector<SampledToken>& sampled);  // into the histograms; mu_ held
  void forget(RequestId id);  // its stream and clock

  GenerateOptions options_;
  int64_t max_waiting_;
  model::Transformer model_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<PagedKvCache> cache_;
  std::unique_ptr<Engine> engine_;
  std::unordered_map<RequestId, std::shared_ptr<RequestStream>> streams_;  // engine thread only
  std::unordered_map<RequestId, TokenClock> clocks_;                       // engine thread only
  StreamDelivery delivery_;  // every update of a stream in streams_ goes through it

  mutable std::mutex mu_;  // guards the fields below
  std::condition_variable cv_;
  std::vector<Pending> incoming_;
  bool stopping_ = false;
  bool draining_ = false;
  bool stopped_ = false;   // stop() has run
  int64_t admitting_ = 0;  // taken from incoming_, not yet in the scheduler's waiting count
  int64_t open_ = 0;       // requests the engine thread holds (streams_), as of its last publish_open()
  int64_t ended_at_stop_ = 0;  // streams the engine thread ended unfinished on stop()

  RequestId next_id_ = 1;
  EngineLoopMetrics metrics_;
  TokenRate generated_rate_, computed_rate_;  // the steps' tokens, for metrics()' per-second figures
  std::thread thread_;
};

}  // namespace meshtrain::serve

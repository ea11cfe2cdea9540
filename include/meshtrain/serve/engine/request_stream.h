// RequestStream: one request's channel from the engine thread (EngineLoop) to whoever waits for its tokens (an
// HTTP connection). The engine pushes tokens as they are sampled and ends the stream once, with a finish reason
// or an error (EngineLoop through StreamDelivery's thread, serve/engine/stream_delivery.h); the reader takes what
// has come so far, blocking until something has. cancel() asks the engine to
// abort the request between steps (the client went away); stop() ends it as finished on a stop string.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "meshtrain/serve/request.h"

namespace meshtrain::serve {

struct StreamPart {
  std::vector<TokenId> tokens;          // the tokens sampled since the last part
  std::optional<FinishReason> finish;   // set on the last part
  std::string error;                    // set on the last part when the request failed (one line)
  bool rejected = false;                // the error is the request's fault (HTTP 400), not the server's
};

class RequestStream {
 public:
  // Engine side. append() adds `part`'s tokens and, where it has a finish, ends the stream with it (and its error)
  // unless the stream has ended already; the reader is woken once. finish and fail are its two ends alone.
  void append(StreamPart part);
  void finish(FinishReason reason);
  void fail(std::string message, bool rejected);
  bool cancelled() const { return cancelled_.load(); }

  // Reader side: blocks until a token or the end has come; returns them (finish/error set once ended).
  StreamPart next();
  // As next(), but nullopt when nothing has come within `wait` (so the reader can look at its client meanwhile).
  std::optional<StreamPart> next_within(std::chrono::milliseconds wait);
  void cancel() { cancelled_.store(true); }
  // The text reached one of the request's stop strings: the engine ends it with finish_reason `stop` and frees
  // its KV blocks before the next step, and samples nothing more for it.
  void stop() { stop_requested_.store(true); }
  bool stop_requested() const { return stop_requested_.load(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  StreamPart pending_;
  bool ended_ = false;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> stop_requested_{false};
};

}  // namespace meshtrain::serve

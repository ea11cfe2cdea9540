// StreamDelivery: hands what the engine thread has for its requests' streams (tokens, ends, errors) to the
// RequestStreams on a thread of its own, in the order it was posted. Each RequestStream::append wakes its reader,
// a futex call of some microseconds; at 64 running requests that is a few hundred microseconds a step, which the
// engine thread would otherwise spend before it can plan and launch the next step. Posting a step's updates costs
// one wake-up of this thread instead. EngineLoop sends every update of a stream it has taken through here, so a
// stream's tokens never overtake each other or its end.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "meshtrain/serve/engine/request_stream.h"

namespace meshtrain::serve {

class StreamDelivery {
 public:
  using Update = std::pair<std::shared_ptr<RequestStream>, StreamPart>;

  StreamDelivery();   // starts the thread
  ~StreamDelivery();  // close()
  StreamDelivery(const StreamDelivery&) = delete;
  StreamDelivery& operator=(const StreamDelivery&) = delete;

  // Queues `updates` behind every earlier post; each is appended to its stream (RequestStream::append) in order.
  // Posts come from one thread (the engine's).
  void post(std::vector<Update> updates);
  // Blocks until everything posted so far has been appended.
  void flush();
  // Appends what is queued, then joins the thread. Idempotent; post() after it appends on the caller's thread.
  void close();

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Update> queue_;
  bool delivering_ = false;  // the thread holds updates taken from queue_ and not yet appended
  bool closing_ = false;
  std::thread thread_;
};

}  // namespace meshtrain::serve

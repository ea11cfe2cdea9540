#include "meshtrain/serve/engine/request_stream.h"

namespace meshtrain::serve {

void RequestStream::append(StreamPart part) {
  {
    std::lock_guard lock(mu_);
    if (ended_) return;
    pending_.tokens.insert(pending_.tokens.end(), part.tokens.begin(), part.tokens.end());
    if (part.finish) {
      pending_.finish = part.finish;
      pending_.error = std::move(part.error);
      pending_.rejected = part.rejected;
      ended_ = true;
    }
  }
  // After the unlock: a woken reader does not wait for the mutex it was woken to take.
  cv_.notify_all();
}

void RequestStream::finish(FinishReason reason) { append({.finish = reason}); }

void RequestStream::fail(std::string message, bool rejected) {
  append({.finish = FinishReason::kAborted, .error = std::move(message), .rejected = rejected});
}

StreamPart RequestStream::next() {
  std::optional<StreamPart> part;
  while (!part) part = next_within(std::chrono::hours(1));
  return std::move(*part);
}

std::optional<StreamPart> RequestStream::next_within(std::chrono::milliseconds wait) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, wait, [&] { return !pending_.tokens.empty() || pending_.finish.has_value(); }))
    return std::nullopt;
  StreamPart out = std::move(pending_);
  pending_ = StreamPart{};
  if (out.finish) pending_.finish = out.finish, pending_.error = out.error, pending_.rejected = out.rejected;
  return out;
}

}  // namespace meshtrain::serve

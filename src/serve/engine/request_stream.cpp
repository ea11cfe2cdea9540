#include "meshtrain/serve/engine/request_stream.h"

namespace meshtrain::serve {

void RequestStream::push(TokenId token) {
  std::lock_guard lock(mu_);
  pending_.tokens.push_back(token);
  cv_.notify_all();
}

void RequestStream::finish(FinishReason reason) {
  std::lock_guard lock(mu_);
  if (ended_) return;
  pending_.finish = reason;
  ended_ = true;
  cv_.notify_all();
}

void RequestStream::fail(std::string message, bool rejected) {
  std::lock_guard lock(mu_);
  if (ended_) return;
  pending_.error = std::move(message);
  pending_.rejected = rejected;
  pending_.finish = FinishReason::kAborted;
  ended_ = true;
  cv_.notify_all();
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

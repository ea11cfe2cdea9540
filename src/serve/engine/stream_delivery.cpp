#include "meshtrain/serve/engine/stream_delivery.h"

namespace meshtrain::serve {

StreamDelivery::StreamDelivery() : thread_([this] { run(); }) {}

StreamDelivery::~StreamDelivery() { close(); }

void StreamDelivery::post(std::vector<Update> updates) {
  if (updates.empty()) return;
  std::unique_lock lock(mu_);
  if (!closing_) {
    if (queue_.empty()) {
      queue_ = std::move(updates);
    } else {
      queue_.insert(queue_.end(), std::make_move_iterator(updates.begin()), std::make_move_iterator(updates.end()));
    }
    cv_.notify_all();
    return;
  }
  // Closing: once the thread has appended what it holds, these go straight to their streams, still in order.
  cv_.wait(lock, [&] { return queue_.empty() && !delivering_; });
  lock.unlock();
  for (auto& [stream, part] : updates) stream->append(std::move(part));
}

void StreamDelivery::flush() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return queue_.empty() && !delivering_; });
}

void StreamDelivery::close() {
  {
    std::lock_guard lock(mu_);
    if (closing_) return;
    closing_ = true;
    cv_.notify_all();
  }
  thread_.join();
}

void StreamDelivery::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return !queue_.empty() || closing_; });
    if (queue_.empty()) break;  // closing, and nothing left
    std::vector<Update> batch;
    batch.swap(queue_);
    delivering_ = true;
    lock.unlock();
    for (auto& [stream, part] : batch) stream->append(std::move(part));
    batch.clear();  // the streams' last references may go here, outside the lock
    lock.lock();
    delivering_ = false;
    cv_.notify_all();  // flush()
  }
}

}  // namespace meshtrain::serve

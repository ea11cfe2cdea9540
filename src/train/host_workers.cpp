#include "meshtrain/train/host_workers.h"

#include <sched.h>

#include <algorithm>
#include <utility>

#include "meshtrain/core/error.h"

namespace meshtrain::train {

HostWorkers::HostWorkers(int threads) {
  MT_CHECK(threads >= 1, "HostWorkers: ", threads, " threads");
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { loop(); });
}

HostWorkers::~HostWorkers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_.notify_all();
  for (auto& t : threads_) t.join();
}

void HostWorkers::submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
  }
  work_.notify_one();
}

void HostWorkers::wait_idle() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [this] { return queue_.empty() && running_ == 0; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void HostWorkers::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    auto task = std::move(queue_.front());
    queue_.pop_front();
    ++running_;
    lock.unlock();
    try {
      task();
    } catch (...) {
      std::lock_guard<std::mutex> relock(mu_);
      if (!error_) error_ = std::current_exception();
    }
    lock.lock();
    --running_;
    if (queue_.empty() && running_ == 0) idle_.notify_all();
  }
}

int HostWorkers::available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return std::max(1u, std::thread::hardware_concurrency());
  return std::max(1, CPU_COUNT(&set));
}

}  // namespace meshtrain::train

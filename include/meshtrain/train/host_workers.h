// A small fixed pool of host threads that runs queued tasks in order of submission: the offloaded
// optimizer's update spans (train/offloaded_adamw.h). wait_idle() blocks until every task submitted so far
// has finished; the destructor finishes the queue and joins the threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace meshtrain::train {

class HostWorkers {
 public:
  // `threads` ≥ 1.
  explicit HostWorkers(int threads);
  ~HostWorkers();
  HostWorkers(const HostWorkers&) = delete;
  HostWorkers& operator=(const HostWorkers&) = delete;

  void submit(std::function<void()> task);
  // Blocks until the queue is empty and no task runs; rethrows the first exception a task threw.
  void wait_idle();
  int size() const { return static_cast<int>(threads_.size()); }

  // The CPUs this process may run on (its affinity mask, which meshrun narrows to the GPU's NUMA node).
  static int available_cpus();

 private:
  void loop();

  std::vector<std::thread> threads_;
  std::deque<std::function<void()>> queue_;
  std::mutex mu_;
  std::condition_variable work_, idle_;
  int running_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
};

}  // namespace meshtrain::train

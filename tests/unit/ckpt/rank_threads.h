// Ranks as threads for checkpoint unit tests: each thread gets a real CPU communicator (over a shared
// in-memory store), so what the ranks exchange travels the way it does between processes.
#pragma once

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "meshtrain/comm/cpu_communicator.h"

namespace meshtrain::ckpt_test {

// body(rank, comm) on `n` threads (comm null when n == 1); returns each rank's error ("" if none).
inline std::vector<std::string> run_ranks(int n, const std::function<void(int, comm::CommPtr)>& body) {
  static std::atomic<int> group{0};
  auto store = c10::make_intrusive<c10d::HashStore>();
  const std::string name = "ckpt" + std::to_string(group++);
  comm::CpuCommOptions opts;
  opts.timeout = std::chrono::seconds(30);
  opts.host = "127.0.0.1";
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r, n == 1 ? nullptr : comm::make_cpu_communicator(store, r, n, name, opts));
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace meshtrain::ckpt_test

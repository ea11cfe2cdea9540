// Ranks as threads for unit tests: each thread gets a real CPU communicator (over one shared in-memory store),
// so what the ranks exchange travels the sockets it does between processes.
#pragma once

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "meshtrain/comm/cpu_communicator.h"

namespace meshtrain::testing_support {

// body(rank, comm) on `n` threads, the communicators of group `group` built with `opts` (on loopback);
// returns each rank's error message ("" where the body returned).
inline std::vector<std::string> run_rank_threads(int n, const std::string& group, comm::CpuCommOptions opts,
                                                 const std::function<void(int, comm::CommPtr)>& body) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  opts.host = "127.0.0.1";
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r, comm::make_cpu_communicator(store, r, n, group, opts));
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace meshtrain::testing_support

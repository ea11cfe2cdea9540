// Ranks as threads for checkpoint unit tests (tests/support/rank_threads.h), each test in a group of its own.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "support/rank_threads.h"

namespace meshtrain::ckpt_test {

// body(rank, comm) on `n` threads (comm null when n == 1); returns each rank's error ("" if none).
inline std::vector<std::string> run_ranks(int n, const std::function<void(int, comm::CommPtr)>& body) {
  static std::atomic<int> group{0};
  comm::CpuCommOptions opts;
  opts.timeout = std::chrono::seconds(30);
  return testing_support::run_rank_threads(n, "ckpt" + std::to_string(group++), opts,
                                           [&](int r, comm::CommPtr c) { body(r, n == 1 ? nullptr : c); });
}

}  // namespace meshtrain::ckpt_test

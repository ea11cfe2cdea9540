// Clock: the one monotonic clock meshtrain times its work with (step times, checkpoint phases, benchmarks),
// and the elapsed-seconds helper every timer uses.
#pragma once

#include <chrono>

namespace meshtrain {

using Clock = std::chrono::steady_clock;

// Seconds from `t0` to now.
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace meshtrain

#include "meshtrain/serve/engine/token_rate.h"

namespace meshtrain::serve {

void TokenRate::add(Clock::time_point t, int64_t tokens) {
  steps_.emplace_back(t, tokens);
  while (!steps_.empty() && steps_.front().first <= t - window_) steps_.pop_front();
}

double TokenRate::per_second(Clock::time_point now) const {
  int64_t tokens = 0;
  for (const auto& [t, n] : steps_)
    if (t > now - window_ && t <= now) tokens += n;
  return static_cast<double>(tokens) / std::chrono::duration<double>(window_).count();
}

}  // namespace meshtrain::serve

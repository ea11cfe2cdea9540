#include "meshtrain/ckpt/crash_point.h"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace meshtrain::ckpt {

void crash_point(const char* stage, int rank, int64_t step) {
  const char* env = std::getenv("MESHTRAIN_CKPT_CRASH_AT");
  if (!env || !*env) return;
  const std::string spec = env;
  const auto c1 = spec.find(':');
  if (spec.substr(0, c1) != stage) return;
  if (c1 != std::string::npos) {
    const auto c2 = spec.find(':', c1 + 1);
    const std::string r = spec.substr(c1 + 1, c2 == std::string::npos ? std::string::npos : c2 - c1 - 1);
    if (!r.empty() && std::stoi(r) != rank) return;
    if (c2 != std::string::npos && std::stoll(spec.substr(c2 + 1)) != step) return;
  }
  std::fprintf(stderr, "MESHTRAIN_CKPT_CRASH_AT: rank %d killing itself at stage '%s' of step %lld\n", rank, stage,
               static_cast<long long>(step));
  std::fflush(stderr);
  std::raise(SIGKILL);
}

}  // namespace meshtrain::ckpt

#include "meshtrain/comm/attempt_key.h"

#include <atomic>

#include "meshtrain/comm/world_info.h"
#include "meshtrain/core/error.h"

namespace meshtrain::comm {
namespace {

std::atomic<int> g_generation{0};

}  // namespace

std::string attempt_key() {
  const auto attempt = env_int(process_env(), "TORCHELASTIC_RESTART_COUNT").value_or(0);
  const int g = g_generation.load();
  return g == 0 ? cat("attempt", attempt) : cat("attempt", attempt, ".", g);
}

void set_generation(int generation) { g_generation.store(generation); }

int generation() { return g_generation.load(); }

}  // namespace meshtrain::comm

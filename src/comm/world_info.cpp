// WorldInfo from the torchrun environment contract; see world_info.h.
#include "meshtrain/comm/world_info.h"

#include <cstdlib>
#include <limits>

#include "meshtrain/core/error.h"

namespace meshtrain::comm {

EnvLookup process_env() {
  return [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
  };
}

std::optional<long long> env_int(const EnvLookup& env, const char* name) {
  auto s = env(name);
  if (!s) return std::nullopt;
  const std::string& v = *s;
  size_t pos = 0;
  long long out = 0;
  bool ok = !v.empty();
  try {
    out = std::stoll(v, &pos, 10);
  } catch (const std::exception&) {
    ok = false;
  }
  MT_USER_CHECK(ok && pos == v.size(), "environment variable ", name, "='", v, "' is not an integer");
  return out;
}

namespace {

int env_int_in_range(const EnvLookup& env, const char* name, long long lo, long long hi, long long dflt) {
  auto v = env_int(env, name);
  if (!v) return static_cast<int>(dflt);
  MT_USER_CHECK(*v >= lo && *v <= hi, "environment variable ", name, "=", *v, " is out of range [", lo, ", ",
                hi, "]");
  return static_cast<int>(*v);
}

}  // namespace

WorldInfo world_info_from_env(const EnvLookup& env) {
  constexpr long long kMax = std::numeric_limits<int>::max();
  const bool has_rank = env("RANK").has_value();
  const bool has_ws = env("WORLD_SIZE").has_value();
  MT_USER_CHECK(has_rank == has_ws, "environment variable ", has_rank ? "RANK" : "WORLD_SIZE",
                " is set but ", has_rank ? "WORLD_SIZE" : "RANK",
                " is not; set both (meshrun and torchrun do), or neither for a single process");
  WorldInfo w;
  if (!has_rank) {
    MT_USER_CHECK(!env("LOCAL_RANK").has_value(),
                  "environment variable LOCAL_RANK is set but RANK and WORLD_SIZE are not");
    return w;
  }
  w.world_size = env_int_in_range(env, "WORLD_SIZE", 1, kMax, 1);
  w.rank = env_int_in_range(env, "RANK", 0, kMax, 0);
  MT_USER_CHECK(w.rank < w.world_size, "RANK=", w.rank, " must be < WORLD_SIZE=", w.world_size);
  w.local_world_size = env_int_in_range(env, "LOCAL_WORLD_SIZE", 1, w.world_size, w.world_size);
  // By hand on one node LOCAL_* may be left out: the node is the whole job.
  const int local_default = env("LOCAL_WORLD_SIZE") ? w.rank % w.local_world_size : w.rank;
  w.local_rank = env_int_in_range(env, "LOCAL_RANK", 0, kMax, local_default);
  MT_USER_CHECK(w.local_rank < w.local_world_size, "LOCAL_RANK=", w.local_rank, " must be < LOCAL_WORLD_SIZE=",
                w.local_world_size);
  return w;
}

}  // namespace meshtrain::comm

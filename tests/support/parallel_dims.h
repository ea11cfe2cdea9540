// parallel_dims(): the parallel section with the four mesh sizes and the rank order set, for the tests of the
// mesh's arithmetic (core/mesh_shape.h) and of the communicators built on it (comm/mesh.h). Header-only;
// tests/ is on every test binary's include path.
#pragma once

#include <cstdint>
#include <string>

#include "meshtrain/core/config.h"

namespace meshtrain::testing_support {

inline ParallelConfig parallel_dims(int64_t pp, int64_t dp, int64_t fsdp, int64_t tp,
                                    std::string order = "pp-dp-fsdp-tp") {
  ParallelConfig p;
  p.pp = pp;
  p.dp = dp;
  p.fsdp = fsdp;
  p.tp = tp;
  p.order = std::move(order);
  return p;
}

}  // namespace meshtrain::testing_support

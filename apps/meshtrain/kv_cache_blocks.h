// How many KV cache blocks a serving command holds (docs/serving.md "KV cache size"): `meshtrain serve` and
// `meshtrain generate --input` size their cache the same way, from the serve.* keys.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "meshtrain/core/config.h"
#include "meshtrain/serve/engine/serving_ranks.h"
#include "meshtrain/serve/scheduler.h"

namespace meshtrain::cli {

// The blocks known before the model loads: serve.blocks, or on the CPU its default there (256); 0 where the
// number waits for the weights (CUDA, serve.blocks 0: sized from serve.gpu_memory_fraction).
int64_t kv_blocks_before_loading(const ServeConfig& c, const c10::TensorOptions& placement);

// The KV cache's blocks once the weights are on the device: on CUDA what kv_cache_size_on_device says
// (serve.blocks if it fits, else what serve.gpu_memory_fraction leaves), on the CPU kv_blocks_before_loading. Under
// tensor parallelism a block holds the rank's share of the heads, and every rank takes the fewest any rank can hold
// (every rank calls it). Rank 0 writes one line to `report`, "`who`: KV cache: N blocks of … from SOURCE", and
// `source` (optional) gets SOURCE.
int kv_cache_blocks(const ServeConfig& c, const ModelConfig& m, const serve::ServingRanks& ranks,
                    const serve::SchedulerOptions& s, const char* who, std::ostream& report,
                    std::string* source = nullptr);

}  // namespace meshtrain::cli

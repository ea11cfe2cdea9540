#include "kv_cache_blocks.h"

#include <optional>

#include "meshtrain/core/error.h"
#include "meshtrain/serve/engine/paged_kv_cache.h"

namespace meshtrain::cli {
namespace {

constexpr int64_t kCpuBlocks = 256;  // serve.blocks 0 on the CPU, whose memory is not the device's to size from

}  // namespace

int64_t kv_blocks_before_loading(const ServeConfig& c, const c10::TensorOptions& placement) {
  if (c.blocks > 0) return c.blocks;
  return placement.device().is_cuda() ? 0 : kCpuBlocks;
}

int kv_cache_blocks(const ServeConfig& c, const ModelConfig& m, const serve::ServingRanks& ranks,
                    const serve::SchedulerOptions& s, const char* who, std::ostream& report, std::string* source) {
  const c10::TensorOptions& placement = ranks.placement;
  const auto dtype_bytes = static_cast<int64_t>(placement.dtype().itemsize());
  const int64_t block_bytes = serve::kv_block_bytes(m, s.block_size, dtype_bytes, ranks.tp());
  serve::KvCacheSize size{kv_blocks_before_loading(c, placement),
                          c.blocks > 0 ? "serve.blocks" : cat("serve.blocks' default on the CPU (", kCpuBlocks, ")")};
  if (placement.device().is_cuda())
    size = serve::kv_cache_size_on_device(
        serve::device_free_bytes(placement.device()), c.gpu_memory_fraction,
        serve::step_workspace_bytes(m, s.max_tokens_per_step, s.max_running, dtype_bytes, ranks.tp()), block_bytes,
        c.blocks > 0 ? std::optional<int64_t>(c.blocks) : std::nullopt);
  const int64_t agreed = ranks.min_over_ranks(size.num_blocks);
  if (agreed < size.num_blocks) size.source += cat(" (", size.num_blocks, " here; the fewest of the ", ranks.tp(),
                                                   " tensor-parallel ranks)");
  size.num_blocks = agreed;
  if (source) *source = size.source;
  if (!ranks.leader()) return static_cast<int>(size.num_blocks);
  report << who << ": KV cache: " << size.num_blocks << " blocks of " << s.block_size << " tokens ("
         << size.num_blocks * s.block_size << " tokens), " << serve::memory_text(size.num_blocks * block_bytes)
         << (ranks.tp() > 1 ? cat(" per rank (", ranks.tp(), " tensor-parallel ranks)") : std::string()) << ", from "
         << size.source << std::endl;
  return static_cast<int>(size.num_blocks);
}

}  // namespace meshtrain::cli

// PagedKvCache: the KV cache tensors the block pool's BlockIds index (docs/serving.md "Engine"): per layer, keys
// and values [num_blocks, block_size, H_kv, head_dim] in the dtype and on the device of the model's weights.
// The scheduler's BlockPool decides which blocks a sequence holds; this holds what is in them. Below it, how
// many blocks fit in the memory the weights leave free (pure arithmetic, unit-tested on the CPU).
//
// One block more than the pool's: block num_blocks() (scratch_block()) is never handed out by the scheduler,
// whose BlockIds run [0, num_blocks()). A captured decode step's padding rows write their keys and values there
// (serve/engine/decode_graphs.h), so padding never touches a sequence's cache.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "meshtrain/core/config.h"
#include "meshtrain/model/paged_batch.h"
#include "meshtrain/model/transformer.h"

namespace meshtrain::serve {

class PagedKvCache {
 public:
  // `num_blocks` as the scheduler's (SchedulerOptions::num_blocks); the tensors hold num_blocks + 1.
  PagedKvCache(const model::TransformerImpl& model, int32_t num_blocks, int32_t block_size);

  std::vector<model::PagedLayerCache>& layers() { return layers_; }
  // The blocks the scheduler hands out, the scratch block not counted.
  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }
  // The block no sequence holds: padding's.
  int32_t scratch_block() const { return num_blocks_; }
  // Bytes of all layers' keys and values, the scratch block's included.
  int64_t bytes() const;

 private:
  int32_t num_blocks_, block_size_;
  std::vector<model::PagedLayerCache> layers_;
};

// One block's keys and values over every layer: 2 · layers · H_kv · head_dim · block_size · dtype bytes; with
// tensor parallelism over `tp` ranks, one rank's share (H_kv / tp heads).
int64_t kv_block_bytes(const ModelConfig& m, int64_t block_size, int64_t dtype_bytes, int64_t tp = 1);

// The transient memory of the largest step beside the cache (an upper estimate for the ATen reference path):
// the activations of `max_step_tokens` tokens through one layer, the largest chunk's attention over a context of
// model.max_seq_len (its keys and values gathered for every query head, and fp32 scores), and the logits of
// `max_running` sampling rows with the sampler's fp32 copies. With tensor parallelism over `tp` ranks, one rank's:
// its heads and its share of the MLP (the residual stream and the gathered logits are whole on every rank).
int64_t step_workspace_bytes(const ModelConfig& m, int64_t max_step_tokens, int64_t max_running,
                             int64_t dtype_bytes, int64_t tp = 1);

// floor((free_bytes × fraction − workspace_bytes) / block_bytes), at least 0.
int64_t kv_blocks_for_memory(int64_t free_bytes, double fraction, int64_t workspace_bytes, int64_t block_bytes);

// How many blocks `meshtrain serve` takes on a device with `free_bytes` free after the weights, and where the
// number came from (one line's end: "--blocks", or the fraction of the free memory less the workspace).
struct KvCacheSize {
  int64_t num_blocks = 0;
  std::string source;
};
// `given` (serve.blocks) when set, UserError when it does not fit in all of free_bytes less the workspace; otherwise
// kv_blocks_for_memory (at most 2^30), UserError when not one block fits.
KvCacheSize kv_cache_size_on_device(int64_t free_bytes, double fraction, int64_t workspace_bytes, int64_t block_bytes,
                                    std::optional<int64_t> given);

// "1.50 GiB", or "12.00 MiB" under a GiB
std::string memory_text(int64_t bytes);

// The device's free memory now, the caching allocator's unused blocks given back first (CUDA devices only).
int64_t device_free_bytes(const c10::Device& device);

}  // namespace meshtrain::serve

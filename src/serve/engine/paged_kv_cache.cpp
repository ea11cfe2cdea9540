#include "meshtrain/serve/engine/paged_kv_cache.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "meshtrain/core/error.h"
#include "meshtrain/model/paged_forward.h"

#ifdef MESHTRAIN_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>

#include "meshtrain/core/cuda_check.h"
#endif

namespace meshtrain::serve {

PagedKvCache::PagedKvCache(const model::TransformerImpl& model, int32_t num_blocks, int32_t block_size)
    : num_blocks_(num_blocks), block_size_(block_size) {
  MT_CHECK(num_blocks > 0 && block_size > 0, "PagedKvCache: ", num_blocks, " blocks of ", block_size, " tokens");
  layers_ = model::make_paged_cache(model, static_cast<int64_t>(num_blocks) + 1, block_size);  // + the scratch block
}

int64_t PagedKvCache::bytes() const {
  int64_t n = 0;
  for (const auto& l : layers_) n += l.k.nbytes() + l.v.nbytes();
  return n;
}

int64_t kv_block_bytes(const ModelConfig& m, int64_t block_size, int64_t dtype_bytes, int64_t tp) {
  const int64_t head_dim = m.d_model / m.n_head;
  const int64_t kv_heads = (m.n_kv_head > 0 ? m.n_kv_head : m.n_head) / tp;
  return 2 * m.n_layer * kv_heads * head_dim * block_size * dtype_bytes;
}

int64_t step_workspace_bytes(const ModelConfig& m, int64_t max_step_tokens, int64_t max_running,
                             int64_t dtype_bytes, int64_t tp) {
  constexpr int64_t kFp32 = 4;
  const int64_t hd = m.d_model / m.n_head;
  const int64_t n_head = m.n_head / tp;  // this rank's query heads, key/value heads and MLP width
  const int64_t kv_heads = (m.n_kv_head > 0 ? m.n_kv_head : m.n_head) / tp;
  const int64_t d_ff = (m.d_ff > 0 ? m.d_ff : 4 * m.d_model) / tp;
  const int64_t tokens = max_step_tokens, context = m.max_seq_len;
  // One layer at a time: the residual stream, its norm, q/k/v, the attention output, and the MLP's up, gate
  // and activation (the next layer reuses what this one freed).
  const int64_t layer = tokens * (4 * m.d_model + 3 * d_ff + (n_head + 2 * kv_heads) * hd) * dtype_bytes;
  // The largest chunk: a context's keys and values gathered and repeated for every query head, and the
  // attention scores of the chunk's queries over it in fp32 (SDPA's math path on the CPU).
  const int64_t chunk = std::min(tokens, context);
  const int64_t attention = 2 * context * n_head * hd * dtype_bytes + n_head * chunk * context * kFp32;
  // The sampling rows' logits: the head's output, then the sampler's fp32 logits, sorted copy, probabilities
  // and cumulative sum.
  const int64_t logits = max_running * m.vocab_size * (dtype_bytes + 4 * kFp32);
  return layer + attention + logits;
}

int64_t kv_blocks_for_memory(int64_t free_bytes, double fraction, int64_t workspace_bytes, int64_t block_bytes) {
  MT_CHECK(block_bytes > 0 && fraction > 0 && fraction <= 1, "kv_blocks_for_memory: block of ", block_bytes,
           " bytes, fraction ", fraction);
  const double usable = std::floor(static_cast<double>(free_bytes) * fraction) - static_cast<double>(workspace_bytes);
  return usable <= 0 ? 0 : static_cast<int64_t>(usable) / block_bytes;
}

KvCacheSize kv_cache_size_on_device(int64_t free_bytes, double fraction, int64_t workspace_bytes, int64_t block_bytes,
                                    std::optional<int64_t> given) {
  const std::string room = cat(memory_text(free_bytes), " free after the weights, less ", memory_text(workspace_bytes),
                               " of step workspace");
  if (given) {
    const int64_t fit = kv_blocks_for_memory(free_bytes, 1.0, workspace_bytes, block_bytes);
    MT_USER_CHECK(*given <= fit, "serve.blocks ", *given, ": ", *given, " blocks of ", block_bytes, " bytes take ",
                  memory_text(*given * block_bytes), " but the device has ", room, ": at most ", fit, " blocks fit");
    return {*given, "serve.blocks"};
  }
  const int64_t blocks = std::min(kv_blocks_for_memory(free_bytes, fraction, workspace_bytes, block_bytes),
                                  int64_t{1} << 30);
  MT_USER_CHECK(blocks >= 1, "serve.gpu_memory_fraction ", fraction, ": not one KV block of ", block_bytes,
                " bytes fits (", room, "); raise the fraction or lower serve.max_step_tokens / serve.max_running");
  return {blocks, cat("serve.gpu_memory_fraction ", fraction, " of ", room)};
}

std::string memory_text(int64_t bytes) {
  const bool gib = bytes >= (int64_t{1} << 30);
  std::ostringstream o;
  o << std::fixed << std::setprecision(2) << static_cast<double>(bytes) / (int64_t{1} << (gib ? 30 : 20))
    << (gib ? " GiB" : " MiB");
  return o.str();
}

int64_t device_free_bytes(const c10::Device& device) {
#ifdef MESHTRAIN_WITH_CUDA
  if (device.is_cuda()) {
    const c10::cuda::CUDAGuard guard(device);
    c10::cuda::CUDACachingAllocator::emptyCache();  // memory the allocator holds but nothing uses is free too
    size_t free = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return static_cast<int64_t>(free);
  }
#endif
  MT_CHECK(false, "device_free_bytes: ", device.str(), " is not a CUDA device");
  return 0;
}

}  // namespace meshtrain::serve

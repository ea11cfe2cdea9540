#include "meshtrain/serve/kv_cache_manager.h"

#include "meshtrain/core/error.h"

namespace meshtrain::serve {

KvCacheManager::KvCacheManager(int32_t num_blocks, int32_t block_size, bool prefix_caching)
    : pool_(num_blocks, block_size), prefix_caching_(prefix_caching) {}

PrefixMatch KvCacheManager::match(std::span<const TokenId> tokens) const {
  PrefixMatch m;
  if (!prefix_caching_ || tokens.empty()) return m;
  const size_t bs = static_cast<size_t>(block_size());
  const size_t limit = tokens.size() - 1;  // whole blocks before the last token, which is always computed
  PrefixId parent = kRootPrefix;
  for (size_t begin = 0; begin + bs <= limit; begin += bs) {
    auto hit = pool_.lookup(parent, tokens.subspan(begin, bs));
    if (!hit) break;
    m.hits.push_back(*hit);
    if (pool_.ref_count(hit->block) == 0) ++m.num_free_hits;
    parent = hit->id;
  }
  return m;
}

bool KvCacheManager::admit(BlockTable& table, const PrefixMatch& match, int32_t n) {
  MT_CHECK(table.blocks().empty(), "admit: the sequence holds ", table.blocks().size(), " blocks already");
  const int32_t new_blocks = (n + block_size() - 1) / block_size();
  if (match.num_free_hits + new_blocks > pool_.num_free()) return false;
  // Hits first: a free hit is still on the free list, where allocating the new blocks could evict it.
  for (const BlockPool::Hit& hit : match.hits) {
    pool_.retain(hit.block);
    table.add_block(hit.block);
    table.append_tokens(block_size());
    table.add_prefix_id(hit.id);
  }
  const bool grown = grow(table, n);
  MT_CHECK(grown, "admit: ", new_blocks, " blocks were free but could not be taken");
  return true;
}

bool KvCacheManager::grow(BlockTable& table, int32_t n) {
  const int32_t needed = table.blocks_needed(n);
  if (needed > pool_.num_free()) return false;
  for (int32_t i = 0; i < needed; ++i) table.add_block(pool_.allocate());
  table.append_tokens(n);
  return true;
}

int32_t KvCacheManager::room(const BlockTable& table) const {
  return table.capacity() - table.num_tokens() + pool_.num_free() * block_size();
}

void KvCacheManager::publish(BlockTable& table, std::span<const TokenId> tokens, int32_t num_computed) {
  if (!prefix_caching_) return;
  MT_CHECK(num_computed <= table.num_tokens() && static_cast<size_t>(num_computed) <= tokens.size(),
           "publish: ", num_computed, " computed tokens of ", tokens.size(), ", ", table.num_tokens(), " slots");
  const size_t bs = static_cast<size_t>(block_size());
  for (size_t k = table.prefix_ids().size(); (k + 1) * bs <= static_cast<size_t>(num_computed); ++k) {
    const PrefixId id = pool_.publish(table.blocks()[k], table.last_prefix_id(), tokens.subspan(k * bs, bs));
    table.add_prefix_id(id);
  }
}

void KvCacheManager::free(BlockTable& table) {
  std::vector<BlockId> blocks = table.clear();
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) pool_.release(*it);
}

}  // namespace meshtrain::serve

// KvCacheManager: the block pool seen from sequences (docs/serving.md "KV blocks"). It finds a new sequence's
// longest published prefix, gives a sequence's table the blocks its next tokens need (all or nothing), publishes
// blocks as their tokens become computed, and returns a sequence's blocks to the pool. The scheduler decides who
// runs; this decides which blocks they hold.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "meshtrain/serve/block_pool.h"
#include "meshtrain/serve/block_table.h"

namespace meshtrain::serve {

// The published blocks a sequence's tokens begin with.
struct PrefixMatch {
  std::vector<BlockPool::Hit> hits;
  int32_t num_free_hits = 0;  // hits whose block is free now: taking them uses up free blocks
};

class KvCacheManager {
 public:
  // prefix_caching off: nothing is published or matched, every sequence computes all its tokens.
  KvCacheManager(int32_t num_blocks, int32_t block_size, bool prefix_caching);

  const BlockPool& pool() const { return pool_; }
  int32_t block_size() const { return pool_.block_size(); }

  // The longest run of published blocks at the start of `tokens`, stopping short of the last token: it is
  // computed again, since its logits sample the next token.
  PrefixMatch match(std::span<const TokenId> tokens) const;
  // Puts `match`'s blocks into the empty `table` and room for `n` more tokens after them; false, with nothing
  // taken, when the free blocks do not cover both.
  bool admit(BlockTable& table, const PrefixMatch& match, int32_t n);
  // Room for `n` more tokens in `table`; false, with nothing taken, when the free blocks do not cover them.
  bool grow(BlockTable& table, int32_t n);
  // The most tokens grow() can take now.
  int32_t room(const BlockTable& table) const;
  // Publishes the full blocks among the first `num_computed` of `tokens` (the table's sequence) not yet published.
  void publish(BlockTable& table, std::span<const TokenId> tokens, int32_t num_computed);
  // Returns every block of `table` to the pool, last block first: a sequence's tail is the least likely part to
  // be shared, so it is evicted before its head.
  void free(BlockTable& table);

 private:
  BlockPool pool_;
  bool prefix_caching_;
};

}  // namespace meshtrain::serve

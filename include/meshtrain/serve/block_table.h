// BlockTable: one sequence's logical → physical KV blocks (docs/serving.md "KV blocks"). Token position p of
// the sequence lives in block blocks()[p / block_size] at offset p % block_size; the decode kernel reads the
// table to find a sequence's keys and values. The table also remembers the PrefixIds of its leading blocks
// that are published (or were found published), the chain its next full block is published under.
#pragma once

#include <cstdint>
#include <vector>

#include "meshtrain/serve/block_pool.h"

namespace meshtrain::serve {

class BlockTable {
 public:
  explicit BlockTable(int32_t block_size);

  int32_t block_size() const { return block_size_; }
  const std::vector<BlockId>& blocks() const { return blocks_; }
  // Token slots taken: the tokens computed or scheduled to be computed.
  int32_t num_tokens() const { return num_tokens_; }
  int32_t capacity() const { return static_cast<int32_t>(blocks_.size()) * block_size_; }
  // Blocks to add before `new_tokens` more tokens fit.
  int32_t blocks_needed(int32_t new_tokens) const;

  void add_block(BlockId b);
  // Takes `n` more token slots; they must fit (add the blocks_needed(n) blocks first).
  void append_tokens(int32_t n);
  // The physical slot of token position `pos` (block × block_size + offset): the cache row it is written to.
  int64_t slot(int32_t pos) const;

  // PrefixIds of blocks()[0 .. prefix_ids().size()), each published with the previous one as its parent.
  const std::vector<PrefixId>& prefix_ids() const { return prefix_ids_; }
  PrefixId last_prefix_id() const { return prefix_ids_.empty() ? kRootPrefix : prefix_ids_.back(); }
  void add_prefix_id(PrefixId id);

  // Empties the table and returns its blocks for the caller to release.
  std::vector<BlockId> clear();

 private:
  int32_t block_size_;
  int32_t num_tokens_ = 0;
  std::vector<BlockId> blocks_;
  std::vector<PrefixId> prefix_ids_;
};

}  // namespace meshtrain::serve

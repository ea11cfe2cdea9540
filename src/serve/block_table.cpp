#include "meshtrain/serve/block_table.h"

#include <algorithm>
#include <utility>

#include "meshtrain/core/error.h"

namespace meshtrain::serve {

BlockTable::BlockTable(int32_t block_size) : block_size_(block_size) {
  MT_CHECK(block_size > 0, "block table: block_size ", block_size);
}

int32_t BlockTable::blocks_needed(int32_t new_tokens) const {
  MT_CHECK(new_tokens >= 0, "blocks_needed: ", new_tokens, " tokens");
  const int32_t total = num_tokens_ + new_tokens;
  const int32_t blocks = (total + block_size_ - 1) / block_size_;
  return std::max(0, blocks - static_cast<int32_t>(blocks_.size()));
}

void BlockTable::add_block(BlockId b) { blocks_.push_back(b); }

void BlockTable::append_tokens(int32_t n) {
  MT_CHECK(n >= 0 && num_tokens_ + n <= capacity(), "append_tokens: ", num_tokens_, " + ", n,
           " tokens do not fit in ", blocks_.size(), " blocks of ", block_size_);
  num_tokens_ += n;
}

int64_t BlockTable::slot(int32_t pos) const {
  MT_CHECK(pos >= 0 && pos < num_tokens_, "slot: position ", pos, " of ", num_tokens_, " tokens");
  return static_cast<int64_t>(blocks_[static_cast<size_t>(pos / block_size_)]) * block_size_ + pos % block_size_;
}

void BlockTable::add_prefix_id(PrefixId id) {
  MT_CHECK(prefix_ids_.size() < blocks_.size() &&
               static_cast<int32_t>(prefix_ids_.size() + 1) * block_size_ <= num_tokens_,
           "add_prefix_id: block ", prefix_ids_.size(), " is not a full block of this table");
  prefix_ids_.push_back(id);
}

std::vector<BlockId> BlockTable::clear() {
  num_tokens_ = 0;
  prefix_ids_.clear();
  return std::exchange(blocks_, {});
}

}  // namespace meshtrain::serve

#include "meshtrain/serve/block_pool.h"

#include <algorithm>

#include "meshtrain/core/error.h"
#include "meshtrain/serve/splitmix64.h"

namespace meshtrain::serve {
namespace {

uint64_t hash_prefix_key(PrefixId parent, std::span<const TokenId> tokens) {
  uint64_t h = splitmix64(parent);
  for (TokenId t : tokens) h = splitmix64(h ^ static_cast<uint64_t>(t));
  return h;
}

}  // namespace

BlockPool::BlockPool(int32_t num_blocks, int32_t block_size) : block_size_(block_size) {
  MT_USER_CHECK(num_blocks > 0, "serve: the KV cache needs at least one block, got num_blocks ", num_blocks);
  MT_USER_CHECK(block_size > 0, "serve: block_size is the tokens per KV block, a positive number, got ",
                block_size);
  blocks_.resize(static_cast<size_t>(num_blocks));
  for (BlockId b = 0; b < num_blocks; ++b) link_back(b);
}

void BlockPool::check_id(BlockId b) const {
  MT_CHECK(b >= 0 && b < num_blocks(), "block ", b, " is not in the pool of ", num_blocks());
}

int32_t BlockPool::ref_count(BlockId b) const {
  check_id(b);
  return blocks_[static_cast<size_t>(b)].refs;
}

bool BlockPool::is_published(BlockId b) const {
  check_id(b);
  return blocks_[static_cast<size_t>(b)].id != 0;
}

BlockId BlockPool::allocate() {
  MT_CHECK(head_ >= 0, "allocate: all ", num_blocks(), " KV blocks are in use");
  const BlockId b = head_;
  unlink(b);
  if (blocks_[static_cast<size_t>(b)].id != 0) unpublish(b);  // eviction: its prefix is forgotten
  blocks_[static_cast<size_t>(b)].refs = 1;
  return b;
}

void BlockPool::retain(BlockId b) {
  check_id(b);
  Block& blk = blocks_[static_cast<size_t>(b)];
  if (blk.refs == 0) {
    MT_CHECK(blk.id != 0, "retain: block ", b, " is free and unpublished: its contents are stale");
    unlink(b);
  }
  ++blk.refs;
}

void BlockPool::release(BlockId b) {
  check_id(b);
  Block& blk = blocks_[static_cast<size_t>(b)];
  MT_CHECK(blk.refs > 0, "release: block ", b, " is already free (a double free)");
  if (--blk.refs > 0) return;
  // A published block is worth keeping: last in line for eviction. An unpublished one is handed out first.
  if (blk.id != 0) {
    link_back(b);
  } else {
    link_front(b);
  }
}

PrefixId BlockPool::publish(BlockId b, PrefixId parent, std::span<const TokenId> tokens) {
  check_id(b);
  Block& blk = blocks_[static_cast<size_t>(b)];
  MT_CHECK(blk.refs > 0, "publish: block ", b, " is free");
  MT_CHECK(static_cast<int32_t>(tokens.size()) == block_size_, "publish: block ", b, " holds ", tokens.size(),
           " tokens, only full blocks of ", block_size_, " are shared");
  if (blk.id != 0) {
    MT_CHECK(blk.parent == parent && std::equal(tokens.begin(), tokens.end(), blk.tokens.begin()),
             "publish: block ", b, " is published with other contents");
    return blk.id;
  }
  if (auto hit = lookup(parent, tokens)) return hit->id;
  blk.id = next_id_++;
  blk.parent = parent;
  blk.key_hash = hash_prefix_key(parent, tokens);
  blk.tokens.assign(tokens.begin(), tokens.end());
  published_.emplace(blk.key_hash, b);
  return blk.id;
}

std::optional<BlockPool::Hit> BlockPool::lookup(PrefixId parent, std::span<const TokenId> tokens) const {
  if (static_cast<int32_t>(tokens.size()) != block_size_) return std::nullopt;
  auto [first, last] = published_.equal_range(hash_prefix_key(parent, tokens));
  for (auto it = first; it != last; ++it) {
    const Block& blk = blocks_[static_cast<size_t>(it->second)];
    if (blk.parent == parent && std::equal(tokens.begin(), tokens.end(), blk.tokens.begin())) {
      return Hit{it->second, blk.id};
    }
  }
  return std::nullopt;
}

void BlockPool::unpublish(BlockId b) {
  Block& blk = blocks_[static_cast<size_t>(b)];
  auto [first, last] = published_.equal_range(blk.key_hash);
  auto it = std::find_if(first, last, [b](const auto& entry) { return entry.second == b; });
  MT_CHECK(it != last, "block ", b, " is published but missing from the index");
  published_.erase(it);
  blk.id = 0;
  blk.parent = 0;
  blk.key_hash = 0;
  blk.tokens.clear();
}

void BlockPool::link_front(BlockId b) {
  Block& blk = blocks_[static_cast<size_t>(b)];
  blk.prev = -1;
  blk.next = head_;
  if (head_ >= 0) blocks_[static_cast<size_t>(head_)].prev = b;
  head_ = b;
  if (tail_ < 0) tail_ = b;
  ++num_free_;
}

void BlockPool::link_back(BlockId b) {
  Block& blk = blocks_[static_cast<size_t>(b)];
  blk.next = -1;
  blk.prev = tail_;
  if (tail_ >= 0) blocks_[static_cast<size_t>(tail_)].next = b;
  tail_ = b;
  if (head_ < 0) head_ = b;
  ++num_free_;
}

void BlockPool::unlink(BlockId b) {
  Block& blk = blocks_[static_cast<size_t>(b)];
  if (blk.prev >= 0) {
    blocks_[static_cast<size_t>(blk.prev)].next = blk.next;
  } else {
    head_ = blk.next;
  }
  if (blk.next >= 0) {
    blocks_[static_cast<size_t>(blk.next)].prev = blk.prev;
  } else {
    tail_ = blk.prev;
  }
  blk.prev = blk.next = -1;
  --num_free_;
}

}  // namespace meshtrain::serve

// BlockPool: the serving KV cache's fixed set of blocks (docs/serving.md "KV blocks"). A block holds the keys
// and values of `block_size` consecutive tokens of one sequence in every layer; the pool only does the
// bookkeeping — which blocks are in use, by how many sequences, and which full blocks hold a known prefix — so
// it is host code without a tensor in sight, and the engine's cache tensor is indexed by BlockId.
//
// Reference counts: allocate() hands out a block with count 1, retain() adds a sharer, release() drops one;
// at 0 the block is free again. Allocate, retain and release are O(1) (an intrusive free list).
//
// Prefix sharing (vLLM's automatic prefix caching): once every token of a full block has been computed, the
// block can be published under its key (parent's PrefixId, its token ids). The key is hashed for the index
// and compared in full on lookup, and the parent's PrefixId is unique to one published block, so a lookup
// never hands out another prefix's keys and values, whatever the hash does. A sequence whose tokens begin with
// published blocks retains them instead of computing them again. Only full blocks whose tokens are all
// computed are published, and a sequence writes only past its computed tokens, so a shared block is never
// written again: no copy-on-write is needed.
//
// Eviction: a published block whose count drops to 0 stays published (and can be retained again) until
// allocate() needs it. Free blocks are handed out unpublished ones first, then published ones least recently
// freed first (LRU).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace meshtrain::serve {

using BlockId = int32_t;
using TokenId = int64_t;   // the tokenizer's id type (text/tokenizer.h)
using PrefixId = uint64_t;  // identity of a published block: its tokens and every token before them
inline constexpr PrefixId kRootPrefix = 0;  // the parent of a sequence's first block

class BlockPool {
 public:
  // UserError unless both are positive.
  BlockPool(int32_t num_blocks, int32_t block_size);

  int32_t num_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  int32_t block_size() const { return block_size_; }
  int32_t num_free() const { return num_free_; }  // count 0: allocatable, published or not
  int32_t num_published() const { return static_cast<int32_t>(published_.size()); }
  int32_t ref_count(BlockId b) const;
  bool is_published(BlockId b) const;

  // A free block with count 1: an unpublished one if any, else the least recently freed published one, which
  // is evicted (unpublished). Error when none is free: the caller checks num_free() first.
  BlockId allocate();
  // One more sharer of a block in use, or of a free published block (a prefix hit), which leaves the free list.
  // Error for a free unpublished block: its contents are stale.
  void retain(BlockId b);
  // One sharer fewer; at 0 the block is free. Error when the count is already 0 (a double free).
  void release(BlockId b);

  // Publishes `b` (in use, full: block_size tokens, all computed) as the block after `parent` holding `tokens`
  // and returns the PrefixId that its children name as their parent. Where an equal block is published already
  // (two sequences computed the same prompt at once), `b` stays unpublished and the existing id is returned.
  PrefixId publish(BlockId b, PrefixId parent, std::span<const TokenId> tokens);

  struct Hit {
    BlockId block;
    PrefixId id;
  };
  // The published block after `parent` holding exactly `tokens`, in use or free.
  std::optional<Hit> lookup(PrefixId parent, std::span<const TokenId> tokens) const;

 private:
  struct Block {
    int32_t refs = 0;
    BlockId prev = -1, next = -1;  // free-list links while refs == 0
    PrefixId id = 0;               // 0 while unpublished
    PrefixId parent = 0;
    uint64_t key_hash = 0;
    std::vector<TokenId> tokens;  // the published contents, compared in full on lookup
  };

  void check_id(BlockId b) const;
  void link_front(BlockId b);
  void link_back(BlockId b);
  void unlink(BlockId b);
  void unpublish(BlockId b);

  int32_t block_size_;
  std::vector<Block> blocks_;
  BlockId head_ = -1, tail_ = -1;  // free list: unpublished blocks at the head, published ones LRU to the tail
  int32_t num_free_ = 0;
  PrefixId next_id_ = kRootPrefix + 1;
  std::unordered_multimap<uint64_t, BlockId> published_;  // key hash → published block
};

}  // namespace meshtrain::serve

// BlockPool: reference counts, the free list's order (unpublished first, then published least recently freed),
// publication and lookup, and a seeded random run of every operation against a plain reference model.
#include "meshtrain/serve/block_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <list>
#include <map>
#include <random>
#include <vector>

#include "meshtrain/core/error.h"

namespace meshtrain::serve {
namespace {

std::vector<TokenId> toks(std::initializer_list<TokenId> t) { return t; }

TEST(BlockPool, CountsAllocationsAndReleases) {
  BlockPool pool(4, 2);
  EXPECT_EQ(pool.num_free(), 4);
  const BlockId a = pool.allocate();
  const BlockId b = pool.allocate();
  EXPECT_NE(a, b);
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_EQ(pool.ref_count(a), 1);
  pool.retain(a);
  EXPECT_EQ(pool.ref_count(a), 2);
  pool.release(a);
  EXPECT_EQ(pool.num_free(), 2);  // still one sharer
  pool.release(a);
  pool.release(b);
  EXPECT_EQ(pool.num_free(), 4);
}

TEST(BlockPool, RefusesDoubleFreeAndStaleRetain) {
  BlockPool pool(2, 2);
  const BlockId a = pool.allocate();
  pool.release(a);
  EXPECT_THROW(pool.release(a), Error);  // a double free changes nothing
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_THROW(pool.retain(a), Error);  // free and unpublished: nothing to share
  EXPECT_THROW(pool.ref_count(7), Error);
  pool.allocate();
  pool.allocate();
  EXPECT_THROW(pool.allocate(), Error);  // none free
}

TEST(BlockPool, RejectsAnEmptyPoolWithTheOptionsName) {
  try {
    BlockPool pool(0, 16);
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("num_blocks 0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(BlockPool(4, 0), UserError);
}

TEST(BlockPool, PublishedBlocksAreFoundByParentAndTokens) {
  BlockPool pool(4, 2);
  const BlockId a = pool.allocate();
  const BlockId b = pool.allocate();
  const PrefixId ida = pool.publish(a, kRootPrefix, toks({1, 2}));
  const PrefixId idb = pool.publish(b, ida, toks({3, 4}));
  EXPECT_NE(ida, idb);
  EXPECT_EQ(pool.num_published(), 2);
  ASSERT_TRUE(pool.lookup(kRootPrefix, toks({1, 2})));
  EXPECT_EQ(pool.lookup(kRootPrefix, toks({1, 2}))->block, a);
  EXPECT_EQ(pool.lookup(ida, toks({3, 4}))->block, b);
  EXPECT_FALSE(pool.lookup(kRootPrefix, toks({3, 4})));  // the same tokens after another prefix
  EXPECT_FALSE(pool.lookup(ida, toks({3, 5})));
  EXPECT_FALSE(pool.lookup(ida, toks({3})));  // not a full block
  EXPECT_THROW(pool.publish(pool.allocate(), ida, toks({3})), Error);
}

TEST(BlockPool, AnEqualBlockPublishedTwiceKeepsTheFirst) {
  BlockPool pool(4, 2);
  const BlockId a = pool.allocate();
  const BlockId b = pool.allocate();
  const PrefixId id = pool.publish(a, kRootPrefix, toks({1, 2}));
  EXPECT_EQ(pool.publish(b, kRootPrefix, toks({1, 2})), id);
  EXPECT_FALSE(pool.is_published(b));
  pool.release(b);  // a private copy: free and forgotten
  EXPECT_EQ(pool.num_published(), 1);
}

TEST(BlockPool, EvictsUnpublishedFirstThenLeastRecentlyFreed) {
  BlockPool pool(4, 1);
  std::vector<BlockId> b;
  for (int i = 0; i < 4; ++i) b.push_back(pool.allocate());
  const PrefixId id0 = pool.publish(b[0], kRootPrefix, toks({10}));
  const PrefixId id1 = pool.publish(b[1], id0, toks({11}));
  pool.publish(b[2], id1, toks({12}));
  pool.release(b[1]);
  pool.release(b[0]);
  pool.release(b[2]);
  pool.release(b[3]);  // unpublished: next out although freed last
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_EQ(pool.num_published(), 3);
  EXPECT_EQ(pool.allocate(), b[3]);
  EXPECT_EQ(pool.num_published(), 3);
  EXPECT_EQ(pool.allocate(), b[1]);  // freed first among the published
  EXPECT_FALSE(pool.lookup(id0, toks({11})));
  EXPECT_TRUE(pool.lookup(kRootPrefix, toks({10})));
  // A hit takes a free published block off the free list: b[2] is skipped, b[0] goes next.
  pool.retain(b[2]);
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_EQ(pool.allocate(), b[0]);
  EXPECT_EQ(pool.num_published(), 1);
  EXPECT_EQ(pool.num_free(), 0);
}

// The pool's contract written the slow, obvious way.
class ReferencePool {
 public:
  explicit ReferencePool(int n) : refs_(static_cast<size_t>(n), 0) {
    for (int b = 0; b < n; ++b) free_.push_back(b);
  }
  int num_free() const { return static_cast<int>(free_.size()); }
  int num_published() const { return static_cast<int>(published_.size()); }
  int ref_count(BlockId b) const { return refs_[static_cast<size_t>(b)]; }
  bool is_published(BlockId b) const { return published_.contains(b); }

  BlockId allocate() {
    const BlockId b = free_.front();
    free_.pop_front();
    published_.erase(b);
    refs_[static_cast<size_t>(b)] = 1;
    return b;
  }
  void retain(BlockId b) {
    if (refs_[static_cast<size_t>(b)]++ == 0) free_.remove(b);
  }
  void release(BlockId b) {
    if (--refs_[static_cast<size_t>(b)] > 0) return;
    if (is_published(b)) {
      free_.push_back(b);
    } else {
      free_.push_front(b);
    }
  }
  PrefixId publish(BlockId b, PrefixId parent, const std::vector<TokenId>& t) {
    if (auto it = published_.find(b); it != published_.end()) return it->second.id;
    if (auto hit = lookup(parent, t)) return hit->id;
    published_[b] = {parent, t, next_id_};
    return next_id_++;
  }
  std::optional<BlockPool::Hit> lookup(PrefixId parent, const std::vector<TokenId>& t) const {
    for (const auto& [b, e] : published_) {
      if (e.parent == parent && e.tokens == t) return BlockPool::Hit{b, e.id};
    }
    return std::nullopt;
  }

 private:
  struct Entry {
    PrefixId parent;
    std::vector<TokenId> tokens;
    PrefixId id;
  };
  std::vector<int> refs_;
  std::list<BlockId> free_;
  std::map<BlockId, Entry> published_;
  PrefixId next_id_ = kRootPrefix + 1;
};

void expect_same_pool(const BlockPool& pool, const ReferencePool& ref, int step) {
  ASSERT_EQ(pool.num_free(), ref.num_free()) << "after op " << step;
  ASSERT_EQ(pool.num_published(), ref.num_published()) << "after op " << step;
  for (BlockId b = 0; b < pool.num_blocks(); ++b) {
    ASSERT_EQ(pool.ref_count(b), ref.ref_count(b)) << "block " << b << " after op " << step;
    ASSERT_EQ(pool.is_published(b), ref.is_published(b)) << "block " << b << " after op " << step;
  }
}

TEST(BlockPool, RandomOperationsMatchTheReferenceModel) {
  constexpr int kBlocks = 12;
  constexpr int kBlockSize = 2;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed);
    auto pick = [&rng](size_t n) { return static_cast<size_t>(rng() % n); };
    BlockPool pool(kBlocks, kBlockSize);
    ReferencePool ref(kBlocks);
    std::vector<BlockId> held;                 // one entry per reference the test holds
    std::vector<PrefixId> parents{kRootPrefix};  // ids seen, to build keys that exist
    for (int step = 0; step < 2000; ++step) {
      const std::vector<TokenId> t{static_cast<TokenId>(rng() % 3), static_cast<TokenId>(rng() % 3)};
      const PrefixId parent = parents[pick(parents.size())];
      switch (rng() % 6) {
        case 0:
        case 1:
          if (ref.num_free() > 0) {
            const BlockId b = pool.allocate();
            ASSERT_EQ(b, ref.allocate()) << "seed " << seed << " op " << step;
            held.push_back(b);
          }
          break;
        case 2:
          if (!held.empty()) {
            const size_t i = pick(held.size());
            pool.release(held[i]);
            ref.release(held[i]);
            held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
          }
          break;
        case 3:
          if (!held.empty()) {  // publishing a published block again is the caller's bug: skipped
            const BlockId b = held[pick(held.size())];
            if (ref.is_published(b)) break;
            const PrefixId id = pool.publish(b, parent, t);
            ASSERT_EQ(id, ref.publish(b, parent, t)) << "seed " << seed << " op " << step;
            parents.push_back(id);
          }
          break;
        case 4: {  // a prefix hit: lookup, then share the block
          const auto hit = pool.lookup(parent, t);
          const auto want = ref.lookup(parent, t);
          ASSERT_EQ(hit.has_value(), want.has_value()) << "seed " << seed << " op " << step;
          if (hit) {
            ASSERT_EQ(hit->block, want->block);
            ASSERT_EQ(hit->id, want->id);
            pool.retain(hit->block);
            ref.retain(hit->block);
            held.push_back(hit->block);
          }
          break;
        }
        default: {  // a double free is refused and changes nothing
          for (BlockId b = 0; b < kBlocks; ++b) {
            if (ref.ref_count(b) == 0) {
              ASSERT_THROW(pool.release(b), Error);
              break;
            }
          }
        }
      }
      expect_same_pool(pool, ref, step);
    }
    for (BlockId b : held) pool.release(b);
    EXPECT_EQ(pool.num_free(), kBlocks) << "seed " << seed;
  }
}

}  // namespace
}  // namespace meshtrain::serve

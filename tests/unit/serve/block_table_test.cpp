// BlockTable: blocks needed for the next tokens, slots of positions, the published-prefix chain.
#include "meshtrain/serve/block_table.h"

#include <gtest/gtest.h>

#include "meshtrain/core/error.h"

namespace meshtrain::serve {
namespace {

TEST(BlockTable, CountsTheBlocksTheNextTokensNeed) {
  BlockTable t(4);
  EXPECT_EQ(t.blocks_needed(0), 0);
  EXPECT_EQ(t.blocks_needed(1), 1);
  EXPECT_EQ(t.blocks_needed(4), 1);
  EXPECT_EQ(t.blocks_needed(5), 2);
  t.add_block(7);
  t.append_tokens(3);
  EXPECT_EQ(t.blocks_needed(1), 0);  // the fourth slot of block 7
  EXPECT_EQ(t.blocks_needed(2), 1);
  EXPECT_EQ(t.blocks_needed(9), 2);
  EXPECT_THROW(t.append_tokens(2), Error);  // one slot left
  EXPECT_EQ(t.num_tokens(), 3);
}

TEST(BlockTable, MapsPositionsToSlotsThroughItsBlocks) {
  BlockTable t(4);
  t.add_block(5);
  t.add_block(2);
  t.append_tokens(6);
  EXPECT_EQ(t.slot(0), 20);
  EXPECT_EQ(t.slot(3), 23);
  EXPECT_EQ(t.slot(4), 8);
  EXPECT_EQ(t.slot(5), 9);
  EXPECT_THROW(t.slot(6), Error);  // not taken yet
}

TEST(BlockTable, ChainsPrefixIdsOfFullBlocksOnly) {
  BlockTable t(2);
  EXPECT_EQ(t.last_prefix_id(), kRootPrefix);
  t.add_block(0);
  t.add_block(1);
  t.append_tokens(3);
  t.add_prefix_id(42);
  EXPECT_EQ(t.last_prefix_id(), 42u);
  EXPECT_THROW(t.add_prefix_id(43), Error);  // block 1 holds one token of two
  EXPECT_EQ(t.clear(), (std::vector<BlockId>{0, 1}));
  EXPECT_EQ(t.num_tokens(), 0);
  EXPECT_TRUE(t.prefix_ids().empty());
}

}  // namespace
}  // namespace meshtrain::serve

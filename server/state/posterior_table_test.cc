#include "server/state/posterior_table.h"

#include <gtest/gtest.h>

#include <cmath>

namespace verity::server {
namespace {

TEST(PosteriorTableTest, NewItemsStartUniformWithoutLabels) {
  PosteriorTable empty(4);
  PosteriorTable::Builder builder(empty);
  builder.Resize(3);
  PosteriorTable table = std::move(builder).Build();
  ASSERT_EQ(table.num_items(), 3);
  for (double p : table.probabilities(2)) EXPECT_DOUBLE_EQ(p, 0.25);
  EXPECT_EQ(table.num_labels(2), 0);
  EXPECT_FALSE(table.is_gold(2));
}

// posterior_table.h: newest_seq is 0 for an item without labels, priority defaults to 0 and
// entropy is that of the uniform start (log k nats), for new items of every chunk.
TEST(PosteriorTableTest, NewItemsHaveNoNewestLabelTheDefaultPriorityAndUniformEntropy) {
  PosteriorTable empty(4);
  PosteriorTable::Builder builder(empty);
  builder.Resize(PosteriorTable::kChunkItems + 2);
  PosteriorTable table = std::move(builder).Build();
  for (int32_t item : {0, 2, PosteriorTable::kChunkItems + 1}) {
    EXPECT_EQ(table.newest_seq(item), 0) << item;
    EXPECT_EQ(table.priority(item), 0.0) << item;
    EXPECT_NEAR(table.entropy(item), std::log(4.0), 1e-12) << item;
  }
}

TEST(PosteriorTableTest, BuilderNeverChangesTheBaseTable) {
  PosteriorTable empty(2);
  PosteriorTable::Builder first(empty);
  first.Resize(PosteriorTable::kChunkItems * 2 + 5);
  PosteriorTable base = std::move(first).Build();

  PosteriorTable::Builder edit(base);
  edit.mutable_probabilities(7)[0] = 0.9;
  edit.mutable_probabilities(7)[1] = 0.1;
  edit.set_num_labels(7, 3);
  edit.set_newest_seq(7, 42);
  edit.set_is_gold(PosteriorTable::kChunkItems * 2 + 1, true);
  PosteriorTable next = std::move(edit).Build();

  EXPECT_DOUBLE_EQ(base.probabilities(7)[0], 0.5);
  EXPECT_EQ(base.num_labels(7), 0);
  EXPECT_FALSE(base.is_gold(PosteriorTable::kChunkItems * 2 + 1));
  EXPECT_DOUBLE_EQ(next.probabilities(7)[0], 0.9);
  EXPECT_EQ(next.num_labels(7), 3);
  EXPECT_EQ(next.newest_seq(7), 42);
  EXPECT_TRUE(next.is_gold(PosteriorTable::kChunkItems * 2 + 1));
  // Untouched items read the same in both.
  EXPECT_DOUBLE_EQ(next.probabilities(PosteriorTable::kChunkItems + 3)[1], 0.5);
}

TEST(PosteriorTableTest, GrowingKeepsExistingValues) {
  PosteriorTable empty(2);
  PosteriorTable::Builder b1(empty);
  b1.Resize(10);
  b1.mutable_probabilities(9)[0] = 0.2;
  b1.mutable_probabilities(9)[1] = 0.8;
  PosteriorTable t1 = std::move(b1).Build();
  PosteriorTable::Builder b2(t1);
  b2.Resize(PosteriorTable::kChunkItems + 1);
  PosteriorTable t2 = std::move(b2).Build();
  EXPECT_EQ(t2.num_items(), PosteriorTable::kChunkItems + 1);
  EXPECT_DOUBLE_EQ(t2.probabilities(9)[1], 0.8);
  EXPECT_DOUBLE_EQ(t2.probabilities(PosteriorTable::kChunkItems)[0], 0.5);
}

TEST(PosteriorTableTest, ScanBoundsCoverTheNonGoldItemsOfEachChunk) {
  constexpr int32_t kChunk = PosteriorTable::kChunkItems;
  PosteriorTable empty(2);
  PosteriorTable::Builder first(empty);
  first.Resize(kChunk + 10);  // A full chunk and a partial one.
  PosteriorTable fresh = std::move(first).Build();
  ASSERT_EQ(fresh.num_chunks(), 2);
  for (int32_t c = 0; c < 2; ++c) {
    const PosteriorTable::ScanBounds& b = fresh.chunk_bounds(c);
    EXPECT_EQ(b.max_priority, 0.0);
    EXPECT_DOUBLE_EQ(b.max_entropy, std::log(2.0));
    EXPECT_DOUBLE_EQ(b.max_discounted_entropy, std::log(2.0));  // no labels: discount 1
    EXPECT_EQ(b.min_num_labels, 0);
  }

  // Chunk 0: every item labelled and certain except item 3 (two labels, entropy 0.5) and
  // item 5 (priority 2, gold: excluded from the bounds).
  PosteriorTable::Builder edit(fresh);
  for (int32_t i = 0; i < kChunk; ++i) {
    edit.set_num_labels(i, 4);
    edit.set_entropy(i, 0.0);
  }
  edit.set_num_labels(3, 2);
  edit.set_entropy(3, 0.5);
  edit.set_priority(3, 1.0);
  edit.set_priority(5, 2.0);
  edit.set_entropy(5, 0.6);
  edit.set_is_gold(5, true);
  PosteriorTable next = std::move(edit).Build();
  const PosteriorTable::ScanBounds& b = next.chunk_bounds(0);
  EXPECT_EQ(b.max_priority, 1.0);
  EXPECT_EQ(b.max_entropy, 0.5);
  EXPECT_EQ(b.max_discounted_entropy, 0.5 * (1.0 / 3.0));
  EXPECT_EQ(b.min_num_labels, 2);
  const PosteriorTable::ChunkColumns columns = next.chunk_columns(0);
  EXPECT_EQ(columns.discounted_entropy[3], 0.5 * (1.0 / 3.0));
  EXPECT_EQ(columns.discounted_entropy[4], 0.0);
  EXPECT_EQ(columns.priority[5], 2.0);
  EXPECT_EQ(columns.is_gold[5], 1);
  // The chunk the builder did not write keeps its bounds; the base table keeps its own.
  EXPECT_EQ(next.chunk_bounds(1).min_num_labels, 0);
  EXPECT_DOUBLE_EQ(next.chunk_bounds(1).max_entropy, std::log(2.0));
  EXPECT_EQ(fresh.chunk_bounds(0).min_num_labels, 0);
  // Blocks: item 3 and 5 are in block 0; block 1 has only certain items with 4 labels.
  EXPECT_EQ(next.block_bounds(0, 0).max_entropy, 0.5);
  EXPECT_EQ(next.block_bounds(0, 0).max_priority, 1.0);
  EXPECT_EQ(next.block_bounds(0, 1).max_entropy, 0.0);
  EXPECT_EQ(next.block_bounds(0, 1).max_priority, 0.0);
  EXPECT_EQ(next.block_bounds(0, 1).min_num_labels, 4);
  // The partial chunk's unused slots count as unlabelled uniform items.
  const int32_t last_block = PosteriorTable::kBlocksPerChunk - 1;
  EXPECT_EQ(next.block_bounds(1, last_block).min_num_labels, 0);
  EXPECT_DOUBLE_EQ(next.block_bounds(1, last_block).max_entropy, std::log(2.0));
}

TEST(PosteriorTableTest, AChunkOfGoldItemsHasBoundsBelowEveryItem) {
  PosteriorTable empty(3);
  PosteriorTable::Builder builder(empty);
  builder.Resize(PosteriorTable::kChunkItems);
  for (int32_t i = 0; i < PosteriorTable::kChunkItems; ++i) builder.set_is_gold(i, true);
  PosteriorTable table = std::move(builder).Build();
  const PosteriorTable::ScanBounds& b = table.chunk_bounds(0);
  EXPECT_TRUE(std::isinf(b.max_priority) && b.max_priority < 0);
  EXPECT_TRUE(std::isinf(b.max_discounted_entropy) && b.max_discounted_entropy < 0);
}

// posterior_table.h: Resize grows to num_items (never shrinks), with the chunks needed to
// hold them: ceil(num_items / kChunkItems).
TEST(PosteriorTableTest, ResizeOnlyGrowsAndAllocatesTheChunksItNeeds) {
  constexpr int32_t kChunk = PosteriorTable::kChunkItems;
  PosteriorTable empty(2);
  PosteriorTable::Builder b(empty);
  b.Resize(kChunk);
  PosteriorTable one = std::move(b).Build();
  EXPECT_EQ(one.num_items(), kChunk);
  EXPECT_EQ(one.num_chunks(), 1);
  PosteriorTable::Builder b2(one);
  b2.Resize(kChunk + 1);
  b2.Resize(3);
  EXPECT_EQ(b2.num_items(), kChunk + 1);
  PosteriorTable two = std::move(b2).Build();
  EXPECT_EQ(two.num_items(), kChunk + 1);
  EXPECT_EQ(two.num_chunks(), 2);
}

// posterior_table.h: block bounds cover every item of their block, the last one included.
TEST(PosteriorTableTest, BlockBoundsIncludeTheLastItemOfTheBlock) {
  constexpr int32_t kBlock = PosteriorTable::kBlockItems;
  PosteriorTable empty(2);
  PosteriorTable::Builder b(empty);
  b.Resize(PosteriorTable::kChunkItems);
  for (int32_t i = 0; i < PosteriorTable::kChunkItems; ++i) {
    b.set_num_labels(i, 5);
    b.set_entropy(i, 0.0);
  }
  const int32_t last = 2 * kBlock - 1;  // the last item of block 1
  b.set_num_labels(last, 1);
  b.set_entropy(last, 0.25);
  b.set_priority(last, 3.0);
  PosteriorTable t = std::move(b).Build();
  EXPECT_EQ(t.block_bounds(0, 1).max_entropy, 0.25);
  EXPECT_EQ(t.block_bounds(0, 1).max_priority, 3.0);
  EXPECT_EQ(t.block_bounds(0, 1).min_num_labels, 1);
  EXPECT_EQ(t.block_bounds(0, 1).max_discounted_entropy, 0.25 * (1.0 / 2.0));
  EXPECT_EQ(t.chunk_bounds(0).max_priority, 3.0);
}

// posterior_table.h: the discounted entropy is entropy(i) * (1.0 / (1.0 + num_labels(i))),
// computed in exactly that form, in the columns and the bounds alike (a scan compares one with
// the other). Entropy 0.1 with 4 labels: 0.1 * (1.0 / 5.0) = 0.020000000000000004, where
// 0.1 / 5.0 = 0.02.
TEST(PosteriorTableTest, DiscountedEntropyIsComputedInExactlyTheDocumentedForm) {
  PosteriorTable empty(2);
  PosteriorTable::Builder b(empty);
  b.Resize(PosteriorTable::kChunkItems);
  for (int32_t i = 0; i < PosteriorTable::kChunkItems; ++i) {
    b.set_num_labels(i, 4);
    b.set_entropy(i, i == 10 ? 0.1 : 0.0);
  }
  PosteriorTable t = std::move(b).Build();
  const double expected = 0.1 * (1.0 / (1.0 + 4));
  ASSERT_NE(expected, 0.1 / 5.0);  // the two forms differ for these numbers
  EXPECT_EQ(t.chunk_columns(0).discounted_entropy[10], expected);
  EXPECT_EQ(t.chunk_bounds(0).max_discounted_entropy, expected);
  EXPECT_EQ(t.block_bounds(0, 0).max_discounted_entropy, expected);
}

// posterior_table.h: every accessor reads the item it is given, in whichever chunk it lies.
// Item 2 * kChunkItems + 5 is written; item 5, at the same slot of chunk 0, keeps the values a
// new item starts with (uniform, no labels, newest seq 0, priority 0, entropy log 2).
TEST(PosteriorTableTest, AccessorsReadTheItemInItsOwnChunk) {
  constexpr int32_t kItem = 2 * PosteriorTable::kChunkItems + 5;
  PosteriorTable empty(2);
  PosteriorTable::Builder b(empty);
  b.Resize(kItem + 1);
  b.mutable_probabilities(kItem)[0] = 0.9;
  b.mutable_probabilities(kItem)[1] = 0.1;
  b.set_num_labels(kItem, 3);
  b.set_newest_seq(kItem, 77);
  b.set_entropy(kItem, 0.3);
  b.set_priority(kItem, 2.5);
  PosteriorTable t = std::move(b).Build();
  ASSERT_EQ(t.num_chunks(), 3);
  EXPECT_EQ(t.probabilities(kItem)[0], 0.9);
  EXPECT_EQ(t.probabilities(kItem)[1], 0.1);
  EXPECT_EQ(t.num_labels(kItem), 3);
  EXPECT_EQ(t.newest_seq(kItem), 77);
  EXPECT_EQ(t.entropy(kItem), 0.3);
  EXPECT_EQ(t.priority(kItem), 2.5);
  EXPECT_EQ(t.probabilities(5)[0], 0.5);
  EXPECT_EQ(t.num_labels(5), 0);
  EXPECT_EQ(t.newest_seq(5), 0);
  EXPECT_NEAR(t.entropy(5), std::log(2.0), 1e-12);
  EXPECT_EQ(t.priority(5), 0.0);
}

}  // namespace
}  // namespace verity::server

#include "server/posterior_table.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace verity::server

#include "server/state/lease_book.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace verity::server {
namespace {

using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

TEST(LeaseBookTest, LeasesCountPerItemUntilTheyExpire) {
  LeaseBook book;
  book.Add(1, 10, kNow + absl::Seconds(10));
  book.Add(1, 11, kNow + absl::Seconds(20));
  book.Add(2, 10, kNow + absl::Seconds(30));
  EXPECT_THAT(book.OutstandingPerItem(kNow), UnorderedElementsAre(Pair(1, 2), Pair(2, 1)));
  EXPECT_THAT(book.OutstandingPerItem(kNow + absl::Seconds(10)),
              UnorderedElementsAre(Pair(1, 1), Pair(2, 1)));
  EXPECT_FALSE(book.Has(1, 10, kNow + absl::Seconds(10)));
  EXPECT_TRUE(book.Has(1, 11, kNow + absl::Seconds(10)));
  EXPECT_THAT(book.OutstandingPerItem(kNow + absl::Seconds(31)), IsEmpty());
}

TEST(LeaseBookTest, OutstandingOnCountsTheGivenItemsInTheirOrder) {
  LeaseBook book;
  book.Add(1, 10, kNow + absl::Seconds(10));
  book.Add(1, 11, kNow + absl::Seconds(20));
  book.Add(2, 10, kNow + absl::Seconds(30));
  EXPECT_THAT(book.OutstandingOn({2, 9, 1, 2}, kNow), ::testing::ElementsAre(1, 0, 2, 1));
  EXPECT_THAT(book.OutstandingOn({1, 2}, kNow + absl::Seconds(15)), ::testing::ElementsAre(1, 1));
  EXPECT_THAT(book.OutstandingOn({}, kNow), IsEmpty());
}

TEST(LeaseBookTest, ALabelReleasesItsLease) {
  LeaseBook book;
  book.Add(3, 7, kNow + absl::Minutes(10));
  EXPECT_TRUE(book.Release(3, 7));
  EXPECT_FALSE(book.Release(3, 7));
  EXPECT_THAT(book.OutstandingPerItem(kNow), IsEmpty());
}

TEST(LeaseBookTest, ExtendingALeaseKeepsItPastItsFirstExpiry) {
  LeaseBook book;
  book.Add(4, 1, kNow + absl::Seconds(5));
  book.Add(4, 1, kNow + absl::Seconds(50));
  EXPECT_EQ(book.size(kNow + absl::Seconds(6)), 1u);
  EXPECT_THAT(book.OutstandingPerItem(kNow + absl::Seconds(6)), UnorderedElementsAre(Pair(4, 1)));
  EXPECT_EQ(book.size(kNow + absl::Seconds(51)), 0u);
}

// ForEachOutstanding, like every query, first drops the leases expired at `now`: the items it
// visits and their counts are OutstandingPerItem's.
TEST(LeaseBookTest, ForEachOutstandingSkipsExpiredLeases) {
  LeaseBook book;
  book.Add(1, 10, kNow + absl::Seconds(10));
  book.Add(1, 11, kNow + absl::Seconds(20));
  book.Add(2, 10, kNow + absl::Seconds(10));
  std::vector<std::pair<int32_t, int32_t>> seen;
  book.ForEachOutstanding(kNow + absl::Seconds(10),
                          [&](int32_t item, int32_t count) { seen.emplace_back(item, count); });
  EXPECT_THAT(seen, UnorderedElementsAre(Pair(1, 1)));
  seen.clear();
  book.ForEachOutstanding(kNow + absl::Seconds(20),
                          [&](int32_t item, int32_t count) { seen.emplace_back(item, count); });
  EXPECT_THAT(seen, IsEmpty());
}

// Has, like every query, first drops the leases expired at `now` (the header: expiry is lazy, at
// or before the `now` a query is given), even when no other query has expired them yet.
TEST(LeaseBookTest, HasIsFalseFromALeasesExpiryOnEvenAsTheFirstQuery) {
  LeaseBook book;
  book.Add(5, 1, kNow + absl::Seconds(10));
  book.Add(5, 2, kNow + absl::Seconds(20));
  EXPECT_TRUE(book.Has(5, 1, kNow + absl::Seconds(9)));
  EXPECT_FALSE(book.Has(5, 1, kNow + absl::Seconds(10)));
  EXPECT_TRUE(book.Has(5, 2, kNow + absl::Seconds(10)));
  EXPECT_FALSE(book.Has(5, 2, kNow + absl::Seconds(25)));
}

// size counts the outstanding leases, not the items they are on (the server checks
// --max_leases_per_project against it): two annotators on item 1 and one on item 2 are 3 leases;
// once one of item 1's expired, 2.
TEST(LeaseBookTest, SizeCountsLeasesNotLeasedItems) {
  LeaseBook book;
  book.Add(1, 10, kNow + absl::Seconds(10));
  book.Add(1, 11, kNow + absl::Seconds(20));
  book.Add(2, 10, kNow + absl::Seconds(20));
  EXPECT_EQ(book.size(kNow), 3u);
  EXPECT_EQ(book.size(kNow + absl::Seconds(10)), 2u);
  EXPECT_EQ(book.size(kNow + absl::Seconds(20)), 0u);
}

}  // namespace
}  // namespace verity::server

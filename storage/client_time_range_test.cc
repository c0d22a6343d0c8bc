#include "storage/client_time_range.h"

#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace verity {
namespace storage {
namespace {

// client_time_range.h: exactly the instants in [0001-01-01T00:00:00, 9999-12-31T23:59:59.999999]
// UTC, bounded by the instant itself rather than its microseconds.
TEST(ClientTimeRangeTest, AcceptsExactlyYearOneToTheLastMicrosecondOfYear9999) {
  const absl::TimeZone utc = absl::UTCTimeZone();
  const absl::Time first = absl::FromCivil(absl::CivilSecond(1, 1, 1, 0, 0, 0), utc);
  EXPECT_TRUE(ClientTimeInStoreRange(first));
  EXPECT_FALSE(ClientTimeInStoreRange(first - absl::Nanoseconds(1)));
  EXPECT_FALSE(ClientTimeInStoreRange(first - absl::Seconds(1)));

  const absl::Time last_second = absl::FromCivil(absl::CivilSecond(9999, 12, 31, 23, 59, 59), utc);
  EXPECT_TRUE(ClientTimeInStoreRange(last_second + absl::Microseconds(999999)));
  EXPECT_FALSE(ClientTimeInStoreRange(last_second + absl::Nanoseconds(999999001)));
  EXPECT_FALSE(ClientTimeInStoreRange(last_second + absl::Seconds(1)));

  EXPECT_TRUE(ClientTimeInStoreRange(absl::UnixEpoch()));
  EXPECT_FALSE(ClientTimeInStoreRange(absl::InfinitePast()));
  EXPECT_FALSE(ClientTimeInStoreRange(absl::InfiniteFuture()));
}

}  // namespace
}  // namespace storage
}  // namespace verity

#include "server/api/proto_time.h"

#include <gtest/gtest.h>

namespace verity::server {
namespace {

TEST(ProtoTimeTest, KeepsTheFractionOfASecond) {
  google::protobuf::Timestamp out;
  SetTimestamp(absl::FromUnixSeconds(1'800'000'000) + absl::Milliseconds(750), &out);
  EXPECT_EQ(out.seconds(), 1'800'000'000);
  EXPECT_EQ(out.nanos(), 750'000'000);
  // Before 1970 the seconds round down and the nanoseconds stay in [0, 1e9).
  SetTimestamp(absl::FromUnixSeconds(-5) + absl::Milliseconds(250), &out);
  EXPECT_EQ(out.seconds(), -5);
  EXPECT_EQ(out.nanos(), 250'000'000);
  SetTimestamp(absl::FromUnixSeconds(-5) - absl::Milliseconds(250), &out);
  EXPECT_EQ(out.seconds(), -6);
  EXPECT_EQ(out.nanos(), 750'000'000);
}

// Promise (proto_time.h: "to the nanosecond"): no digit of the fraction is lost, before 1970
// as after.
TEST(ProtoTimeTest, KeepsEveryNanosecond) {
  google::protobuf::Timestamp out;
  SetTimestamp(absl::FromUnixSeconds(1'800'000'000) + absl::Nanoseconds(123'456'789), &out);
  EXPECT_EQ(out.seconds(), 1'800'000'000);
  EXPECT_EQ(out.nanos(), 123'456'789);
  // One nanosecond before -5 s is -6 s + 999999999 ns.
  SetTimestamp(absl::FromUnixSeconds(-5) - absl::Nanoseconds(1), &out);
  EXPECT_EQ(out.seconds(), -6);
  EXPECT_EQ(out.nanos(), 999'999'999);
}

}  // namespace
}  // namespace verity::server

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

}  // namespace
}  // namespace verity::server

#include "models/binary_codec.h"

#include <cmath>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/status_matchers.h"

namespace verity::models {
namespace {

using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;

std::string SampleBlob() {
  ByteWriter w;
  w.WriteU32(0xdeadbeef);
  w.WriteU64(0x0123456789abcdefULL);
  w.WriteF64(-0.1);
  w.WriteF64(std::numeric_limits<double>::denorm_min());
  w.WriteString("ds");
  return w.Finish();
}

TEST(BinaryCodecTest, RoundTripsEveryFieldBitForBit) {
  const std::string blob = SampleBlob();
  absl::StatusOr<ByteReader> r = ByteReader::Open(blob);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(*r->ReadU32(), 0xdeadbeefu);
  EXPECT_EQ(*r->ReadU64(), 0x0123456789abcdefULL);
  EXPECT_EQ(*r->ReadF64(), -0.1);
  EXPECT_EQ(*r->ReadF64(), std::numeric_limits<double>::denorm_min());
  EXPECT_EQ(*r->ReadString(), "ds");
  EXPECT_THAT(r->ExpectEnd(), IsOk());
}

TEST(BinaryCodecTest, EncodingIsLittleEndian) {
  ByteWriter w;
  w.WriteU32(0x04030201);
  const std::string blob = w.Finish();
  EXPECT_EQ(blob.substr(0, 4), std::string("\x01\x02\x03\x04", 4));
}

TEST(BinaryCodecTest, DetectsEveryFlippedBit) {
  const std::string blob = SampleBlob();
  for (size_t byte = 0; byte < blob.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string corrupt = blob;
      corrupt[byte] = static_cast<char>(corrupt[byte] ^ (1 << bit));
      EXPECT_THAT(ByteReader::Open(corrupt),
                  StatusIs(absl::StatusCode::kInvalidArgument))
          << "byte " << byte << " bit " << bit;
    }
  }
}

TEST(BinaryCodecTest, DetectsTruncation) {
  const std::string blob = SampleBlob();
  for (size_t n = 0; n < blob.size(); ++n) {
    EXPECT_THAT(ByteReader::Open(blob.substr(0, n)),
                StatusIs(absl::StatusCode::kInvalidArgument));
  }
}

TEST(BinaryCodecTest, ReadingPastTheEndIsAnError) {
  ByteWriter w;
  w.WriteU32(7);
  const std::string blob = w.Finish();
  absl::StatusOr<ByteReader> r = ByteReader::Open(blob);
  ASSERT_THAT(r, IsOk());
  EXPECT_THAT(r->ReadU64(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(r->ExpectEnd(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(*r->ReadU32(), 7u);
  EXPECT_THAT(r->ReadString(), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace verity::models

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

// binary_codec.h: a model header written by this build reads back; one of another format
// version, another method or without the magic is INVALID_ARGUMENT saying which. The header is
// written here field by field (magic "VRTY", version 1, method, parameters flag), not by
// WriteModelHeader, so that a changed version or layout there is caught.
TEST(BinaryCodecTest, AModelHeaderOfAnotherVersionOrMethodIsRefused) {
  auto header = [](std::string_view magic, uint32_t version, std::string_view method) {
    ByteWriter w;
    w.WriteString(magic);
    w.WriteU32(version);
    w.WriteString(method);
    w.WriteU32(1);
    return w.Finish();
  };
  auto read = [](const std::string& blob, std::string_view method) -> absl::StatusOr<bool> {
    absl::StatusOr<ByteReader> r = ByteReader::Open(blob);
    if (!r.ok()) return r.status();
    return ReadModelHeader(*r, method);
  };
  EXPECT_THAT(read(header("VRTY", 1, "mv"), "mv"), IsOk());
  {
    ByteWriter w;
    WriteModelHeader(w, "mv", true);
    EXPECT_EQ(w.Finish(), header("VRTY", 1, "mv"));
  }
  absl::StatusOr<bool> v2 = read(header("VRTY", 2, "mv"), "mv");
  EXPECT_THAT(v2, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(v2.status().message(), ::testing::HasSubstr("format version 2"));
  absl::StatusOr<bool> other = read(header("VRTY", 1, "ds"), "mv");
  EXPECT_THAT(other, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(other.status().message(), ::testing::HasSubstr("\"ds\""));
  EXPECT_THAT(read(header("XXXX", 1, "mv"), "mv"), StatusIs(absl::StatusCode::kInvalidArgument));
}

// Promise (binary_codec.h): Fnv1a64 is the standard 64-bit FNV-1a hash: offset basis
// 0xcbf29ce484222325, prime 0x100000001b3, each byte XORed in (as an unsigned octet) and then
// multiplied. Expected values are the published FNV-1a 64 test vectors ("" is the offset basis
// itself; "a" and "foobar" from the reference test suite); the "\xff" vector checks the byte is
// taken unsigned: (0xcbf29ce484222325 ^ 0xff) * 0x100000001b3 mod 2^64 = 0xaf64724c8602eb6e
// (sign-extending would XOR 0xffffffffffffffff instead).
TEST(BinaryCodecTest, Fnv1a64MatchesTheStandardTestVectors) {
  EXPECT_EQ(Fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171f73967e8ULL);
  EXPECT_EQ(Fnv1a64(std::string("\xff", 1)), 0xaf64724c8602eb6eULL);
}

}  // namespace
}  // namespace verity::models

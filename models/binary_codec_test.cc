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

// binary_codec.h, ByteReader::Open: a blob shorter than the checksum's 8 bytes is
// "truncated"; a longer one whose checksum does not match is "corrupt: checksum mismatch".
TEST(BinaryCodecTest, BlobsShorterThanTheChecksumAreTruncatedNotMismatched) {
  const std::string blob = SampleBlob();
  for (size_t n = 0; n < 8; ++n) {
    absl::StatusOr<ByteReader> r = ByteReader::Open(blob.substr(0, n));
    EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument)) << n;
    EXPECT_THAT(r.status().message(), ::testing::HasSubstr("truncated")) << n;
  }
  absl::StatusOr<ByteReader> r = ByteReader::Open(blob.substr(0, blob.size() - 1));
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("checksum mismatch"));
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
  // An older version is no more readable than a newer one.
  absl::StatusOr<bool> v0 = read(header("VRTY", 0, "mv"), "mv");
  EXPECT_THAT(v0, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(v0.status().message(), ::testing::HasSubstr("format version 0"));
  absl::StatusOr<bool> other = read(header("VRTY", 1, "ds"), "mv");
  EXPECT_THAT(other, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(other.status().message(), ::testing::HasSubstr("\"ds\""));
  EXPECT_THAT(read(header("XXXX", 1, "mv"), "mv"), StatusIs(absl::StatusCode::kInvalidArgument));
}

// binary_codec.h: ReadModelHeader refuses a parameters flag other than 0 or 1
// (INVALID_ARGUMENT), and reads 0 as "no parameters follow", 1 as "they follow".
TEST(BinaryCodecTest, AModelHeaderFlagMustBeZeroOrOne) {
  auto read_flag = [](uint32_t flag) -> absl::StatusOr<bool> {
    ByteWriter w;
    w.WriteString("VRTY");
    w.WriteU32(1);
    w.WriteString("mv");
    w.WriteU32(flag);
    const std::string blob = w.Finish();
    absl::StatusOr<ByteReader> r = ByteReader::Open(blob);
    if (!r.ok()) return r.status();
    return ReadModelHeader(*r, "mv");
  };
  ASSERT_THAT(read_flag(0), IsOk());
  EXPECT_FALSE(*read_flag(0));
  ASSERT_THAT(read_flag(1), IsOk());
  EXPECT_TRUE(*read_flag(1));
  EXPECT_THAT(read_flag(2), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(read_flag(0xffffffffu), StatusIs(absl::StatusCode::kInvalidArgument));
}

// binary_codec.h: ReadClassCount is INVALID_ARGUMENT "serialized <what>: N classes; this
// model has K" when the stored count differs, OK when it matches.
TEST(BinaryCodecTest, ReadClassCountRefusesAnotherClassCount) {
  ByteWriter w;
  w.WriteU32(3);
  w.WriteU32(3);
  const std::string blob = w.Finish();
  absl::StatusOr<ByteReader> r = ByteReader::Open(blob);
  ASSERT_THAT(r, IsOk());
  absl::Status other = ReadClassCount(*r, 2, "counts");
  EXPECT_THAT(other, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(other.message(), ::testing::HasSubstr("serialized counts: 3 classes; this model has 2"));
  EXPECT_THAT(ReadClassCount(*r, 3), IsOk());
  EXPECT_THAT(r->ExpectEnd(), IsOk());
  // Fewer classes stored than the model has are as wrong as more.
  absl::StatusOr<ByteReader> r4 = ByteReader::Open(blob);
  ASSERT_THAT(r4, IsOk());
  EXPECT_THAT(ReadClassCount(*r4, 4), StatusIs(absl::StatusCode::kInvalidArgument));
}

// binary_codec.h: every Read* fails instead of reading past the end, also when only one byte
// is missing; an empty payload (a blob of just the checksum) is valid.
TEST(BinaryCodecTest, ReadsFailOneByteShortAndAnEmptyPayloadIsValid) {
  ByteWriter w;
  w.WriteString("abc");  // u32 3, then 3 bytes
  const std::string blob = w.Finish();
  absl::StatusOr<ByteReader> r = ByteReader::Open(blob);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(*r->ReadU32(), 3u);
  EXPECT_EQ(r->remaining(), 3u);
  EXPECT_THAT(r->ReadU32(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(r->remaining(), 3u);

  // A string whose length (5) runs one byte past the 4 that follow it.
  ByteWriter s;
  s.WriteU32(5);
  s.WriteU32(7);
  const std::string short_string = s.Finish();
  absl::StatusOr<ByteReader> rs = ByteReader::Open(short_string);
  ASSERT_THAT(rs, IsOk());
  EXPECT_THAT(rs->ReadString(), StatusIs(absl::StatusCode::kInvalidArgument));

  ByteWriter empty;
  const std::string just_checksum = empty.Finish();
  ASSERT_EQ(just_checksum.size(), 8u);
  absl::StatusOr<ByteReader> e = ByteReader::Open(just_checksum);
  ASSERT_THAT(e, IsOk());
  EXPECT_EQ(e->remaining(), 0u);
  EXPECT_THAT(e->ExpectEnd(), IsOk());
  EXPECT_THAT(e->ReadU32(), StatusIs(absl::StatusCode::kInvalidArgument));
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

// binary_codec.h: Finish "appends the checksum and returns the blob. The writer is left empty",
// so a second blob from the same writer holds only what was written after the first Finish:
// u32 2 and its checksum, 4 + 8 bytes.
TEST(BinaryCodecTest, FinishLeavesTheWriterEmpty) {
  ByteWriter w;
  w.WriteU32(1);
  const std::string first = w.Finish();
  EXPECT_EQ(first.size(), 12u);
  w.WriteU32(2);
  const std::string second = w.Finish();
  ASSERT_EQ(second.size(), 12u);
  absl::StatusOr<ByteReader> r = ByteReader::Open(second);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(*r->ReadU32(), 2u);
  EXPECT_THAT(r->ExpectEnd(), IsOk());
  EXPECT_EQ(w.Finish().size(), 8u);
}

// binary_codec.h: the header's flag tells "whether parameters follow": WriteModelHeader writes
// 0 for a model without parameters (the header spelled out field by field: "VRTY", version 1,
// method, flag 0), and ReadModelHeader reads that back as false.
TEST(BinaryCodecTest, AModelHeaderWithoutParametersHasFlagZero) {
  ByteWriter expected;
  expected.WriteString("VRTY");
  expected.WriteU32(1);
  expected.WriteString("mv");
  expected.WriteU32(0);
  ByteWriter w;
  WriteModelHeader(w, "mv", false);
  const std::string blob = w.Finish();
  EXPECT_EQ(blob, expected.Finish());
  absl::StatusOr<ByteReader> r = ByteReader::Open(blob);
  ASSERT_THAT(r, IsOk());
  absl::StatusOr<bool> has_parameters = ReadModelHeader(*r, "mv");
  ASSERT_THAT(has_parameters, IsOk());
  EXPECT_FALSE(*has_parameters);
  EXPECT_THAT(r->ExpectEnd(), IsOk());
}

}  // namespace
}  // namespace verity::models

#include "server/state/version_outputs.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace verity::server {
namespace {

TEST(VersionOutputsTest, PosteriorsRoundTripAsFloat32) {
  const std::vector<double> p = {0.25, 0.75, 1.0, 0.0, 0.5, 0.5};
  auto decoded = DecodePosteriors(EncodePosteriors(2, p));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->num_items, 3);
  EXPECT_EQ(decoded->num_classes, 2);
  ASSERT_EQ(decoded->probabilities.size(), 6u);
  for (size_t i = 0; i < p.size(); ++i) EXPECT_FLOAT_EQ(decoded->probabilities[i], p[i]);
}

TEST(VersionOutputsTest, ProfilesKeepEachAnnotatorsDiagonalInKFloatsPerAnnotator) {
  const std::vector<uint32_t> counts = {3, 0};
  const std::vector<double> diagonals = {0.9, 0.8, 0.5, 0.25};
  const std::string blob = EncodeProfiles(2, counts, diagonals);
  // Magic, two sizes, then per annotator a count and K floats: O(annotators x K).
  EXPECT_EQ(blob.size(), 12u + 2 * (4 + 2 * 4));
  auto decoded = DecodeProfiles(blob);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->num_annotators, 2);
  EXPECT_EQ(decoded->num_labels[0], 3u);
  EXPECT_EQ(decoded->diagonals, (std::vector<float>{0.9f, 0.8f, 0.5f, 0.25f}));
}

// version_outputs.h: "VPO1" u32 num_items u32 K, then num_items*K float32, for any K; each
// probability comes back as the float32 nearest it.
TEST(VersionOutputsTest, PosteriorsOfThreeClassesRoundTripAsFloat32) {
  const std::vector<double> p = {0.123456, 0.654321, 0.222223, 1.0 / 3, 1.0 / 3, 1.0 / 3};
  auto decoded = DecodePosteriors(EncodePosteriors(3, p));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->num_items, 2);
  EXPECT_EQ(decoded->num_classes, 3);
  ASSERT_EQ(decoded->probabilities.size(), p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_EQ(decoded->probabilities[i], static_cast<float>(p[i])) << i;
  }
}

// version_outputs.h: per annotator its own u32 num_labels, then its K diagonal floats.
TEST(VersionOutputsTest, ProfilesKeepEveryAnnotatorsOwnLabelCount) {
  const std::vector<uint32_t> counts = {3, 0, 41};
  const std::vector<double> diagonals = {0.9, 0.8, 0.5, 0.25, 0.7, 0.6};
  auto decoded = DecodeProfiles(EncodeProfiles(2, counts, diagonals));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->num_annotators, 3);
  EXPECT_EQ(decoded->num_labels, counts);
  EXPECT_EQ(decoded->diagonals, (std::vector<float>{0.9f, 0.8f, 0.5f, 0.25f, 0.7f, 0.6f}));
}

TEST(VersionOutputsTest, ProfilesOfEarlierBuildsDecodeToTheirDiagonals) {
  // VAP1, as written before: u32 annotators, u32 K, then per annotator u32 count and the full
  // K x K matrix (row = true class) as float32, little-endian.
  std::string blob = "VAP1";
  auto put_u32 = [&blob](uint32_t v) {
    for (int i = 0; i < 4; ++i) blob.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  auto put_f32 = [&](float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    put_u32(bits);
  };
  put_u32(1);
  put_u32(2);
  put_u32(7);
  for (float f : {0.9f, 0.1f, 0.3f, 0.7f}) put_f32(f);
  auto decoded = DecodeProfiles(blob);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->num_labels[0], 7u);
  EXPECT_EQ(decoded->diagonals, (std::vector<float>{0.9f, 0.7f}));
}

// version_outputs.h: INVALID_ARGUMENT on a wrong size, which includes bytes after the last
// field (a blob is exactly its header plus its declared contents).
TEST(VersionOutputsTest, TrailingBytesAreInvalidArgument) {
  std::string posteriors = EncodePosteriors(2, std::vector<double>{0.5, 0.5});
  ASSERT_TRUE(DecodePosteriors(posteriors).ok());
  EXPECT_EQ(DecodePosteriors(posteriors + "x").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodePosteriors(posteriors + std::string(4, '\0')).status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<uint32_t> counts = {3};
  const std::vector<double> diagonals = {0.9, 0.8};
  std::string profiles = EncodeProfiles(2, counts, diagonals);
  ASSERT_TRUE(DecodeProfiles(profiles).ok());
  EXPECT_EQ(DecodeProfiles(profiles + std::string(4, '\0')).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeProfiles(profiles + std::string(12, '\0')).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// version_outputs.h: a VAP1 blob holds K*K float32 per annotator. K = 65536 declares 2^32
// cells (16 GiB) per annotator, which the 4 bytes after the header cannot hold: INVALID_ARGUMENT
// (K*K must not wrap around in 32 bits and make the blob look like one without cells).
TEST(VersionOutputsTest, AnEarlierProfilesBlobWhoseMatrixSizeOverflowsIsInvalidArgument) {
  std::string blob = "VAP1";
  auto put_u32 = [&blob](uint32_t v) {
    for (int i = 0; i < 4; ++i) blob.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  put_u32(1);      // annotators
  put_u32(65536);  // K
  put_u32(7);      // the annotator's label count, then no matrix at all
  EXPECT_EQ(DecodeProfiles(blob).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(VersionOutputsTest, CorruptBlobsAreInvalidArgument) {
  std::string blob = EncodePosteriors(2, std::vector<double>{0.5, 0.5});
  EXPECT_EQ(DecodePosteriors(blob.substr(0, blob.size() - 1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodePosteriors("XXXX").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeProfiles(blob).status().code(), absl::StatusCode::kInvalidArgument);
}

// version_outputs.h: "INVALID_ARGUMENT on a wrong magic": a blob of the right size whose
// first four bytes are not "VPO1" (posteriors) or "VAP1"/"VAP2" (profiles) is refused.
TEST(VersionOutputsTest, AWrongMagicIsInvalidArgumentEvenAtTheRightSize) {
  std::string posteriors = EncodePosteriors(2, std::vector<double>{0.25, 0.75});
  ASSERT_TRUE(DecodePosteriors(posteriors).ok());
  posteriors.replace(0, 4, "VPO2");
  EXPECT_EQ(DecodePosteriors(posteriors).status().code(), absl::StatusCode::kInvalidArgument);
  std::string profiles =
      EncodeProfiles(2, std::vector<uint32_t>{3}, std::vector<double>{0.9, 0.8});
  ASSERT_TRUE(DecodeProfiles(profiles).ok());
  profiles.replace(0, 4, "VAP3");
  EXPECT_EQ(DecodeProfiles(profiles).status().code(), absl::StatusCode::kInvalidArgument);
}

// version_outputs.h: "VAP2" u32 num_annotators u32 K: both sizes come back as written, also
// when they differ (three annotators of a four-class project).
TEST(VersionOutputsTest, ProfilesKeepTheirNumberOfClassesApartFromTheirAnnotators) {
  const std::vector<uint32_t> counts = {1, 2, 3};
  std::vector<double> diagonals;
  for (int i = 0; i < 12; ++i) diagonals.push_back(0.5 + i / 100.0);
  auto decoded = DecodeProfiles(EncodeProfiles(4, counts, diagonals));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->num_annotators, 3);
  EXPECT_EQ(decoded->num_classes, 4);
  ASSERT_EQ(decoded->diagonals.size(), 12u);
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_EQ(decoded->diagonals[i], static_cast<float>(diagonals[i])) << i;
  }
}

}  // namespace
}  // namespace verity::server

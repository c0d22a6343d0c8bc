#include "server/state/version_outputs.h"

#include <gtest/gtest.h>

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

TEST(VersionOutputsTest, ProfilesRoundTrip) {
  const std::vector<uint32_t> counts = {3, 0};
  const std::vector<double> confusions = {0.9, 0.1, 0.2, 0.8, 0.5, 0.5, 0.5, 0.5};
  auto decoded = DecodeProfiles(EncodeProfiles(2, counts, confusions));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->num_annotators, 2);
  EXPECT_EQ(decoded->num_labels[0], 3u);
  EXPECT_FLOAT_EQ(decoded->confusions[2], 0.2f);
  EXPECT_FLOAT_EQ(decoded->confusions[7], 0.5f);
}

TEST(VersionOutputsTest, CorruptBlobsAreInvalidArgument) {
  std::string blob = EncodePosteriors(2, std::vector<double>{0.5, 0.5});
  EXPECT_EQ(DecodePosteriors(blob.substr(0, blob.size() - 1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodePosteriors("XXXX").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeProfiles(blob).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace verity::server

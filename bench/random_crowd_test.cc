#include "bench/random_crowd.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/status_matchers.h"
#include "models/csv_dataset.h"

namespace verity::bench {
namespace {

using ::testing::HasSubstr;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;

RandomCrowdSpec SmallSpec() {
  RandomCrowdSpec spec;
  spec.num_items = 2000;
  spec.labels_per_item = 4;
  spec.num_annotators = 30;
  spec.num_classes = 3;
  spec.seed = 5;
  return spec;
}

TEST(GenerateRandomCrowdTest, EachItemGetsDistinctAnnotatorsInItemOrder) {
  absl::StatusOr<RandomCrowd> crowd = GenerateRandomCrowd(SmallSpec());
  ASSERT_THAT(crowd, IsOk());
  ASSERT_EQ(crowd->annotations.size(), 2000u * 4);
  ASSERT_EQ(crowd->truth.size(), 2000u);
  for (int32_t i = 0; i < 2000; ++i) {
    std::vector<bool> seen(30, false);
    for (int32_t j = 0; j < 4; ++j) {
      const models::Annotation& a = crowd->annotations[i * 4 + j];
      EXPECT_EQ(a.item, i);
      ASSERT_GE(a.annotator, 0);
      ASSERT_LT(a.annotator, 30);
      EXPECT_FALSE(seen[a.annotator]) << "item " << i;
      seen[a.annotator] = true;
      EXPECT_GE(a.label, 0);
      EXPECT_LT(a.label, 3);
    }
  }
}

TEST(GenerateRandomCrowdTest, ConfusionRowsHaveTheAnnotatorsAccuracy) {
  absl::StatusOr<RandomCrowd> crowd = GenerateRandomCrowd(SmallSpec());
  ASSERT_THAT(crowd, IsOk());
  ASSERT_EQ(crowd->confusions.size(), 30u);
  for (const std::vector<double>& c : crowd->confusions) {
    ASSERT_EQ(c.size(), 9u);
    const double accuracy = c[0];
    EXPECT_GE(accuracy, 0.5);
    EXPECT_LE(accuracy, 0.95);
    for (int row = 0; row < 3; ++row) {
      EXPECT_DOUBLE_EQ(c[row * 3 + row], accuracy);
      double sum = 0;
      for (int col = 0; col < 3; ++col) sum += c[row * 3 + col];
      EXPECT_NEAR(sum, 1.0, 1e-12);
    }
  }
}

TEST(GenerateRandomCrowdTest, LabelsAgreeWithTruthAtTheMeanAccuracy) {
  // Mean accuracy over annotators ~ U[0.5, 0.95] is 0.725; 8000 labels.
  absl::StatusOr<RandomCrowd> crowd = GenerateRandomCrowd(SmallSpec());
  ASSERT_THAT(crowd, IsOk());
  double expected = 0;
  int64_t correct = 0;
  for (const models::Annotation& a : crowd->annotations) {
    correct += a.label == crowd->truth[a.item];
    expected += crowd->confusions[a.annotator][0];
  }
  const double n = static_cast<double>(crowd->annotations.size());
  // Binomial standard deviation ~ sqrt(0.2 / 8000) = 0.005.
  EXPECT_NEAR(correct / n, expected / n, 0.02);
}

TEST(GenerateRandomCrowdTest, ClassPriorIsFollowed) {
  RandomCrowdSpec spec = SmallSpec();
  spec.class_prior = {8, 2, 0};  // normalised to 0.8, 0.2, 0
  absl::StatusOr<RandomCrowd> crowd = GenerateRandomCrowd(spec);
  ASSERT_THAT(crowd, IsOk());
  std::vector<int> count(3, 0);
  for (int32_t t : crowd->truth) ++count[t];
  EXPECT_NEAR(count[0] / 2000.0, 0.8, 0.03);
  EXPECT_EQ(count[2], 0);
}

TEST(GenerateRandomCrowdTest, SameSeedSameCrowd) {
  absl::StatusOr<RandomCrowd> a = GenerateRandomCrowd(SmallSpec());
  absl::StatusOr<RandomCrowd> b = GenerateRandomCrowd(SmallSpec());
  RandomCrowdSpec other = SmallSpec();
  other.seed = 6;
  absl::StatusOr<RandomCrowd> c = GenerateRandomCrowd(other);
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ(a->truth, b->truth);
  EXPECT_EQ(a->confusions, b->confusions);
  EXPECT_NE(a->truth, c->truth);
}

TEST(GenerateRandomCrowdTest, RejectsOutOfRangeSpecsNamingTheField) {
  RandomCrowdSpec spec = SmallSpec();
  spec.labels_per_item = 31;
  EXPECT_THAT(GenerateRandomCrowd(spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("labels_per_item")));
  spec = SmallSpec();
  spec.class_prior = {1, 1};
  EXPECT_THAT(GenerateRandomCrowd(spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("class_prior")));
  spec = SmallSpec();
  spec.min_accuracy = 0.9;
  spec.max_accuracy = 0.8;
  EXPECT_THAT(GenerateRandomCrowd(spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("min_accuracy")));
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(WriteCrowdDatasetTest, WritesTheSharedDatasetsFormat) {
  RandomCrowdSpec spec;
  spec.num_items = 2;
  spec.labels_per_item = 2;
  spec.num_annotators = 2;
  spec.num_classes = 2;
  absl::StatusOr<RandomCrowd> crowd = GenerateRandomCrowd(spec);
  ASSERT_THAT(crowd, IsOk());
  const std::string dir =
      std::string(std::getenv("TEST_TMPDIR")) + "/crowd";
  ASSERT_THAT(WriteCrowdDataset(*crowd, dir, "# test\n"), IsOk());
  EXPECT_EQ(ReadAll(dir + "/classes.txt"), "c0\nc1\n");
  std::string labels = "item,annotator,label\n";
  for (const models::Annotation& a : crowd->annotations) {
    labels += "i" + std::to_string(a.item) + ",w" +
              std::to_string(a.annotator) + ",c" + std::to_string(a.label) +
              "\n";
  }
  EXPECT_EQ(ReadAll(dir + "/labels.csv"), labels);
  EXPECT_EQ(ReadAll(dir + "/gold.csv"),
            "item,label\ni0,c" + std::to_string(crowd->truth[0]) + "\ni1,c" +
                std::to_string(crowd->truth[1]) + "\n");
  EXPECT_EQ(ReadAll(dir + "/SOURCE.md"), "# test\n");
}

TEST(WriteCrowdDatasetTest, ReadsBackAsTheSameCrowd) {
  absl::StatusOr<RandomCrowd> crowd = GenerateRandomCrowd(SmallSpec());
  ASSERT_THAT(crowd, IsOk());
  const std::string dir =
      std::string(std::getenv("TEST_TMPDIR")) + "/round_trip";
  ASSERT_THAT(WriteCrowdDataset(*crowd, dir, ""), IsOk());
  absl::StatusOr<models::CsvDataset> csv = models::ReadCsvDataset(dir);
  ASSERT_THAT(csv, IsOk());
  ASSERT_EQ(csv->num_classes(), 3);
  ASSERT_EQ(csv->annotations.size(), crowd->annotations.size());
  // Ids are numbered in order of first appearance, so map them back by name.
  for (size_t j = 0; j < crowd->annotations.size(); ++j) {
    const models::Annotation& want = crowd->annotations[j];
    const models::Annotation& got = csv->annotations[j];
    EXPECT_EQ(csv->item_ids[got.item], "i" + std::to_string(want.item));
    EXPECT_EQ(csv->annotator_ids[got.annotator],
              "w" + std::to_string(want.annotator));
    EXPECT_EQ(got.label, want.label);
  }
  for (int32_t i = 0; i < crowd->num_items; ++i) {
    EXPECT_EQ(csv->gold[csv->item_index.at("i" + std::to_string(i))],
              crowd->truth[i]);
  }
}

TEST(WriteCrowdDatasetTest, UnwritableDirectoryIsInternalNamingThePath) {
  absl::StatusOr<RandomCrowd> crowd = GenerateRandomCrowd(SmallSpec());
  ASSERT_THAT(crowd, IsOk());
  EXPECT_THAT(WriteCrowdDataset(*crowd, "/proc/no/such/dir", ""),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("/proc/no/such/dir")));
}

}  // namespace
}  // namespace verity::bench

namespace verity::bench {
namespace {

TEST(ParseCrowdSizeTest, NamedAndExplicitShapes) {
  std::optional<CrowdSize> five_m = ParseCrowdSize("5m");
  ASSERT_TRUE(five_m.has_value());
  EXPECT_EQ(five_m->items, 1000000);
  EXPECT_EQ(five_m->labels_per_item, 5);
  EXPECT_EQ(five_m->annotators, 3000);
  std::optional<CrowdSize> custom = ParseCrowdSize("200000x7x1000");
  ASSERT_TRUE(custom.has_value());
  EXPECT_EQ(custom->name, "200000x7x1000");
  EXPECT_EQ(custom->items, 200000);
  EXPECT_EQ(custom->labels_per_item, 7);
  EXPECT_EQ(custom->annotators, 1000);
}

TEST(ParseCrowdSizeTest, RejectsMalformedAndOutOfRange) {
  for (const char* bad : {"", "5M", "10x5", "10x5x3", "0x5x300", "10x0x300", "axbxc", "1x2x3x4"}) {
    EXPECT_FALSE(ParseCrowdSize(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace verity::bench

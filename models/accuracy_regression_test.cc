// Accuracy floors of Dawid-Skene on real datasets (shared/datasets, found by
// FindDatasetsDirectory), so that a change to the EM code, its defaults or
// its initialisation that costs accuracy fails here rather than in a
// benchmark nobody reruns.
//
// Each floor is the accuracy measured with the default TruthModelOptions
// (docs/EVALUATION.md, `bazel run //models:eval`) minus 0.005: a change
// that moves a few items either way passes, a real regression does not. If a
// deliberate change raises or lowers accuracy, rerun the eval tool and move
// the floors with the numbers in docs/EVALUATION.md.

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/status_matchers.h"
#include "models/annotation_matrix.h"
#include "models/csv_dataset.h"
#include "models/evaluation.h"
#include "models/testing/dataset_path.h"
#include "models/truth_model.h"

namespace verity::models {
namespace {

using ::verity::testing::IsOk;

struct AccuracyFloor {
  std::string dataset;
  int64_t scored_items;
  double measured;  // ds accuracy with default options when the floor was set
  double floor;
};

void PrintTo(const AccuracyFloor& f, std::ostream* os) { *os << f.dataset; }

class DawidSkeneAccuracyFloorTest
    : public ::testing::TestWithParam<AccuracyFloor> {};

TEST_P(DawidSkeneAccuracyFloorTest, StaysAboveTheMeasuredAccuracy) {
  const AccuracyFloor& expected = GetParam();
  absl::StatusOr<std::string> root = testing::FindDatasetsDirectory();
  ASSERT_THAT(root, IsOk());
  absl::StatusOr<CsvDataset> csv =
      ReadCsvDataset(*root + "/" + expected.dataset);
  ASSERT_THAT(csv, IsOk());
  absl::StatusOr<AnnotationMatrix> matrix = csv->ToMatrix();
  ASSERT_THAT(matrix, IsOk());

  absl::StatusOr<MethodEvaluation> e =
      FitAndScore("ds", TruthModelOptions(), *matrix, csv->gold);
  ASSERT_THAT(e, IsOk());
  RecordProperty("accuracy", std::to_string(e->scores.accuracy));
  EXPECT_EQ(e->scores.items, expected.scored_items);
  EXPECT_GE(e->scores.accuracy, expected.floor)
      << "measured " << expected.measured << " when the floor was set";
}

// Measured with: bazel run //models:eval -- --datasets ../shared/datasets
//   --methods=ds bluebirds possent product rte
INSTANTIATE_TEST_SUITE_P(
    SharedDatasets, DawidSkeneAccuracyFloorTest,
    ::testing::Values(AccuracyFloor{"bluebirds", 108, 0.8981, 0.8931},
                      AccuracyFloor{"possent", 1000, 0.9590, 0.9540},
                      AccuracyFloor{"product", 8315, 0.9381, 0.9331},
                      AccuracyFloor{"rte", 800, 0.9263, 0.9213}),
    [](const ::testing::TestParamInfo<AccuracyFloor>& info) {
      return info.param.dataset;
    });

// evaluation.h: FitAndScore creates the method with CreateTruthModel, which
// serves calibrated posteriors with options.calibration "auto" (the default)
// and the inner model's own with "none" (truth_model_factory.h).
// docs/EVALUATION.md, "ds without gold (the default method, label-free
// map)": on bluebirds ds scores ECE 0.1018 and log-loss 1.4966 raw, 0.0567
// and 0.3505 calibrated, at the same accuracy 0.8981.
TEST(FitAndScoreCalibrationTest, DefaultOptionsScoreTheCalibratedPosteriors) {
  absl::StatusOr<std::string> root = testing::FindDatasetsDirectory();
  ASSERT_THAT(root, IsOk());
  absl::StatusOr<CsvDataset> csv = ReadCsvDataset(*root + "/bluebirds");
  ASSERT_THAT(csv, IsOk());
  absl::StatusOr<AnnotationMatrix> matrix = csv->ToMatrix();
  ASSERT_THAT(matrix, IsOk());

  absl::StatusOr<MethodEvaluation> calibrated =
      FitAndScore("ds", TruthModelOptions(), *matrix, csv->gold);
  TruthModelOptions none;
  none.calibration = "none";
  absl::StatusOr<MethodEvaluation> raw = FitAndScore("ds", none, *matrix, csv->gold);
  ASSERT_THAT(calibrated, IsOk());
  ASSERT_THAT(raw, IsOk());
  EXPECT_EQ(calibrated->scores.items, 108);
  EXPECT_NEAR(raw->scores.accuracy, 0.8981, 1e-4);
  EXPECT_DOUBLE_EQ(calibrated->scores.accuracy, raw->scores.accuracy);
  EXPECT_NEAR(raw->scores.ece, 0.1018, 0.005);
  EXPECT_NEAR(raw->scores.log_loss, 1.4966, 0.02);
  EXPECT_NEAR(calibrated->scores.ece, 0.0567, 0.005);
  EXPECT_NEAR(calibrated->scores.log_loss, 0.3505, 0.02);
}

}  // namespace
}  // namespace verity::models

#include "models/truth_model_factory.h"

#include <memory>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/status_matchers.h"
#include "models/calibrated_truth_model.h"

namespace verity::models {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;

TEST(TruthModelFactoryTest, CreatesEachKnownMethod) {
  EXPECT_THAT(KnownTruthModelMethods(),
              ElementsAre("mv", "ds", "one_coin", "glad", "lia", "crowdlayer",
                          "trace_reg", "conal", "cmm", "wawa",
                          "zero_based_skill", "kos", "mace", "bwa", "ibcc", "ebcc", "mmsr",
                          "auto"));
  for (std::string_view method : KnownTruthModelMethods()) {
    absl::StatusOr<std::unique_ptr<TruthModel>> model =
        CreateTruthModel(method, 4, {});
    if (method == "kos") {
      // Karger-Oh-Shah is for binary tasks only.
      EXPECT_THAT(model, StatusIs(absl::StatusCode::kInvalidArgument));
      model = CreateTruthModel(method, 2, {});
      ASSERT_THAT(model, IsOk());
      EXPECT_EQ((*model)->num_classes(), 2);
      continue;
    }
    ASSERT_THAT(model, IsOk());
    EXPECT_EQ((*model)->method(), method);
    EXPECT_EQ((*model)->num_classes(), 4);
    EXPECT_FALSE((*model)->has_parameters());
  }
}

TEST(TruthModelFactoryTest, UnknownMethodIsInvalidArgumentListingKnownOnes) {
  absl::StatusOr<std::unique_ptr<TruthModel>> model =
      CreateTruthModel("zencrowd", 2, {});
  EXPECT_THAT(model, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(model.status().message(), HasSubstr("\"zencrowd\""));
  EXPECT_THAT(model.status().message(), HasSubstr("mv, ds, one_coin, glad"));
}

TEST(TruthModelFactoryTest, RejectsBadClassCountAndOptions) {
  EXPECT_THAT(CreateTruthModel("ds", 1, {}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  TruthModelOptions options;
  options.num_threads = 0;
  absl::StatusOr<std::unique_ptr<TruthModel>> model =
      CreateTruthModel("mv", 2, options);
  EXPECT_THAT(model, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(model.status().message(), HasSubstr("num_threads"));
}

// truth_model_factory.h: CreateTruthModel wraps the model in a
// CalibratedTruthModel of the same method that fits its map with
// options.calibration "auto" (the default) and not with "none";
// CreateUncalibratedTruthModel never wraps it.
TEST(TruthModelFactoryTest, CalibrationOptionSelectsTheWrapper) {
  absl::StatusOr<std::unique_ptr<TruthModel>> model = CreateTruthModel("ds", 3, {});
  ASSERT_THAT(model, IsOk());
  const auto* calibrated = dynamic_cast<const CalibratedTruthModel*>(model->get());
  ASSERT_NE(calibrated, nullptr);
  EXPECT_TRUE(calibrated->fits_map());
  EXPECT_EQ(calibrated->inner().method(), "ds");

  TruthModelOptions none;
  none.calibration = "none";
  model = CreateTruthModel("ds", 3, none);
  ASSERT_THAT(model, IsOk());
  calibrated = dynamic_cast<const CalibratedTruthModel*>(model->get());
  ASSERT_NE(calibrated, nullptr);
  EXPECT_FALSE(calibrated->fits_map());

  model = CreateUncalibratedTruthModel("ds", 3, {});
  ASSERT_THAT(model, IsOk());
  EXPECT_EQ(dynamic_cast<const CalibratedTruthModel*>(model->get()), nullptr);
  EXPECT_EQ((*model)->method(), "ds");
}

}  // namespace
}  // namespace verity::models

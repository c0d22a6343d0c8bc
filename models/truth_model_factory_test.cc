#include "models/truth_model_factory.h"

#include <cmath>
#include <memory>
#include <set>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/annotation_matrix.h"
#include "models/auto_truth_model.h"
#include "models/calibrated_truth_model.h"

namespace verity::models {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;

// truth_model.h, FitReport::log_likelihood: the methods that define no likelihood report zero;
// the others a negative log-likelihood of labelled items. A gold item without labels adds
// log p(gold class) < 0 in mv, ds, one_coin and glad (and auto, which serves ds here), nothing
// in the other methods, so data with gold but no labels gives zero there.
TEST(TruthModelFactoryTest, FitReportLogLikelihoodFollowsItsContract) {
  const std::set<std::string_view> no_likelihood = {"wawa", "zero_based_skill", "kos", "bwa",
                                                    "mmsr"};
  const std::set<std::string_view> counts_unlabelled_gold = {"mv", "ds", "one_coin", "glad",
                                                             "auto"};
  const AnnotationMatrix labelled = *AnnotationMatrix::Build(
      3, 3, 2, {{0, 0, 0}, {0, 1, 0}, {0, 2, 0}, {1, 0, 1}, {1, 1, 1}, {1, 2, 0}});
  const AnnotationMatrix unlabelled = *AnnotationMatrix::Build(3, 3, 2, {});
  for (std::string_view method : KnownTruthModelMethods()) {
    SCOPED_TRACE(method);
    auto fit = [&](const AnnotationMatrix& data, std::vector<int32_t> gold) {
      absl::StatusOr<std::unique_ptr<TruthModel>> model = CreateTruthModel(method, 2, {});
      EXPECT_THAT(model, IsOk());
      absl::StatusOr<FitReport> report = (*model)->Fit(data, gold, false);
      EXPECT_THAT(report, IsOk());
      return report.ok() ? report->log_likelihood : std::nan("");
    };
    const double with_labels = fit(labelled, {});
    const double gold_only = fit(unlabelled, {-1, -1, 1});
    if (no_likelihood.count(method) > 0) {
      EXPECT_EQ(with_labels, 0.0);
      EXPECT_EQ(gold_only, 0.0);
      continue;
    }
    EXPECT_LT(with_labels, 0.0);
    if (counts_unlabelled_gold.count(method) > 0) {
      EXPECT_LT(gold_only, 0.0);
    } else {
      EXPECT_EQ(gold_only, 0.0);
    }
  }
}

TEST(TruthModelFactoryTest, CreatesEachKnownMethod) {
  EXPECT_THAT(KnownTruthModelMethods(),
              ElementsAre("mv", "ds", "one_coin", "glad", "lia", "crowdlayer", "trace_reg", "conal",
                          "cmm", "wawa", "zero_based_skill", "kos", "mace", "bwa", "ibcc", "ebcc",
                          "mmsr", "auto"));
  for (std::string_view method : KnownTruthModelMethods()) {
    absl::StatusOr<std::unique_ptr<TruthModel>> model = CreateTruthModel(method, 4, {});
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

// truth_model_factory.h: "auto" is an AutoTruthModel inside the one calibration wrapper, and
// its candidates are created without calibration (auto_truth_model.h, CandidateFactory), so
// what it serves is calibrated once: neither its fallback ds before the first Fit nor the
// method it chose after one is itself a CalibratedTruthModel.
TEST(TruthModelFactoryTest, AutoServesUncalibratedCandidatesInsideOneWrapper) {
  absl::StatusOr<std::unique_ptr<TruthModel>> model = CreateTruthModel("auto", 2, {});
  ASSERT_THAT(model, IsOk());
  const auto* calibrated = dynamic_cast<const CalibratedTruthModel*>(model->get());
  ASSERT_NE(calibrated, nullptr);
  const auto* automatic = dynamic_cast<const AutoTruthModel*>(&calibrated->inner());
  ASSERT_NE(automatic, nullptr);
  EXPECT_EQ(automatic->served().method(), "ds");
  EXPECT_EQ(dynamic_cast<const CalibratedTruthModel*>(&automatic->served()), nullptr);

  const AnnotationMatrix data = *AnnotationMatrix::Build(
      3, 3, 2, {{0, 0, 0}, {0, 1, 0}, {0, 2, 0}, {1, 0, 1}, {1, 1, 1}, {1, 2, 0}});
  ASSERT_THAT((*model)->Fit(data, {}, false), IsOk());
  EXPECT_FALSE(automatic->choice().method.empty());
  EXPECT_EQ(automatic->served().method(), automatic->choice().method);
  EXPECT_EQ(dynamic_cast<const CalibratedTruthModel*>(&automatic->served()), nullptr);
}

}  // namespace
}  // namespace verity::models

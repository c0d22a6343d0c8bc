#include "models/truth_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/annotation_matrix.h"

namespace verity::models {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;

// A three-class model that overrides only what TruthModel requires, so that the defaults of
// truth_model.h (PredictLabel, AnnotatorConfusionDiagonal) and AllPosteriors are what is
// exercised. Item i's posterior without gold puts 0.5 on class (i + number of labels) % 3
// (i = 0 for a negative id) and 0.3, 0.2 on the next two; gold gives the one-hot row. Its
// annotators' confusion differs from their confusion on an item (ItemAnnotatorConfusion), and
// no matrix is symmetric, so that a transposed or wrong matrix shows.
class ThreeClassModel final : public TruthModel {
 public:
  std::string_view method() const override { return "three_class"; }
  int32_t num_classes() const override { return 3; }
  bool has_parameters() const override { return true; }
  std::unique_ptr<TruthModel> Clone() const override { return std::make_unique<ThreeClassModel>(); }
  absl::StatusOr<FitReport> Fit(const AnnotationMatrix&, absl::Span<const int32_t>, bool) override {
    return FitReport{};
  }
  // The item-free posterior: that of item 0.
  void ItemPosterior(absl::Span<const AnnotationMatrix::Entry> labels, int32_t gold_label,
                     absl::Span<double> out) const override {
    ItemPosteriorForItem(0, labels, gold_label, out);
  }
  void ItemPosteriorForItem(int32_t item, absl::Span<const AnnotationMatrix::Entry> labels,
                            int32_t gold_label, absl::Span<double> out) const override {
    if (gold_label >= 0) {
      for (int32_t c = 0; c < 3; ++c) out[c] = c == gold_label ? 1.0 : 0.0;
      return;
    }
    const int32_t top = (std::max(item, 0) + static_cast<int32_t>(labels.size())) % 3;
    out[top] = 0.5;
    out[(top + 1) % 3] = 0.3;
    out[(top + 2) % 3] = 0.2;
  }
  std::vector<double> AnnotatorConfusion(int32_t) const override {
    return {0.6, 0.3, 0.1, 0.2, 0.5, 0.3, 0.1, 0.2, 0.7};
  }
  std::vector<double> ItemAnnotatorConfusion(int32_t, int32_t) const override {
    return {0.7, 0.2, 0.1, 0.1, 0.8, 0.1, 0.3, 0.3, 0.4};
  }
  bool ConfusionsDependOnItem() const override { return true; }
  std::string Serialize() const override { return "three_class"; }
  absl::Status Restore(std::string_view) override { return absl::OkStatus(); }
};

// truth_model.h, PredictLabel: sum_k p(k | labels) ItemAnnotatorConfusion(item, annotator)[k][.].
// Item 1 with one label: top class (1 + 1) % 3 = 2, posterior (0.3, 0.2, 0.5). Rows of the item
// confusion: (0.7, 0.2, 0.1), (0.1, 0.8, 0.1), (0.3, 0.3, 0.4). Label 0: 0.21 + 0.02 + 0.15 =
// 0.38; label 1: 0.06 + 0.16 + 0.15 = 0.37; label 2: 0.03 + 0.02 + 0.20 = 0.25.
TEST(TruthModelTest, PredictLabelMixesTheItemConfusionRowsByThePosterior) {
  const ThreeClassModel model;
  const std::vector<AnnotationMatrix::Entry> labels = {{4, 0}};
  EXPECT_THAT(
      model.PredictLabel(1, labels, 4),
      ElementsAre(DoubleNear(0.38, 1e-12), DoubleNear(0.37, 1e-12), DoubleNear(0.25, 1e-12)));
}

// truth_model.h, AnnotatorConfusionDiagonal: p(label = k | true class = k) of
// AnnotatorConfusion (not of the item confusion): 0.6, 0.5, 0.7.
TEST(TruthModelTest, TheDefaultConfusionDiagonalIsThatOfTheAnnotatorConfusion) {
  const ThreeClassModel model;
  EXPECT_THAT(model.AnnotatorConfusionDiagonal(2),
              ElementsAre(DoubleNear(0.6, 1e-15), DoubleNear(0.5, 1e-15), DoubleNear(0.7, 1e-15)));
}

// truth_model.h, AllPosteriors: ItemPosteriorForItem of every item with its row index and its
// labels, gold clamped where gold[i] >= 0. Item 0 has no label (top 0), item 1 two labels (top
// (1 + 2) % 3 = 0), item 2 one label and gold 1, item 3 one label (top (3 + 1) % 3 = 1).
TEST(TruthModelTest, AllPosteriorsScoresEveryItemByItsRowWithGoldClamped) {
  absl::StatusOr<AnnotationMatrix> data =
      AnnotationMatrix::Build(4, 2, 3, {{1, 0, 2}, {1, 1, 0}, {2, 0, 2}, {3, 1, 1}});
  ASSERT_THAT(data.status(), IsOk());
  const ThreeClassModel model;
  EXPECT_THAT(AllPosteriors(model, *data, {-1, -1, 1, -1}),
              ElementsAre(0.5, 0.3, 0.2, 0.5, 0.3, 0.2, 0.0, 1.0, 0.0, 0.2, 0.5, 0.3));
  // Without gold, item 2 (one label) has top (2 + 1) % 3 = 0.
  const std::vector<double> no_gold = AllPosteriors(model, *data, {});
  EXPECT_THAT(std::vector<double>(no_gold.begin() + 6, no_gold.begin() + 9),
              ElementsAre(0.5, 0.3, 0.2));
}

// truth_model.h, TruthModelOptions: every field's documented range, refused outside it with
// INVALID_ARGUMENT naming the field (ValidateTruthModelOptions), including values that are not
// finite, which would turn the fitted parameters into NaN.
TEST(TruthModelOptionsTest, EachOptionOutsideItsRangeIsRefusedByName) {
  const double nan = std::nan("");
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    const char* name;
    std::function<void(TruthModelOptions&)> set;
  };
  const std::vector<Case> refused = {
      {"confusion_smoothing", [&](TruthModelOptions& o) { o.confusion_smoothing = inf; }},
      {"confusion_smoothing", [](TruthModelOptions& o) { o.confusion_smoothing = 0; }},
      {"population_smoothing", [&](TruthModelOptions& o) { o.population_smoothing = inf; }},
      {"population_smoothing", [&](TruthModelOptions& o) { o.population_smoothing = nan; }},
      {"prior_smoothing", [](TruthModelOptions& o) { o.prior_smoothing = 0; }},
      {"prior_smoothing", [&](TruthModelOptions& o) { o.prior_smoothing = nan; }},
      {"vote_smoothing", [&](TruthModelOptions& o) { o.vote_smoothing = inf; }},
      {"vote_smoothing", [](TruthModelOptions& o) { o.vote_smoothing = -1; }},
      {"max_iterations", [](TruthModelOptions& o) { o.max_iterations = 0; }},
      {"tolerance", [&](TruthModelOptions& o) { o.tolerance = nan; }},
      {"population_diagonal_prior",
       [&](TruthModelOptions& o) { o.population_diagonal_prior = inf; }},
      {"incremental_refit_max_fraction",
       [&](TruthModelOptions& o) { o.incremental_refit_max_fraction = nan; }},
      {"num_threads", [](TruthModelOptions& o) { o.num_threads = 0; }},
      {"glad_ability_prior_mean", [&](TruthModelOptions& o) { o.glad_ability_prior_mean = inf; }},
      {"glad_ability_prior_stddev",
       [&](TruthModelOptions& o) { o.glad_ability_prior_stddev = inf; }},
      {"glad_log_easiness_prior_mean",
       [](TruthModelOptions& o) { o.glad_log_easiness_prior_mean = 20.001; }},
      {"glad_log_easiness_prior_mean",
       [&](TruthModelOptions& o) { o.glad_log_easiness_prior_mean = nan; }},
      {"glad_log_easiness_prior_stddev",
       [&](TruthModelOptions& o) { o.glad_log_easiness_prior_stddev = inf; }},
      {"glad_log_easiness_prior_stddev",
       [](TruthModelOptions& o) { o.glad_log_easiness_prior_stddev = 0; }},
      {"calibration", [](TruthModelOptions& o) { o.calibration = "Auto"; }},
      {"neural.ds_start_fraction", [&](TruthModelOptions& o) { o.neural.ds_start_fraction = nan; }},
      {"neural.feature_dropout", [&](TruthModelOptions& o) { o.neural.feature_dropout = nan; }},
  };
  for (const Case& c : refused) {
    TruthModelOptions options;
    c.set(options);
    const absl::Status status = ValidateTruthModelOptions(options);
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument)) << c.name;
    EXPECT_THAT(status.message(), HasSubstr(c.name));
  }
}

// The bounds of the documented ranges are accepted: population_smoothing 0 (no shrinkage),
// tolerance 0, incremental_refit_max_fraction 0 and 1, max_iterations and num_threads 1,
// glad_log_easiness_prior_mean -20 and 20, calibration "none".
TEST(TruthModelOptionsTest, TheBoundsOfEachRangeAreAccepted) {
  const std::vector<std::function<void(TruthModelOptions&)>> accepted = {
      [](TruthModelOptions& o) { o.population_smoothing = 0; },
      [](TruthModelOptions& o) { o.tolerance = 0; },
      [](TruthModelOptions& o) { o.incremental_refit_max_fraction = 0; },
      [](TruthModelOptions& o) { o.incremental_refit_max_fraction = 1; },
      [](TruthModelOptions& o) { o.max_iterations = 1; },
      [](TruthModelOptions& o) { o.num_threads = 1; },
      [](TruthModelOptions& o) { o.glad_log_easiness_prior_mean = 20; },
      [](TruthModelOptions& o) { o.glad_log_easiness_prior_mean = -20; },
      [](TruthModelOptions& o) { o.calibration = "none"; },
  };
  for (size_t n = 0; n < accepted.size(); ++n) {
    TruthModelOptions options;
    accepted[n](options);
    EXPECT_THAT(ValidateTruthModelOptions(options), IsOk()) << n;
  }
  EXPECT_THAT(ValidateTruthModelOptions(TruthModelOptions()), IsOk());
}

}  // namespace
}  // namespace verity::models

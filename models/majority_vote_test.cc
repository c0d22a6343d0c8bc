#include "models/majority_vote.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/annotation_matrix.h"
#include "common/status_matchers.h"
#include "models/truth_model.h"

namespace verity::models {
namespace {

using ::testing::DoubleEq;
using ::testing::ElementsAre;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;
using Entry = AnnotationMatrix::Entry;

std::unique_ptr<MajorityVoteModel> MakeMv(int32_t num_classes,
                                          const TruthModelOptions& options = {}) {
  absl::StatusOr<std::unique_ptr<MajorityVoteModel>> model =
      MajorityVoteModel::Create(num_classes, options);
  EXPECT_THAT(model, IsOk());
  return model.ok() ? *std::move(model) : nullptr;
}

TEST(MajorityVoteTest, PosteriorIsSmoothedVoteShare) {
  std::unique_ptr<MajorityVoteModel> mv = MakeMv(3);
  std::vector<double> out(3);
  const std::vector<Entry> labels = {{4, 2}, {9, 2}, {1, 0}};
  mv->ItemPosterior(labels, -1, absl::MakeSpan(out));
  const double d = 3 + 3 * 0.01;
  EXPECT_THAT(out, ElementsAre(DoubleEq(1.01 / d), DoubleEq(0.01 / d),
                               DoubleEq(2.01 / d)));
}

TEST(MajorityVoteTest, NoLabelsIsUniformAndGoldIsOneHot) {
  std::unique_ptr<MajorityVoteModel> mv = MakeMv(4);
  std::vector<double> out(4);
  mv->ItemPosterior({}, -1, absl::MakeSpan(out));
  EXPECT_THAT(out, ElementsAre(0.25, 0.25, 0.25, 0.25));
  const std::vector<Entry> labels = {{0, 1}, {1, 1}};
  mv->ItemPosterior(labels, 3, absl::MakeSpan(out));
  EXPECT_THAT(out, ElementsAre(0.0, 0.0, 0.0, 1.0));
}

TEST(MajorityVoteTest, ConfusionEstimatesAgreementWithTheMajority) {
  // Annotators 0 and 1 always agree; annotator 2 always says the opposite.
  std::vector<Annotation> triples;
  for (int32_t i = 0; i < 100; ++i) {
    const int32_t label = i % 2;
    triples.push_back({i, 0, label});
    triples.push_back({i, 1, label});
    triples.push_back({i, 2, 1 - label});
  }
  const AnnotationMatrix m = *AnnotationMatrix::Build(100, 3, 2, triples);
  TruthModelOptions options;
  options.population_smoothing = 0;  // to check the plain formula
  std::unique_ptr<MajorityVoteModel> mv = MakeMv(2, options);
  absl::StatusOr<FitReport> report = mv->Fit(m, {}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->iterations, 1);
  EXPECT_TRUE(report->converged);
  EXPECT_TRUE(std::isfinite(report->log_likelihood));

  // Each item's soft vote puts q = 2.01 / 3.02 on the majority class; class 0
  // rows hold 50 items. Annotator 0: p(0 | 0) = (50 q + a) / (50 + 2 a)
  // with a = confusion_smoothing.
  const double q = 2.01 / 3.02;
  const double a = options.confusion_smoothing;
  const std::vector<double> agree = mv->AnnotatorConfusion(0);
  EXPECT_NEAR(agree[0], (50 * q + a) / (50 + 2 * a), 1e-12);
  EXPECT_NEAR(agree[3], (50 * q + a) / (50 + 2 * a), 1e-12);
  const std::vector<double> disagree = mv->AnnotatorConfusion(2);
  EXPECT_NEAR(disagree[1], (50 * q + a) / (50 + 2 * a), 1e-12);
  EXPECT_LT(disagree[0], 0.5);
}

// majority_vote.h: the confusions are one M-step on the soft-majority-vote posteriors with
// gold clamped. Item 0 is gold class 1 and both annotators label it 0: clamped, their row of
// true class 1 learns "answers 0" (P(0 | 1) > P(1 | 1)); fitted without the gold, where the
// vote puts most of the item in class 0, that row learns it far less.
TEST(MajorityVoteTest, ConfusionsAreLearnedWithGoldClamped) {
  const AnnotationMatrix m = *AnnotationMatrix::Build(1, 2, 2, {{0, 0, 0}, {0, 1, 0}});
  absl::StatusOr<std::unique_ptr<MajorityVoteModel>> model = MajorityVoteModel::Create(2, {});
  ASSERT_TRUE(model.ok());
  ASSERT_TRUE((*model)->Fit(m, std::vector<int32_t>{1}, false).ok());
  const std::vector<double> clamped = (*model)->AnnotatorConfusion(0);
  EXPECT_GT(clamped[1 * 2 + 0], clamped[1 * 2 + 1]);
  ASSERT_TRUE((*model)->Fit(m, {}, false).ok());
  const std::vector<double> voted = (*model)->AnnotatorConfusion(0);
  EXPECT_GT(clamped[1 * 2 + 0], voted[1 * 2 + 0] + 0.1);
}

// majority_vote.h: Fit reports the Dawid-Skene log-likelihood of the data under mv's
// parameters: the sum over items of log sum_k prior_k prod_a C_a[k][label], and for a gold
// item log(prior_g prod_a C_a[g][label]). The data are symmetric under swapping the two
// classes (item 1 mirrors item 0, item 3 mirrors item 2, gold included), so the learnt class
// prior is exactly (1/2, 1/2) and the expected value follows from the served confusions.
TEST(MajorityVoteTest, FitReportsTheDawidSkeneLogLikelihoodOfEveryItemGoldIncluded) {
  const AnnotationMatrix m = *AnnotationMatrix::Build(
      4, 2, 2,
      {{0, 0, 0}, {0, 1, 0}, {1, 0, 1}, {1, 1, 1}, {2, 0, 0}, {2, 1, 1}, {3, 0, 1}, {3, 1, 0}});
  const std::vector<int32_t> gold = {-1, -1, 0, 1};
  std::unique_ptr<MajorityVoteModel> mv = MakeMv(2);
  absl::StatusOr<FitReport> report = mv->Fit(m, gold, false);
  ASSERT_THAT(report, IsOk());
  const std::vector<double> c0 = mv->AnnotatorConfusion(0);
  const std::vector<double> c1 = mv->AnnotatorConfusion(1);
  auto joint = [&](int k, int label0, int label1) {
    return 0.5 * c0[k * 2 + label0] * c1[k * 2 + label1];
  };
  const double expected = std::log(joint(0, 0, 0) + joint(1, 0, 0)) +
                          std::log(joint(0, 1, 1) + joint(1, 1, 1)) +
                          std::log(joint(0, 0, 1)) + std::log(joint(1, 1, 0));
  EXPECT_NEAR(report->log_likelihood, expected, 1e-12);
}

// truth_model.h: AnnotatorConfusionDiagonal is the diagonal of AnnotatorConfusion; before a
// fit mv's confusions are uniform (every cell 1/K, rows summing to 1).
TEST(MajorityVoteTest, ConfusionDiagonalIsTheDiagonalOfTheConfusionBeforeAndAfterAFit) {
  constexpr int32_t k = 3;
  std::unique_ptr<MajorityVoteModel> mv = MakeMv(k);
  auto expect_consistent = [&](int32_t annotator) {
    const std::vector<double> full = mv->AnnotatorConfusion(annotator);
    const std::vector<double> diagonal = mv->AnnotatorConfusionDiagonal(annotator);
    ASSERT_EQ(full.size(), static_cast<size_t>(k * k));
    ASSERT_EQ(diagonal.size(), static_cast<size_t>(k));
    for (int32_t t = 0; t < k; ++t) {
      EXPECT_EQ(diagonal[t], full[t * k + t]) << annotator << "," << t;
      double row = 0;
      for (int32_t y = 0; y < k; ++y) row += full[t * k + y];
      EXPECT_NEAR(row, 1.0, 1e-12) << annotator << "," << t;
    }
  };
  for (int32_t a : {0, 5}) {
    expect_consistent(a);
    EXPECT_THAT(mv->AnnotatorConfusion(a), ::testing::Each(DoubleEq(1.0 / k)));
  }
  const AnnotationMatrix m =
      *AnnotationMatrix::Build(3, 2, k, {{0, 0, 0}, {0, 1, 0}, {1, 0, 2}, {2, 1, 1}});
  ASSERT_THAT(mv->Fit(m, {}, false), IsOk());
  for (int32_t a : {0, 1, 9}) expect_consistent(a);
}

TEST(MajorityVoteTest, SerializeRestoreRoundTrip) {
  const std::vector<Annotation> triples = {{0, 0, 1}, {0, 1, 1}, {1, 0, 0}};
  const AnnotationMatrix m = *AnnotationMatrix::Build(2, 2, 2, triples);
  std::unique_ptr<MajorityVoteModel> mv = MakeMv(2);
  ASSERT_THAT(mv->Fit(m, {}, false), IsOk());
  std::unique_ptr<MajorityVoteModel> restored = MakeMv(2);
  ASSERT_THAT(restored->Restore(mv->Serialize()), IsOk());
  EXPECT_TRUE(restored->has_parameters());
  EXPECT_EQ(restored->AnnotatorConfusion(0), mv->AnnotatorConfusion(0));
  EXPECT_EQ(restored->AnnotatorConfusion(7), mv->AnnotatorConfusion(7));
  EXPECT_EQ(AllPosteriors(*restored, m, {}), AllPosteriors(*mv, m, {}));
  EXPECT_THAT(restored->Restore("garbage"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(MajorityVoteTest, FitValidatesInputs) {
  const AnnotationMatrix m = *AnnotationMatrix::Build(2, 1, 3, {});
  std::unique_ptr<MajorityVoteModel> mv = MakeMv(2);
  EXPECT_THAT(mv->Fit(m, {}, false),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(mv->has_parameters());
}

// majority_vote.h: Fit reports the Dawid-Skene log-likelihood so that mv and ds fits are
// comparable, and ds counts every item with labels or gold: a gold item without labels adds the
// log prior of its class. Two gold items without labels, one per class, on a crowd symmetric in
// the classes leave the prior uniform and the confusions as they were, and add 2 log(1/2).
TEST(MajorityVoteTest, AGoldItemWithoutLabelsAddsTheLogPriorOfItsClass) {
  const std::vector<Annotation> triples = {{0, 0, 0}, {0, 1, 0}, {1, 0, 1}, {1, 1, 1}};
  std::unique_ptr<MajorityVoteModel> without = MakeMv(2);
  absl::StatusOr<FitReport> base =
      without->Fit(*AnnotationMatrix::Build(2, 2, 2, triples), {}, false);
  ASSERT_THAT(base, IsOk());
  std::unique_ptr<MajorityVoteModel> with = MakeMv(2);
  absl::StatusOr<FitReport> report = with->Fit(*AnnotationMatrix::Build(4, 2, 2, triples),
                                               std::vector<int32_t>{-1, -1, 0, 1}, false);
  ASSERT_THAT(report, IsOk());
  for (int32_t a = 0; a < 2; ++a) {
    const std::vector<double> before = without->AnnotatorConfusion(a);
    const std::vector<double> after = with->AnnotatorConfusion(a);
    for (size_t j = 0; j < before.size(); ++j) EXPECT_NEAR(after[j], before[j], 1e-12);
  }
  EXPECT_NEAR(report->log_likelihood, base->log_likelihood + 2 * std::log(0.5), 1e-12);
}

// majority_vote.h: Create refuses fewer than two classes and options out of range.
TEST(MajorityVoteTest, CreateRefusesOneClassAndBadOptions) {
  EXPECT_THAT(MajorityVoteModel::Create(1, {}), StatusIs(absl::StatusCode::kInvalidArgument));
  TruthModelOptions bad;
  bad.vote_smoothing = 0;
  EXPECT_THAT(MajorityVoteModel::Create(2, bad), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace verity::models

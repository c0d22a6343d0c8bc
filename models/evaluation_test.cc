#include "models/evaluation.h"

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/status_matchers.h"
#include "models/annotation_matrix.h"

namespace verity::models {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;

TEST(ArgMaxTest, TakesTheLowestIndexOnTies) {
  EXPECT_EQ(ArgMax(std::vector<double>{0.2, 0.4, 0.4}), 1);
  EXPECT_EQ(ArgMax(std::vector<double>{0.5, 0.5}), 0);
  EXPECT_EQ(ArgMax(std::vector<double>{0.1, 0.2, 0.7}), 2);
}

TEST(ScorePredictionsTest, AccuracyAndMacroF1OverItemsWithTruth) {
  // Item 5 has no truth and is skipped. Class 0: TP 1, FP 1, FN 1 → F1 0.5;
  // class 1: TP 2, FP 1, FN 0 → 0.8; class 2: TP 0, FN 1 → 0.
  const ClassificationScores s =
      ScorePredictions({0, 1, 1, 1, 0, 2}, {0, 0, 1, 1, 2, -1}, 3);
  EXPECT_EQ(s.items, 5);
  EXPECT_DOUBLE_EQ(s.accuracy, 0.6);
  EXPECT_DOUBLE_EQ(s.macro_f1, (0.5 + 0.8 + 0.0) / 3);
  EXPECT_THAT(s.class_f1, ElementsAre(0.5, DoubleNear(0.8, 1e-15), 0.0));
}

TEST(ScorePredictionsTest, ClassNeitherTrueNorPredictedIsNotAveraged) {
  const ClassificationScores s = ScorePredictions({0, 1, 1}, {0, 1, 1}, 4);
  EXPECT_DOUBLE_EQ(s.accuracy, 1.0);
  EXPECT_DOUBLE_EQ(s.macro_f1, 1.0);
}

TEST(ScorePredictionsTest, PredictedOnlyClassCountsAsZero) {
  // Class 1 is predicted once but never true: F1 0 for it, 2/3 for class 0.
  const ClassificationScores s = ScorePredictions({0, 1}, {0, 0}, 2);
  EXPECT_DOUBLE_EQ(s.accuracy, 0.5);
  EXPECT_DOUBLE_EQ(s.macro_f1, (2.0 / 3 + 0.0) / 2);
}

TEST(ScorePredictionsTest, NothingScoredGivesZeros) {
  const ClassificationScores s = ScorePredictions({0, 1}, {-1, -1}, 2);
  EXPECT_EQ(s.items, 0);
  EXPECT_EQ(s.accuracy, 0.0);
  EXPECT_EQ(s.macro_f1, 0.0);
  EXPECT_THAT(s.class_f1, ElementsAre(0.0, 0.0));
}

TEST(ScorePosteriorsTest, ScoresGoldItemsWithLabelsBreakingTiesLow) {
  // Item 0: tie → class 0, gold 1 (wrong). Item 1: class 1, gold 1 (right).
  // Item 2 has gold but no label; item 3 has a label but no gold.
  absl::StatusOr<AnnotationMatrix> m = AnnotationMatrix::Build(
      4, 2, 2, {{0, 0, 0}, {0, 1, 1}, {1, 0, 1}, {3, 1, 0}});
  ASSERT_THAT(m, IsOk());
  const std::vector<double> posteriors = {0.5, 0.5, 0.2, 0.8,
                                          0.9, 0.1, 0.9, 0.1};
  const ClassificationScores s =
      ScorePosteriors(posteriors, *m, std::vector<int32_t>{1, 1, 0, -1});
  EXPECT_EQ(s.items, 2);
  EXPECT_DOUBLE_EQ(s.accuracy, 0.5);
  // Class 0: TP 0, FP 1 → 0; class 1: TP 1, FN 1 → 2/3.
  EXPECT_DOUBLE_EQ(s.macro_f1, (0.0 + 2.0 / 3) / 2);
}

// One label on each of items 0..n-1 (annotator 0, class 0), so that every
// item with gold is scored.
absl::StatusOr<AnnotationMatrix> OneLabelOnEachItem(int32_t num_items,
                                                     int32_t num_classes) {
  std::vector<Annotation> annotations;
  for (int32_t i = 0; i < num_items; ++i) annotations.push_back({i, 0, 0});
  return AnnotationMatrix::Build(num_items, 1, num_classes, annotations);
}

TEST(ScorePosteriorsTest, CalibrationOverTheScoredItems) {
  // Scored items 0-3; item 4 has gold but no label, item 5 a label but no
  // gold, and neither counts (item 4's p_gold = 0 would add 34.5 to the sum).
  //   item  posteriors           gold  pred  conf  bin  correct  p_gold
  //   0     0.70 0.20 0.10       0     0     0.70  7    yes      0.70
  //   1     0.20 0.75 0.05       0     1     0.75  7    no       0.20
  //   2     0.05 0.00 0.95       2     2     0.95  9    yes      0.95
  //   3     0.40 0.35 0.25       1     0     0.40  4    no       0.35
  // Bin 4: n 1, acc 0, conf 0.40 → (1/4) 0.40  = 0.1
  // Bin 7: n 2, acc 0.5, conf 0.725 → (2/4) 0.225 = 0.1125
  // Bin 9: n 1, acc 1, conf 0.95 → (1/4) 0.05  = 0.0125
  // ECE = 0.225. Log-loss = -(ln 0.7 + ln 0.2 + ln 0.95 + ln 0.35) / 4
  //     = (0.356675 + 1.609438 + 0.051293 + 1.049822) / 4 = 0.766807.
  std::vector<Annotation> annotations = {
      {0, 0, 0}, {1, 0, 1}, {2, 0, 2}, {3, 0, 0}, {5, 0, 1}};
  absl::StatusOr<AnnotationMatrix> m =
      AnnotationMatrix::Build(6, 1, 3, annotations);
  ASSERT_THAT(m, IsOk());
  const std::vector<double> posteriors = {
      0.70, 0.20, 0.10,  //
      0.20, 0.75, 0.05,  //
      0.05, 0.00, 0.95,  //
      0.40, 0.35, 0.25,  //
      0.00, 1.00, 0.00,  //
      0.10, 0.10, 0.80};
  const ClassificationScores s = ScorePosteriors(
      posteriors, *m, std::vector<int32_t>{0, 0, 2, 1, 0, -1});
  EXPECT_EQ(s.items, 4);
  EXPECT_DOUBLE_EQ(s.accuracy, 0.5);
  EXPECT_NEAR(s.ece, 0.225, 1e-12);
  EXPECT_NEAR(s.log_loss, 0.766807068814765, 1e-12);
}

TEST(ScorePosteriorsTest, ConfidenceOneFallsInTheLastBinAndZeroIsClamped) {
  // All three items in bin 9 = [0.9, 1.0]: confidences 1.0, 1.0, 0.92,
  // correct 1, 0, 1 → ECE = |2 - 2.92| / 3 = 0.306667. Item 1 gives its
  // gold class probability 0, clamped to 1e-15:
  // log-loss = (0 + 34.538776 + 0.083382) / 3 = 11.540719.
  absl::StatusOr<AnnotationMatrix> m = OneLabelOnEachItem(3, 2);
  ASSERT_THAT(m, IsOk());
  const std::vector<double> posteriors = {1.0, 0.0, 0.0, 1.0, 0.92, 0.08};
  const ClassificationScores s =
      ScorePosteriors(posteriors, *m, std::vector<int32_t>{0, 0, 0});
  EXPECT_EQ(s.items, 3);
  EXPECT_NEAR(s.ece, 0.92 / 3, 1e-12);
  EXPECT_NEAR(s.log_loss, 11.540719334616577, 1e-9);
}

TEST(ScorePosteriorsTest, CalibrationCountsTiesAsTheLowestClass) {
  // Item 0 ties classes 0 and 1 at 0.4; ArgMax predicts 0 = gold, correct.
  // Item 1 predicts 1 = gold with 0.45. Both in bin 4: correct 2, confidence
  // sum 0.85 → ECE = |2 - 0.85| / 2 = 0.575 (0.075 if the tie went to class
  // 1). Log-loss = -(ln 0.4 + ln 0.45) / 2 = 0.857399.
  absl::StatusOr<AnnotationMatrix> m = OneLabelOnEachItem(2, 3);
  ASSERT_THAT(m, IsOk());
  const std::vector<double> posteriors = {0.4, 0.4, 0.2, 0.3, 0.45, 0.25};
  const ClassificationScores s =
      ScorePosteriors(posteriors, *m, std::vector<int32_t>{0, 1});
  EXPECT_DOUBLE_EQ(s.accuracy, 1.0);
  EXPECT_NEAR(s.ece, 0.575, 1e-12);
  EXPECT_NEAR(s.log_loss, 0.857399214045963, 1e-12);
}

TEST(ScorePosteriorsTest, CalibrationUsesTenBinsNotFewer) {
  // Confidences 0.65 (correct) and 0.75 (wrong) fall in different tenths,
  // bins 6 and 7: ECE = (|1 - 0.65| + |0 - 0.75|) / 2 = 0.55. With 5 bins
  // (width 0.2) both would share [0.6, 0.8): |1 - 1.40| / 2 = 0.2.
  // Log-loss = -(ln 0.65 + ln 0.25) / 2 = (0.430783 + 1.386294) / 2.
  absl::StatusOr<AnnotationMatrix> m = OneLabelOnEachItem(2, 2);
  ASSERT_THAT(m, IsOk());
  const std::vector<double> posteriors = {0.65, 0.35, 0.75, 0.25};
  const ClassificationScores s =
      ScorePosteriors(posteriors, *m, std::vector<int32_t>{0, 1});
  EXPECT_DOUBLE_EQ(s.accuracy, 0.5);
  EXPECT_NEAR(s.ece, 0.55, 1e-12);
  EXPECT_NEAR(s.log_loss, 0.9085386386061725, 1e-12);
}

TEST(ScorePosteriorsTest, ConfidenceOnABinEdgeFallsInTheUpperBin) {
  // Bin b holds b/10 <= c < (b+1)/10. Confidences 0.5 (correct) and 0.5625
  // (wrong), both exact in binary, share bin 5: ECE = |1 - 1.0625| / 2 =
  // 0.03125. Were 0.5 put in bin 4: (|1 - 0.5| + |0 - 0.5625|) / 2 = 0.53125.
  absl::StatusOr<AnnotationMatrix> m = OneLabelOnEachItem(2, 3);
  ASSERT_THAT(m, IsOk());
  const std::vector<double> posteriors = {0.5,    0.3,    0.2,  //
                                          0.1875, 0.5625, 0.25};
  const ClassificationScores s =
      ScorePosteriors(posteriors, *m, std::vector<int32_t>{0, 0});
  EXPECT_DOUBLE_EQ(s.accuracy, 0.5);
  EXPECT_NEAR(s.ece, 0.03125, 1e-12);
}

TEST(ScorePosteriorsTest, TheLastTwoBinsAreKeptApart) {
  // Confidence 0.85 (correct) falls in bin 8 = [0.8, 0.9); 0.95 (wrong) and
  // 1.0 (correct) in bin 9 = [0.9, 1.0]. ECE = (|1 - 0.85| + |1 - 1.95|) / 3
  // = 1.1 / 3. Were bin 9 folded into bin 8: |2 - 2.8| / 3 = 0.8 / 3.
  // Log-loss = -(ln 0.85 + ln 0.05 + ln 1) / 3 = (0.162519 + 2.995732) / 3.
  absl::StatusOr<AnnotationMatrix> m = OneLabelOnEachItem(3, 2);
  ASSERT_THAT(m, IsOk());
  const std::vector<double> posteriors = {0.85, 0.15, 0.95, 0.05, 0.0, 1.0};
  const ClassificationScores s =
      ScorePosteriors(posteriors, *m, std::vector<int32_t>{0, 1, 1});
  EXPECT_EQ(s.items, 3);
  EXPECT_DOUBLE_EQ(s.accuracy, 2.0 / 3);
  EXPECT_NEAR(s.ece, 1.1 / 3, 1e-12);
  EXPECT_NEAR(s.log_loss, 1.0527504010172553, 1e-12);
}

TEST(ScorePosteriorsTest, BinsAreTenthsComputedAsFloorOfTenTimesTheConfidence) {
  // evaluation.h: bin = min(9, floor(10 c)) in double, so 0.9 (10 c = 9.0) and 1.0 share
  // bin 9 and 0.3 (10 c = 3.0) and 0.35 share bin 3.
  //   item  posteriors              gold  pred  conf  bin  correct  p_gold
  //   0     0.90 0.10 0.00 0.00     0     0     0.90  9    yes      0.90
  //   1     0.00 1.00 0.00 0.00     2     1     1.00  9    no       0 -> 1e-15
  //   2     0.30 0.25 0.25 0.20     0     0     0.30  3    yes      0.30
  //   3     0.25 0.35 0.20 0.20     0     1     0.35  3    no       0.25
  // ECE = (|1 - 1.90| + |1 - 0.65|) / 4 = 1.25 / 4 = 0.3125. With 0.9 in bin 8 it would be
  // (0.1 + 1.0 + 0.35) / 4 = 0.3625; with 0.3 in bin 2 (c / 0.1 = 2.9999999999999996),
  // (0.9 + 0.7 + 0.35) / 4 = 0.4875.
  // Log-loss = -(ln 0.9 + ln 1e-15 + ln 0.3 + ln 0.25) / 4
  //          = (0.105361 + 34.538776 + 1.203973 + 1.386294) / 4 = 9.308601.
  // Class 0: TP 2, FN 1 -> 0.8; class 1: FP 2 -> 0; class 2: FN 1 -> 0; class 3 absent.
  absl::StatusOr<AnnotationMatrix> m = OneLabelOnEachItem(4, 4);
  ASSERT_THAT(m, IsOk());
  const std::vector<double> posteriors = {0.90, 0.10, 0.00, 0.00,  //
                                          0.00, 1.00, 0.00, 0.00,  //
                                          0.30, 0.25, 0.25, 0.20,  //
                                          0.25, 0.35, 0.20, 0.20};
  const ClassificationScores s = ScorePosteriors(posteriors, *m, std::vector<int32_t>{0, 2, 0, 0});
  EXPECT_EQ(s.items, 4);
  EXPECT_DOUBLE_EQ(s.accuracy, 0.5);
  EXPECT_DOUBLE_EQ(s.macro_f1, 0.8 / 3);
  EXPECT_NEAR(s.ece, 0.3125, 1e-12);
  EXPECT_NEAR(s.log_loss, 9.308601019003584, 1e-9);
}

TEST(ScorePosteriorsTest, NothingScoredGivesZeroCalibration) {
  absl::StatusOr<AnnotationMatrix> m = OneLabelOnEachItem(2, 2);
  ASSERT_THAT(m, IsOk());
  const ClassificationScores s = ScorePosteriors(
      std::vector<double>{0.0, 1.0, 1.0, 0.0}, *m,
      std::vector<int32_t>{-1, -1});
  EXPECT_EQ(s.items, 0);
  EXPECT_EQ(s.ece, 0.0);
  EXPECT_EQ(s.log_loss, 0.0);
}

std::vector<Annotation> FiveItemsWithUpToSixLabels() {
  std::vector<Annotation> annotations;
  for (int32_t i = 0; i < 5; ++i) {
    for (int32_t a = 0; a <= i + 1; ++a) {
      annotations.push_back({i, a, (i + a) % 2});
    }
  }
  return annotations;
}

bool SameAnnotation(const Annotation& x, const Annotation& y) {
  return x.item == y.item && x.annotator == y.annotator && x.label == y.label;
}

TEST(SubsampleLabelsPerItemTest, KeepsAtMostRPerItemInInputOrder) {
  const std::vector<Annotation> all = FiveItemsWithUpToSixLabels();
  const std::vector<Annotation> kept = SubsampleLabelsPerItem(all, 5, 3, 7);
  std::vector<int> per_item(5, 0);
  for (const Annotation& a : kept) ++per_item[a.item];
  // Items have 2, 3, 4, 5, 6 labels.
  EXPECT_THAT(per_item, ElementsAre(2, 3, 3, 3, 3));
  // `kept` is a subsequence of `all`.
  size_t j = 0;
  for (const Annotation& a : kept) {
    while (j < all.size() && !SameAnnotation(all[j], a)) ++j;
    ASSERT_LT(j, all.size()) << "kept label not found in input order";
    ++j;
  }
}

// one_more_fraction: each item keeps R + 1 labels with that probability.
// 2,000 items of 4 labels, R = 1, fraction 0.25: about 500 items keep 2
// (binomial standard deviation 19); fraction 0 and 1 are exact.
TEST(SubsampleLabelsPerItemTest, AFractionOfItemsKeepsOneLabelMore) {
  std::vector<Annotation> all;
  for (int32_t i = 0; i < 2000; ++i) {
    for (int32_t a = 0; a < 4; ++a) all.push_back({i, a, a % 2});
  }
  auto items_with_two = [&](double fraction) {
    std::vector<int> per_item(2000, 0);
    for (const Annotation& a : SubsampleLabelsPerItem(all, 2000, 1, 5, fraction)) {
      ++per_item[a.item];
    }
    int two = 0;
    for (int n : per_item) {
      EXPECT_TRUE(n == 1 || n == 2) << n;
      two += n == 2;
    }
    return two;
  };
  EXPECT_EQ(items_with_two(0), 0);
  EXPECT_EQ(items_with_two(1), 2000);
  EXPECT_NEAR(items_with_two(0.25), 500, 4 * 19);
}

TEST(SubsampleLabelsPerItemTest, SameSeedSameDrawOtherSeedOtherDraw) {
  const std::vector<Annotation> all = FiveItemsWithUpToSixLabels();
  const std::vector<Annotation> a = SubsampleLabelsPerItem(all, 5, 1, 11);
  const std::vector<Annotation> b = SubsampleLabelsPerItem(all, 5, 1, 11);
  ASSERT_EQ(a.size(), 5u);
  ASSERT_EQ(b.size(), 5u);
  for (size_t j = 0; j < a.size(); ++j) {
    EXPECT_TRUE(SameAnnotation(a[j], b[j]));
  }
  bool any_difference = false;
  for (uint64_t seed = 12; seed < 20 && !any_difference; ++seed) {
    const std::vector<Annotation> c = SubsampleLabelsPerItem(all, 5, 1, seed);
    for (size_t j = 0; j < a.size(); ++j) {
      any_difference |= !SameAnnotation(a[j], c[j]);
    }
  }
  EXPECT_TRUE(any_difference);
}

TEST(SubsampleLabelsPerItemTest, EachLabelIsEquallyLikely) {
  // One item with four labels, R = 1, 4000 seeds: each label is kept about
  // 1000 times (binomial standard deviation 27).
  const std::vector<Annotation> all = {
      {0, 0, 0}, {0, 1, 0}, {0, 2, 1}, {0, 3, 1}};
  std::vector<int> times_kept(4, 0);
  for (uint64_t seed = 0; seed < 4000; ++seed) {
    const std::vector<Annotation> kept =
        SubsampleLabelsPerItem(all, 1, 1, seed);
    ASSERT_EQ(kept.size(), 1u);
    ++times_kept[kept[0].annotator];
  }
  for (int count : times_kept) {
    EXPECT_GT(count, 900);
    EXPECT_LT(count, 1100);
  }
}

TEST(SubsampleLabelsPerItemTest, EverySubsetOfTwoOfThreeIsEquallyLikely) {
  // One item with three labels, R = 2, 9000 seeds: each label is the one
  // left out about 3000 times (binomial standard deviation
  // sqrt(9000 * 1/3 * 2/3) = 44.7; the bounds are 5.6 of them). A shuffle
  // that draws from all n positions at every step instead of the n - j not
  // yet placed leaves them out 2/9, 3/9 and 4/9 of the time.
  const std::vector<Annotation> all = {{0, 0, 0}, {0, 1, 1}, {0, 2, 0}};
  std::vector<int> times_left_out(3, 0);
  for (uint64_t seed = 0; seed < 9000; ++seed) {
    const std::vector<Annotation> kept =
        SubsampleLabelsPerItem(all, 1, 2, seed);
    ASSERT_EQ(kept.size(), 2u);
    ASSERT_NE(kept[0].annotator, kept[1].annotator);
    ++times_left_out[3 - kept[0].annotator - kept[1].annotator];
  }
  for (int count : times_left_out) {
    EXPECT_GT(count, 2750);
    EXPECT_LT(count, 3250);
  }
}

TEST(MeanAndStandardErrorTest, SampleStandardDeviationOverRootN) {
  const MeanWithError m = MeanAndStandardError({1.0, 2.0, 3.0, 4.0});
  EXPECT_EQ(m.count, 4);
  EXPECT_DOUBLE_EQ(m.mean, 2.5);
  // Sample variance 5/3; standard error sqrt(5/3 / 4).
  EXPECT_THAT(m.standard_error, DoubleNear(0.6454972243679028, 1e-15));
}

TEST(MeanAndStandardErrorTest, OneValueHasNoErrorAndNoValuesAreZero) {
  const MeanWithError one = MeanAndStandardError({0.75});
  EXPECT_EQ(one.count, 1);
  EXPECT_DOUBLE_EQ(one.mean, 0.75);
  EXPECT_EQ(one.standard_error, 0.0);
  const MeanWithError none = MeanAndStandardError({});
  EXPECT_EQ(none.count, 0);
  EXPECT_EQ(none.mean, 0.0);
}

TEST(MeanAndStandardErrorTest, TwoValuesHaveAnError) {
  // {1, 3}: mean 2, sample variance ((1 - 2)^2 + (3 - 2)^2) / 1 = 2,
  // standard error sqrt(2 / 2) = 1.
  const MeanWithError m = MeanAndStandardError({1.0, 3.0});
  EXPECT_EQ(m.count, 2);
  EXPECT_DOUBLE_EQ(m.mean, 2.0);
  EXPECT_DOUBLE_EQ(m.standard_error, 1.0);
}

TEST(FitAndScoreTest, MajorityVoteScoresItsVotes) {
  // Item 0: votes 1,1,0 → 1 (gold 1). Item 1: votes 0,0,1 → 0 (gold 1).
  // Item 2: votes 0,0,0 → 0 (gold 0).
  absl::StatusOr<AnnotationMatrix> m = AnnotationMatrix::Build(
      3, 3, 2,
      {{0, 0, 1}, {0, 1, 1}, {0, 2, 0}, {1, 0, 0}, {1, 1, 0}, {1, 2, 1},
       {2, 0, 0}, {2, 1, 0}, {2, 2, 0}});
  ASSERT_THAT(m, IsOk());
  absl::StatusOr<MethodEvaluation> e =
      FitAndScore("mv", {}, *m, std::vector<int32_t>{1, 1, 0});
  ASSERT_THAT(e, IsOk());
  EXPECT_EQ(e->scores.items, 3);
  EXPECT_DOUBLE_EQ(e->scores.accuracy, 2.0 / 3);
  // Class 0: TP 1, FP 1 → 2/3; class 1: TP 1, FN 1 → 2/3.
  EXPECT_DOUBLE_EQ(e->scores.macro_f1, 2.0 / 3);
  EXPECT_EQ(e->fit.iterations, 1);
}

TEST(FitAndScoreTest, GoldIsUsedForScoringOnlyNeverForFitting) {
  // Six items, each with one label 1 from annotator 0; gold says class 0 for
  // all. No item has two labels, so an unsupervised ds keeps its priors and
  // predicts each item's only label, 1 (dawid_skene.h): accuracy 0. Had the
  // gold been passed to Fit, ds would learn that annotator 0 says 1 for
  // class 0 and that class 0 is common, and predict 0 everywhere.
  std::vector<Annotation> annotations;
  for (int32_t i = 0; i < 6; ++i) annotations.push_back({i, 0, 1});
  absl::StatusOr<AnnotationMatrix> m =
      AnnotationMatrix::Build(6, 1, 2, annotations);
  ASSERT_THAT(m, IsOk());
  absl::StatusOr<MethodEvaluation> e =
      FitAndScore("ds", {}, *m, std::vector<int32_t>(6, 0));
  ASSERT_THAT(e, IsOk());
  EXPECT_EQ(e->scores.items, 6);
  EXPECT_EQ(e->scores.accuracy, 0.0);
  // Class 0: TP 0, FN 6 → 0; class 1: TP 0, FP 6 → 0.
  EXPECT_EQ(e->scores.macro_f1, 0.0);
}

TEST(FitAndScoreTest, RejectsUnknownMethodAndGoldOfWrongSize) {
  absl::StatusOr<AnnotationMatrix> m =
      AnnotationMatrix::Build(2, 1, 2, {{0, 0, 1}, {1, 0, 0}});
  ASSERT_THAT(m, IsOk());
  EXPECT_THAT(FitAndScore("no_such_method", {}, *m, std::vector<int32_t>{1, 0}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("no_such_method")));
  EXPECT_THAT(FitAndScore("mv", {}, *m, std::vector<int32_t>{1}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("gold")));
  EXPECT_THAT(FitAndScore("mv", {}, *m, std::vector<int32_t>{1, 0, 0}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("gold")));
}

}  // namespace
}  // namespace verity::models

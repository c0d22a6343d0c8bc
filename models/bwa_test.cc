#include "models/bwa.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/status_matchers.h"
#include "models/annotation_matrix.h"
#include "models/binary_codec.h"
#include "models/majority_vote.h"
#include "models/testing/create_model.h"
#include "models/testing/serialization_checks.h"
#include "models/testing/posterior_checks.h"
#include "models/testing/synthetic_crowd.h"
#include "models/truth_model.h"

namespace verity::models {
namespace {

using ::testing::HasSubstr;
using ::verity::models::testing::Accuracy;
using ::verity::models::testing::ArgMax;
using ::verity::models::testing::CreateOrFail;
using ::verity::models::testing::ExpectSerializeRestoreContract;
using ::verity::models::testing::ExpectUniformConfusionBeforeAFit;
using ::verity::models::testing::GenerateSyntheticCrowd;
using ::verity::models::testing::ItemsWhosePosteriorDependsOnLabelOrder;
using ::verity::models::testing::SymmetricConfusion;
using ::verity::models::testing::SyntheticCrowd;
using ::verity::models::testing::SyntheticCrowdSpec;
using ::verity::models::testing::WithTrailingBytes;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;
using Entry = AnnotationMatrix::Entry;

// 3 classes, 2000 items, 5 labels each from 10 annotators of accuracy 0.45
// to 0.9 (errors spread evenly).
SyntheticCrowdSpec MixedCrowdSpec() {
  SyntheticCrowdSpec spec;
  spec.num_items = 2000;
  spec.num_classes = 3;
  spec.labels_per_item = 5;
  for (int a = 0; a < 10; ++a) {
    spec.confusions.push_back(SymmetricConfusion(3, 0.45 + 0.05 * a));
  }
  spec.seed = 11;
  return spec;
}

TEST(BwaTest, RecoversTheTruthAndRanksTheAnnotators) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(MixedCrowdSpec());
  std::unique_ptr<BwaModel> model = CreateOrFail<BwaModel>(3);
  absl::StatusOr<FitReport> report = model->Fit(crowd.matrix, {}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_TRUE(report->converged);
  EXPECT_EQ(report->log_likelihood, 0.0);
  auto mv = MajorityVoteModel::Create(3, {});
  const double mv_accuracy =
      Accuracy(AllPosteriors(**mv, crowd.matrix, {}), crowd.matrix, crowd.truth);
  const double accuracy =
      Accuracy(AllPosteriors(*model, crowd.matrix, {}), crowd.matrix, crowd.truth);
  EXPECT_GT(accuracy, 0.85);
  EXPECT_GT(accuracy, mv_accuracy + 0.01);
  // The best annotator is more precise than the worst in every class.
  for (int c = 0; c < 3; ++c) {
    EXPECT_GT((*model->AnnotatorPrecision(9))[c], 2 * (*model->AnnotatorPrecision(0))[c])
        << c;
  }
  // Class means near the uniform truth.
  const std::vector<double> means = *model->ClassMean();
  for (double m : means) EXPECT_NEAR(m, 1.0 / 3, 0.05);
  // The reported confusion is one-coin and row-stochastic.
  const std::vector<double> q = model->AnnotatorConfusion(9);
  for (int t = 0; t < 3; ++t) {
    EXPECT_NEAR(q[3 * t] + q[3 * t + 1] + q[3 * t + 2], 1.0, 1e-12);
    EXPECT_GT(q[4 * t], 0.6);
  }
}

// Hand-set parameters, K = 2: mu = (0.6, 0.4), prior precisions (2, 2),
// annotator 0 (4, 1), annotator 1 (1, 3). Labels 0 by annotator 0, 1 by
// annotator 1:
//   z_0 = (1 * 0.6 + 4) / (1 + 4 + 1) = 4.6 / 6,
//   z_1 = (1 * 0.4 + 3) / (1 + 1 + 3) = 3.4 / 5,
// normalised to sum to 1.
TEST(BwaTest, HandCheckedPosterior) {
  ByteWriter writer;
  WriteModelHeader(writer, BwaModel::kMethod, true);
  writer.WriteU32(2);  // classes
  writer.WriteU32(2);  // annotators
  for (double v : {0.6, 0.4, 2.0, 2.0, 4.0, 1.0, 1.0, 3.0}) writer.WriteF64(v);
  std::unique_ptr<BwaModel> model = CreateOrFail<BwaModel>(2);
  ASSERT_THAT(model->Restore(writer.Finish()), IsOk());
  std::vector<double> out(2);
  model->ItemPosterior({{0, 0}, {1, 1}}, -1, absl::MakeSpan(out));
  const double z0 = 4.6 / 6, z1 = 3.4 / 5;
  EXPECT_NEAR(out[0], z0 / (z0 + z1), 1e-12);
  EXPECT_NEAR(out[1], z1 / (z0 + z1), 1e-12);
  // Order of the labels does not matter, bit for bit.
  std::vector<double> swapped(2);
  model->ItemPosterior({{1, 1}, {0, 0}}, -1, absl::MakeSpan(swapped));
  EXPECT_EQ(out, swapped);
  // An unseen annotator gets the prior precisions: one label 1 gives
  //   z_0 = 0.6 / 3 = 0.2, z_1 = (0.4 + 2) / 3 = 0.8.
  model->ItemPosterior({{7, 1}}, -1, absl::MakeSpan(out));
  EXPECT_NEAR(out[1], 0.8, 1e-12);
  // No labels: the class means.
  model->ItemPosterior({}, -1, absl::MakeSpan(out));
  EXPECT_NEAR(out[0], 0.6, 1e-12);
  model->ItemPosterior({{0, 0}}, 1, absl::MakeSpan(out));
  EXPECT_EQ(out, std::vector<double>({0.0, 1.0}));
  // Annotator 1, class 1: precision 3 gives 1 - 2 / (2 * 3) = 2/3 on the
  // diagonal; class 0, precision 1, is clamped at chance (1/2).
  EXPECT_EQ(model->AnnotatorConfusion(1).size(), 4u);
  EXPECT_NEAR(model->AnnotatorConfusion(1)[3], 2.0 / 3, 1e-12);
  EXPECT_NEAR(model->AnnotatorConfusion(1)[0], 0.5, 1e-12);
}

// 20 items of alternating truth 0, 1; annotators 0 and 1 always say 0,
// annotator 2 always gives the truth. Items 0..18 have gold; item 19 (truth
// 1) has none. Gold shows annotator 2 right and 0, 1 wrong on half the items,
// so item 19 follows annotator 2; without gold the majority (0, 1) wins.
TEST(BwaTest, GoldIsClampedAndTeachesThePrecisions) {
  std::vector<Annotation> triples;
  std::vector<int32_t> gold;
  for (int32_t i = 0; i < 20; ++i) {
    triples.push_back({i, 0, 0});
    triples.push_back({i, 1, 0});
    triples.push_back({i, 2, i % 2});
    gold.push_back(i < 19 ? i % 2 : -1);
  }
  const AnnotationMatrix m = *AnnotationMatrix::Build(20, 3, 2, triples);
  std::unique_ptr<BwaModel> with_gold = CreateOrFail<BwaModel>(2);
  ASSERT_THAT(with_gold->Fit(m, gold, false), IsOk());
  const std::vector<double> p = AllPosteriors(*with_gold, m, gold);
  for (int32_t i = 0; i < 19; ++i) {
    EXPECT_EQ(p[2 * i + i % 2], 1.0) << i;
  }
  EXPECT_GT(p[2 * 19 + 1], 0.5);
  for (int c = 0; c < 2; ++c) {
    EXPECT_GT((*with_gold->AnnotatorPrecision(2))[c],
              2 * (*with_gold->AnnotatorPrecision(0))[c]);
  }
  std::unique_ptr<BwaModel> without_gold = CreateOrFail<BwaModel>(2);
  ASSERT_THAT(without_gold->Fit(m, {}, false), IsOk());
  EXPECT_LT(AllPosteriors(*without_gold, m, {})[2 * 19 + 1], 0.5);
  // A gold class out of range is refused.
  gold[0] = 2;
  EXPECT_THAT(with_gold->Fit(m, gold, false),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(BwaTest, WarmStartFromAConvergedFitConvergesQuickly) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(MixedCrowdSpec());
  std::unique_ptr<BwaModel> model = CreateOrFail<BwaModel>(3);
  absl::StatusOr<FitReport> cold = model->Fit(crowd.matrix, {}, false);
  ASSERT_THAT(cold, IsOk());
  ASSERT_TRUE(cold->converged);
  const std::vector<int32_t> before = ArgMax(AllPosteriors(*model, crowd.matrix, {}), 3);
  absl::StatusOr<FitReport> warm = model->Fit(crowd.matrix, {}, true);
  ASSERT_THAT(warm, IsOk());
  EXPECT_TRUE(warm->converged);
  EXPECT_LT(warm->iterations, cold->iterations);
  EXPECT_LE(warm->iterations, 2);
  EXPECT_EQ(ArgMax(AllPosteriors(*model, crowd.matrix, {}), 3), before);
}

TEST(BwaTest, SerializeRestoreRoundTripsAndRejectsCorruptInput) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(MixedCrowdSpec());
  std::unique_ptr<BwaModel> model = CreateOrFail<BwaModel>(3);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());
  std::unique_ptr<BwaModel> restored = CreateOrFail<BwaModel>(3);
  ExpectSerializeRestoreContract(*model, *restored, *CreateOrFail<BwaModel>(2), crowd.matrix, 11);
  // A negative precision, though well-formed and checksummed, is refused and
  // leaves the model as it was.
  ByteWriter bad;
  WriteModelHeader(bad, BwaModel::kMethod, true);
  bad.WriteU32(3);
  bad.WriteU32(0);
  for (double v : {0.3, 0.3, 0.4, 1.0, -1.0, 1.0}) bad.WriteF64(v);
  EXPECT_THAT(restored->Restore(bad.Finish()), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(AllPosteriors(*restored, crowd.matrix, {}),
            AllPosteriors(*model, crowd.matrix, {}));
  ASSERT_THAT(restored->Restore(CreateOrFail<BwaModel>(3)->Serialize()), IsOk());
  EXPECT_FALSE(restored->has_parameters());
}

// bwa.h: b_k = a_v c (label-weighted mean of z_ik (1 - z_ik) under the majority vote),
// c = 4 (1 - 1 / K), and an id outside the fit gets the prior mean precision a_v / b_k. One item
// labelled 0, 1 and 2 by three annotators (K = 3): the vote gives z = 1/3 for every class, so
// b_k = 15 (8/3) (2/9) = 80/9 and a_v / b_k = 27/16 for every class.
TEST(BwaTest, ThePriorCorrectionSetsThePrecisionOfAnUnknownAnnotator) {
  const AnnotationMatrix m = *AnnotationMatrix::Build(1, 3, 3, {{0, 0, 0}, {0, 1, 1}, {0, 2, 2}});
  absl::StatusOr<std::unique_ptr<BwaModel>> model = BwaModel::Create(3, TruthModelOptions());
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE((*model)->Fit(m, {}, false).ok());
  const std::optional<std::vector<double>> precision = (*model)->AnnotatorPrecision(-1);
  ASSERT_TRUE(precision.has_value());
  ASSERT_EQ(precision->size(), 3u);
  for (double v : *precision) EXPECT_NEAR(v, 27.0 / 16.0, 1e-9);
}

// Promise (bwa.h): v_jk = (a_v + n_j) / (b_k + sum over j's labels of (z_ik - [y_ij = k])^2),
// a_v = 15, with gold items clamped one-hot in every update, mu_k the mean of z_ik over the
// items, and b_k = a_v c (label-weighted mean of z_ik (1 - z_ik) under the majority vote),
// c = 4 (1 - 1/2) = 2; an id outside the fit gets a_v / b_k. Both items gold (0, 1), K = 2:
//   item 0: annotators 0, 1, 2 say 0, 0, 0;  item 1: annotators 0, 1 say 0, 1.
// Majority vote: item 0 z = (1, 0), z (1 - z) = 0; item 1 z = (1/2, 1/2), z (1 - z) = 1/4 with
// weight 2; mean over the 5 labels = 0.5 / 5 = 0.1, so b_k = 15 * 2 * 0.1 = 3 (both classes).
// Clamped z: item 0 (1, 0), item 1 (0, 1); mu = (1/2, 1/2).
//   annotator 0 (n = 2; right on item 0, wrong on item 1): squares 1 for each class,
//     v = (15 + 2) / (3 + 1) = 4.25;
//   annotator 1 (n = 2, right twice): squares 0, v = 17 / 3;
//   annotator 2 (n = 1, right): v = 16 / 3;
//   unknown id: 15 / 3 = 5.
// Every item is gold, so z never moves and the fit stops after one iteration.
TEST(BwaTest, HandCheckedPrecisionsOnAGoldClampedFit) {
  const AnnotationMatrix m = *AnnotationMatrix::Build(
      2, 3, 2, {{0, 0, 0}, {0, 1, 0}, {0, 2, 0}, {1, 0, 0}, {1, 1, 1}});
  std::unique_ptr<BwaModel> model = CreateOrFail<BwaModel>(2);
  absl::StatusOr<FitReport> report = model->Fit(m, std::vector<int32_t>{0, 1}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->iterations, 1);
  const auto expect_precision = [&](int32_t annotator, double want) {
    const std::optional<std::vector<double>> v = model->AnnotatorPrecision(annotator);
    ASSERT_TRUE(v.has_value());
    ASSERT_EQ(v->size(), 2u);
    EXPECT_NEAR((*v)[0], want, 1e-12) << annotator;
    EXPECT_NEAR((*v)[1], want, 1e-12) << annotator;
  };
  expect_precision(0, 4.25);
  expect_precision(1, 17.0 / 3);
  expect_precision(2, 16.0 / 3);
  expect_precision(-1, 5.0);
  expect_precision(9, 5.0);
  const std::optional<std::vector<double>> mu = model->ClassMean();
  ASSERT_TRUE(mu.has_value());
  EXPECT_NEAR((*mu)[0], 0.5, 1e-12);
  EXPECT_NEAR((*mu)[1], 0.5, 1e-12);
}

// Promise (bwa.h): b_k is floored at kMinRate * a_v, so a crowd in full agreement (zero variance
// under the majority vote) still gets finite precisions; an id outside the fit gets the prior
// mean precision a_v / b_k = a_v / (kMinRate a_v) = 1 / kMinRate = 1e6 in every class.
TEST(BwaTest, AUnanimousCrowdFloorsTheRateAtMinRateTimesTheShape) {
  const AnnotationMatrix m = *AnnotationMatrix::Build(
      2, 2, 2, {{0, 0, 0}, {0, 1, 0}, {1, 0, 1}, {1, 1, 1}});
  std::unique_ptr<BwaModel> model = CreateOrFail<BwaModel>(2);
  ASSERT_THAT(model->Fit(m, {}, false), IsOk());
  const std::optional<std::vector<double>> prior = model->AnnotatorPrecision(-1);
  ASSERT_TRUE(prior.has_value());
  ASSERT_EQ(prior->size(), 2u);
  for (double v : *prior) {
    EXPECT_NEAR(v, 1.0 / BwaModel::kMinRate, 1e-6);
    EXPECT_TRUE(std::isfinite(v));
  }
  for (int32_t a : {0, 1}) {
    const std::vector<double> v = *model->AnnotatorPrecision(a);
    for (double x : v) EXPECT_TRUE(std::isfinite(x) && x > 0) << a;
  }
}

// A restored K = 2 model with class means `mu`, no annotators, prior precisions (2, 2).
std::unique_ptr<BwaModel> RestoredWithClassMeans(double mu0, double mu1) {
  ByteWriter writer;
  WriteModelHeader(writer, BwaModel::kMethod, true);
  writer.WriteU32(2);  // classes
  writer.WriteU32(0);  // annotators
  for (double v : {mu0, mu1, 2.0, 2.0}) writer.WriteF64(v);
  std::unique_ptr<BwaModel> model = CreateOrFail<BwaModel>(2);
  EXPECT_THAT(model->Restore(writer.Finish()), IsOk());
  return model;
}

// Promise (bwa.h): Restore accepts class means anywhere in [0, 1], ends included, and the
// posterior is z_i normalised to sum to 1. With no labels z_i = mu: mu = (1, 0) gives (1, 0);
// mu = (0, 0) gives z_i = 0, which no normalisation can turn into a distribution: the posterior
// is then uniform.
TEST(BwaTest, ClassMeansAtTheEndsOfTheUnitIntervalAreValid) {
  std::vector<double> out(2);
  std::unique_ptr<BwaModel> certain = RestoredWithClassMeans(1.0, 0.0);
  ASSERT_TRUE(certain->has_parameters());
  certain->ItemPosterior({}, -1, absl::MakeSpan(out));
  EXPECT_EQ(out, std::vector<double>({1.0, 0.0}));
  std::unique_ptr<BwaModel> zero = RestoredWithClassMeans(0.0, 0.0);
  ASSERT_TRUE(zero->has_parameters());
  zero->ItemPosterior({}, -1, absl::MakeSpan(out));
  EXPECT_EQ(out, std::vector<double>({0.5, 0.5}));
}

// Promise (bwa.h): Restore refuses a precision that is not finite and > 0 (0, infinity, NaN)
// and a class mean outside [0, 1], and leaves the model as it was.
TEST(BwaTest, RestoreRefusesZeroOrNonFinitePrecisionsAndMeansOutsideTheUnitInterval) {
  std::unique_ptr<BwaModel> model = CreateOrFail<BwaModel>(2);
  const auto blob = [](double mu0, double precision) {
    ByteWriter writer;
    WriteModelHeader(writer, BwaModel::kMethod, true);
    writer.WriteU32(2);
    writer.WriteU32(0);
    for (double v : {mu0, 0.5, 2.0, precision}) writer.WriteF64(v);
    return writer.Finish();
  };
  ASSERT_THAT(model->Restore(blob(0.5, 3.0)), IsOk());
  for (double bad : {0.0, std::numeric_limits<double>::infinity(),
                     std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_THAT(model->Restore(blob(0.5, bad)), StatusIs(absl::StatusCode::kInvalidArgument))
        << bad;
  }
  for (double bad : {-0.01, 1.01, std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_THAT(model->Restore(blob(bad, 3.0)), StatusIs(absl::StatusCode::kInvalidArgument))
        << bad;
  }
  EXPECT_EQ(*model->AnnotatorPrecision(-1), std::vector<double>({2.0, 3.0}));
}

// Promise (bwa.h): the reported confusion has p_k = 1 - K / (2 v_jk) clamped into
// [1/K, 1 - 1e-6]. A precision of 1e9 gives 1 - 1e-9 before the clamp: the diagonal is
// 1 - 1e-6 and the off-diagonal 1e-6.
TEST(BwaTest, TheConfusionDiagonalIsClampedBelowOne) {
  ByteWriter writer;
  WriteModelHeader(writer, BwaModel::kMethod, true);
  writer.WriteU32(2);
  writer.WriteU32(1);
  for (double v : {0.5, 0.5, 2.0, 2.0, 1e9, 1e9}) writer.WriteF64(v);
  std::unique_ptr<BwaModel> model = CreateOrFail<BwaModel>(2);
  ASSERT_THAT(model->Restore(writer.Finish()), IsOk());
  const std::vector<double> q = model->AnnotatorConfusion(0);
  ASSERT_EQ(q.size(), 4u);
  EXPECT_DOUBLE_EQ(q[0], 1.0 - 1e-6);
  EXPECT_NEAR(q[1], 1e-6, 1e-15);
  EXPECT_DOUBLE_EQ(q[3], 1.0 - 1e-6);
  EXPECT_NEAR(q[2], 1e-6, 1e-15);
}

// Promise (bwa.h): mu_k is the mean of z_ik over the items, and an item without labels has no
// evidence, so its z_i is the class means themselves and cannot move them: adding an unlabelled
// item to the gold-clamped fit above leaves mu = (1/2, 1/2), and the unlabelled item's posterior
// is mu normalised, (1/2, 1/2).
TEST(BwaTest, AnItemWithoutLabelsDoesNotMoveTheClassMeans) {
  const AnnotationMatrix m = *AnnotationMatrix::Build(
      3, 3, 2, {{0, 0, 0}, {0, 1, 0}, {0, 2, 0}, {1, 0, 0}, {1, 1, 1}});
  std::unique_ptr<BwaModel> model = CreateOrFail<BwaModel>(2);
  ASSERT_THAT(model->Fit(m, std::vector<int32_t>{0, 1, -1}, false), IsOk());
  const std::optional<std::vector<double>> mu = model->ClassMean();
  ASSERT_TRUE(mu.has_value());
  EXPECT_NEAR((*mu)[0], 0.5, 1e-12);
  EXPECT_NEAR((*mu)[1], 0.5, 1e-12);
  const std::vector<double> p = AllPosteriors(*model, m, {});
  EXPECT_NEAR(p[4], 0.5, 1e-12);
  EXPECT_NEAR(p[5], 0.5, 1e-12);
  // The precisions are those of the fit without the unlabelled item.
  EXPECT_NEAR((*model->AnnotatorPrecision(0))[0], 4.25, 1e-12);
}

// Promise (bwa.h), the whole fit: a direct transcription of the documented updates, run on a
// small crowd, must agree with Fit on the number of iterations (the authors' stopping rule:
// every z_ik within 1e-8 + 1e-3 |z_ik| of its previous value), the precisions and the class
// means. z starts as the majority-vote fractions, which set b_k = a_v c (label-weighted mean of
// z_ik (1 - z_ik)), c = 4 (1 - 1/K); each iteration computes mu_k = mean of z_ik, then
// v_jk = (a_v + n_j) / (b_k + sum (z_ik - [y = k])^2), then z_ik = (lambda mu_k +
// sum v_jk [y = k]) / (lambda + sum v_jk).
TEST(BwaTest, FitFollowsTheDocumentedUpdatesAndStoppingRule) {
  constexpr int kItems = 40, kAnnotators = 5, kClasses = 3;
  std::mt19937 rng(5);
  std::vector<Annotation> triples;
  for (int32_t i = 0; i < kItems; ++i) {
    const int32_t truth = i % kClasses;
    for (int32_t a = 0; a < kAnnotators; ++a) {
      if ((i + a) % 4 == 0) continue;  // about 4 labels per item
      const bool right = std::uniform_real_distribution<double>(0, 1)(rng) < 0.5 + 0.1 * a;
      triples.push_back({i, a, right ? truth : (truth + 1 + a % 2) % kClasses});
    }
  }
  const AnnotationMatrix m = *AnnotationMatrix::Build(kItems, kAnnotators, kClasses, triples);
  const double av = 15.0, lambda = 1.0, c = 4.0 * (1.0 - 1.0 / kClasses);
  std::vector<std::vector<double>> z(kItems, std::vector<double>(kClasses, 0.0));
  std::vector<double> b(kClasses, 0.0);
  for (const Annotation& t : triples) z[t.item][t.label] += 1.0;
  for (int32_t i = 0; i < kItems; ++i) {
    double n = 0;
    for (double x : z[i]) n += x;
    for (int k = 0; k < kClasses; ++k) {
      z[i][k] /= n;
      b[k] += n * z[i][k] * (1 - z[i][k]);
    }
  }
  for (double& bk : b) bk = av * c * bk / static_cast<double>(triples.size());
  std::vector<double> mu(kClasses);
  std::vector<std::vector<double>> v(kAnnotators, std::vector<double>(kClasses));
  int iterations = 0;
  for (bool converged = false; !converged && iterations < 100; ++iterations) {
    for (int k = 0; k < kClasses; ++k) {
      mu[k] = 0;
      for (int32_t i = 0; i < kItems; ++i) mu[k] += z[i][k] / kItems;
      for (int32_t a = 0; a < kAnnotators; ++a) {
        double n = 0, squares = 0;
        for (const Annotation& t : triples) {
          if (t.annotator != a) continue;
          n += 1;
          const double d = z[t.item][k] - (t.label == k ? 1.0 : 0.0);
          squares += d * d;
        }
        v[a][k] = (av + n) / (b[k] + squares);
      }
    }
    converged = true;
    std::vector<std::vector<double>> next(kItems, std::vector<double>(kClasses));
    for (int32_t i = 0; i < kItems; ++i) {
      for (int k = 0; k < kClasses; ++k) {
        double numerator = lambda * mu[k], denominator = lambda;
        for (const Annotation& t : triples) {
          if (t.item != i) continue;
          numerator += t.label == k ? v[t.annotator][k] : 0.0;
          denominator += v[t.annotator][k];
        }
        next[i][k] = numerator / denominator;
        if (std::abs(next[i][k] - z[i][k]) > 1e-8 + 1e-3 * std::abs(next[i][k])) {
          converged = false;
        }
      }
    }
    z = next;
  }
  ASSERT_LT(iterations, 100);
  ASSERT_GT(iterations, 2);

  std::unique_ptr<BwaModel> model = CreateOrFail<BwaModel>(kClasses);
  absl::StatusOr<FitReport> report = model->Fit(m, {}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_TRUE(report->converged);
  EXPECT_EQ(report->iterations, iterations);
  for (int k = 0; k < kClasses; ++k) {
    EXPECT_NEAR((*model->ClassMean())[k], mu[k], 1e-9) << k;
    EXPECT_NEAR((*model->AnnotatorPrecision(-1))[k], av / b[k], 1e-9) << k;
    for (int32_t a = 0; a < kAnnotators; ++a) {
      EXPECT_NEAR((*model->AnnotatorPrecision(a))[k], v[a][k], 1e-9) << a << " " << k;
    }
  }
  const std::vector<double> p = AllPosteriors(*model, m, {});
  for (int32_t i = 0; i < kItems; ++i) {
    const double total = z[i][0] + z[i][1] + z[i][2];
    for (int k = 0; k < kClasses; ++k) EXPECT_NEAR(p[3 * i + k], z[i][k] / total, 1e-9) << i;
  }
}

// bwa.h: a gold item's z_i is the one-hot gold class in every update, class 0 included, and the
// first id past the fitted annotators gets the prior mean a_v / b_k. One item, gold 0, labelled
// 1 by annotator 0: the majority vote (0, 1) has no variance, so b_k = kMinRate a_v and a_v / b_k
// = 1e6; clamped z = (1, 0) gives mu = (1, 0) and squared errors (1, 1), so
// v_0k = (15 + 1) / (1.5e-5 + 1) in both classes (the unclamped vote would give 16 / 1.5e-5).
TEST(BwaTest, GoldClassZeroIsClampedAndTheNextIdGetsThePrior) {
  const AnnotationMatrix m = *AnnotationMatrix::Build(1, 1, 2, {{0, 0, 1}});
  std::unique_ptr<BwaModel> model = CreateOrFail<BwaModel>(2);
  ASSERT_THAT(model->Fit(m, std::vector<int32_t>{0}, false), IsOk());
  const std::optional<std::vector<double>> mu = model->ClassMean();
  ASSERT_TRUE(mu.has_value());
  EXPECT_NEAR((*mu)[0], 1.0, 1e-12);
  EXPECT_NEAR((*mu)[1], 0.0, 1e-12);
  const double rate = BwaModel::kMinRate * BwaModel::kPrecisionShape;
  for (int32_t annotator : {0, 1, -1}) {
    const std::optional<std::vector<double>> v = model->AnnotatorPrecision(annotator);
    ASSERT_TRUE(v.has_value());
    ASSERT_EQ(v->size(), 2u);
    const double want = annotator == 0 ? 16.0 / (rate + 1.0) : 1e6;
    for (int c = 0; c < 2; ++c) EXPECT_NEAR((*v)[c] / want, 1.0, 1e-12) << annotator << " " << c;
  }
}

// truth_model.h: a gold label clamps the posterior to one-hot, before a fit too (bwa.h: the soft
// majority vote before a fit, which is one-hot on gold).
TEST(BwaTest, BeforeAFitAGoldLabelClampsThePosterior) {
  std::unique_ptr<BwaModel> model = CreateOrFail<BwaModel>(2);
  std::vector<double> out(2);
  model->ItemPosterior({{3, 0}, {4, 0}}, 1, absl::MakeSpan(out));
  EXPECT_EQ(out, std::vector<double>({0.0, 1.0}));
}

// bwa.h: Create is INVALID_ARGUMENT if num_classes < 2.
TEST(BwaTest, CreateRefusesFewerThanTwoClasses) {
  EXPECT_THAT(BwaModel::Create(1, {}).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(BwaModel::Create(2, {}).status(), IsOk());
}

// truth_model.h / bwa.h: ItemPosterior does not depend on the order of the labels, bit for bit
// (the labels are put in (annotator, label) order before the sums). Every item of the crowd,
// its labels given in reverse.
TEST(BwaTest, PosteriorIsTheSameBitForBitForAnyOrderOfTheLabels) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(MixedCrowdSpec());
  std::unique_ptr<BwaModel> model = CreateOrFail<BwaModel>(3);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());
  EXPECT_EQ(ItemsWhosePosteriorDependsOnLabelOrder(*model, crowd.matrix), 0);
}

// bwa.h: before a fit every annotator's confusion is uniform, 1 / K in every cell (K = 3).
TEST(BwaTest, BeforeAFitTheConfusionIsUniformOverThreeClasses) {
  std::unique_ptr<BwaModel> model = CreateOrFail<BwaModel>(3);
  ExpectUniformConfusionBeforeAFit(*model);
}

// truth_model.h: ItemPosterior writes a probability distribution. K = 3, restored class means
// all 0 and an item without labels: z_i = 0 in every class, and the posterior is the uniform
// distribution (1/3 each), not a row that sums to something else.
TEST(BwaTest, AllZeroTruthGivesTheUniformDistributionOverThreeClasses) {
  ByteWriter writer;
  WriteModelHeader(writer, BwaModel::kMethod, true);
  writer.WriteU32(3);                                                  // classes
  writer.WriteU32(0);                                                  // annotators
  for (double v : {0.0, 0.0, 0.0, 5.0, 5.0, 5.0}) writer.WriteF64(v);  // means, prior row
  std::unique_ptr<BwaModel> model = CreateOrFail<BwaModel>(3);
  ASSERT_THAT(model->Restore(writer.Finish()), IsOk());
  std::vector<double> out(3);
  model->ItemPosterior({}, -1, absl::MakeSpan(out));
  for (double p : out) EXPECT_DOUBLE_EQ(p, 1.0 / 3);
}

// truth_model.h: on error Restore leaves the model unchanged. A blob with trailing bytes after
// the parameters is refused, and neither an empty model nor one fitted on other labels takes
// its parameters.
TEST(BwaTest, ARefusedRestoreLeavesTheModelUnchanged) {
  const AnnotationMatrix first =
      *AnnotationMatrix::Build(3, 2, 2, {{0, 0, 0}, {0, 1, 0}, {1, 0, 1}, {1, 1, 1}, {2, 0, 0}});
  const AnnotationMatrix second =
      *AnnotationMatrix::Build(3, 2, 2, {{0, 0, 1}, {0, 1, 0}, {1, 0, 1}, {2, 1, 1}});
  std::unique_ptr<BwaModel> fitted = CreateOrFail<BwaModel>(2);
  ASSERT_THAT(fitted->Fit(first, {}, false), IsOk());
  const std::string blob = WithTrailingBytes(fitted->Serialize());
  std::unique_ptr<BwaModel> empty = CreateOrFail<BwaModel>(2);
  EXPECT_THAT(empty->Restore(blob), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(empty->has_parameters());
  std::unique_ptr<BwaModel> other = CreateOrFail<BwaModel>(2);
  ASSERT_THAT(other->Fit(second, {}, false), IsOk());
  const std::string before = other->Serialize();
  ASSERT_NE(before, fitted->Serialize());
  EXPECT_THAT(other->Restore(blob), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(other->Serialize(), before);
}

// truth_model.h / bwa.h: Fit with warm_start false starts cold (z from the majority-vote
// fractions) whatever the model holds: a model fitted before on another crowd ends where a fresh
// model fitted on this crowd does.
TEST(BwaTest, AColdFitIgnoresThePreviousParameters) {
  SyntheticCrowdSpec spec = MixedCrowdSpec();
  spec.num_items = 300;
  SyntheticCrowdSpec other = spec;
  other.seed += 17;
  const SyntheticCrowd first = GenerateSyntheticCrowd(other);
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  std::unique_ptr<BwaModel> refitted = CreateOrFail<BwaModel>(3);
  std::unique_ptr<BwaModel> fresh = CreateOrFail<BwaModel>(3);
  ASSERT_THAT(refitted->Fit(first.matrix, {}, false), IsOk());
  ASSERT_THAT(refitted->Fit(crowd.matrix, {}, false), IsOk());
  ASSERT_THAT(fresh->Fit(crowd.matrix, {}, false), IsOk());
  EXPECT_EQ(AllPosteriors(*refitted, crowd.matrix, {}), AllPosteriors(*fresh, crowd.matrix, {}));
  EXPECT_EQ(refitted->Serialize(), fresh->Serialize());
}

// Restore refuses, as truncated, a checksummed blob whose annotator count needs more bytes than
// it holds: 2,000,000,000 annotators (160 GB of precisions at K = 10) with the bytes of none. The
// count is checked before anything is allocated for it, and the model is left unfitted.
TEST(BwaTest, RestoreRefusesMoreAnnotatorsThanTheBlobHolds) {
  ByteWriter blob;
  WriteModelHeader(blob, BwaModel::kMethod, true);
  blob.WriteU32(10);
  blob.WriteU32(2'000'000'000);
  for (int c = 0; c < 10; ++c) blob.WriteF64(0.1);
  for (int c = 0; c < 10; ++c) blob.WriteF64(2.0);
  std::unique_ptr<BwaModel> model = CreateOrFail<BwaModel>(10);
  const absl::Status restored = model->Restore(blob.Finish());
  EXPECT_THAT(restored, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(restored.message(), HasSubstr("truncated"));
  EXPECT_FALSE(model->has_parameters());
}

// Promise (bwa.h): a warm start begins from the z_i the previous precisions and mu give, and ids
// not in the previous fit get the prior mean precision. The model below has mu = (0.5, 0.5),
// prior row (2, 3) and annotator 0's row (10, 20); one warm iteration on an item labelled 0 by
// annotator 1, new to it. The starting z is (lambda mu_k + v_k [y = k]) / (lambda + v_k) with
// v = (2, 3): (0.5 + 2) / 3 = 5/6 and 0.5 / 4 = 1/8, and the iteration's class mean is that z
// (the mean over the one item). Annotator 0's row would give 21/22 and 1/42.
TEST(BwaTest, AWarmFitStartsNewAnnotatorsFromThePriorPrecision) {
  ByteWriter writer;
  WriteModelHeader(writer, BwaModel::kMethod, true);
  writer.WriteU32(2);  // classes
  writer.WriteU32(1);  // annotators
  for (double v : {0.5, 0.5, 2.0, 3.0, 10.0, 20.0}) writer.WriteF64(v);
  TruthModelOptions one_iteration;
  one_iteration.max_iterations = 1;
  std::unique_ptr<BwaModel> model = CreateOrFail<BwaModel>(2, one_iteration);
  ASSERT_THAT(model->Restore(writer.Finish()), IsOk());
  const AnnotationMatrix m = *AnnotationMatrix::Build(1, 2, 2, {{0, 1, 0}});
  ASSERT_THAT(model->Fit(m, {}, true), IsOk());
  ASSERT_TRUE(model->ClassMean().has_value());
  EXPECT_NEAR((*model->ClassMean())[0], 5.0 / 6, 1e-12);
  EXPECT_NEAR((*model->ClassMean())[1], 1.0 / 8, 1e-12);
}

// bwa.h: AnnotatorPrecision and ClassMean are nullopt before the first fit, and K values after
// one.
TEST(BwaTest, PrecisionsAndClassMeansAreNulloptBeforeAFit) {
  std::unique_ptr<BwaModel> model = CreateOrFail<BwaModel>(2);
  EXPECT_FALSE(model->AnnotatorPrecision(0).has_value());
  EXPECT_FALSE(model->ClassMean().has_value());
  ASSERT_THAT(model->Fit(*AnnotationMatrix::Build(1, 1, 2, {{0, 0, 0}}), {}, false), IsOk());
  ASSERT_TRUE(model->AnnotatorPrecision(0).has_value());
  EXPECT_EQ(model->AnnotatorPrecision(0)->size(), 2u);
  ASSERT_TRUE(model->ClassMean().has_value());
  EXPECT_EQ(model->ClassMean()->size(), 2u);
}

}  // namespace
}  // namespace verity::models

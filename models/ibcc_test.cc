#include "models/ibcc.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
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
using ::verity::models::testing::ArgMax;
using ::verity::models::testing::CreateOrFail;
using ::verity::models::testing::ExpectSerializeRestoreContract;
using ::verity::models::testing::Accuracy;
using ::verity::models::testing::GenerateSyntheticCrowd;
using ::verity::models::testing::SymmetricConfusion;
using ::verity::models::testing::SyntheticCrowd;
using ::verity::models::testing::SyntheticCrowdSpec;
using ::verity::models::testing::ItemsWhosePosteriorDependsOnLabelOrder;
using ::verity::models::testing::ExpectUniformConfusionBeforeAFit;
using ::verity::models::testing::ExpectTheFirstIterationNeverConverges;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;
using Entry = AnnotationMatrix::Entry;

// 3 classes; 6 annotators of accuracy 0.65 to 0.9 and 6 spammers who answer
// class 0 with probability 0.8 whatever the truth.
SyntheticCrowdSpec SpammerCrowdSpec() {
  SyntheticCrowdSpec spec;
  spec.num_items = 2000;
  spec.num_classes = 3;
  spec.labels_per_item = 5;
  for (int a = 0; a < 6; ++a) {
    spec.confusions.push_back(SymmetricConfusion(3, 0.65 + 0.05 * a));
  }
  for (int a = 0; a < 6; ++a) {
    spec.confusions.push_back({0.8, 0.1, 0.1, 0.8, 0.1, 0.1, 0.8, 0.1, 0.1});
  }
  spec.seed = 7;
  return spec;
}

TEST(IbccTest, LearnsTheConfusionsAndBeatsMajorityVote) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(SpammerCrowdSpec());
  std::unique_ptr<IbccModel> model = CreateOrFail<IbccModel>(3);
  absl::StatusOr<FitReport> report = model->Fit(crowd.matrix, {}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_TRUE(report->converged);
  EXPECT_LT(report->log_likelihood, 0.0);
  auto mv = MajorityVoteModel::Create(3, {});
  const double mv_accuracy =
      Accuracy(AllPosteriors(**mv, crowd.matrix, {}), crowd.matrix, crowd.truth);
  const double accuracy =
      Accuracy(AllPosteriors(*model, crowd.matrix, {}), crowd.matrix, crowd.truth);
  EXPECT_GT(accuracy, mv_accuracy + 0.05);
  // Each annotator labels about 2000 * 5 / 12 = 833 items: the posterior
  // means are near the generating confusions, the good annotators' diagonal
  // somewhat below it (the items the fit gets wrong count as their errors).
  for (int a = 0; a < 6; ++a) {
    const std::vector<double> q = model->AnnotatorConfusion(a);
    for (int t = 0; t < 3; ++t) EXPECT_NEAR(q[4 * t], 0.65 + 0.05 * a, 0.12) << a;
  }
  EXPECT_GT(model->AnnotatorConfusion(5)[0], model->AnnotatorConfusion(0)[0] + 0.1);
  for (int a = 6; a < 12; ++a) {
    const std::vector<double> q = model->AnnotatorConfusion(a);
    for (int t = 0; t < 3; ++t) EXPECT_NEAR(q[3 * t], 0.8, 0.07) << a;
  }
}

// Hand-set Dirichlets, K = 2: nu = (2, 2) (no class preference); annotator 0
// alpha = [[6, 2], [1, 4]]. With psi(n) = -gamma + sum_{m<n} 1/m:
//   E ln pi[0][0] = psi(6) - psi(8) = -(1/6 + 1/7),
//   E ln pi[1][0] = psi(1) - psi(5) = -(1 + 1/2 + 1/3 + 1/4),
// so a label 0 from annotator 0 gives p(0) ∝ exp(-(1/6 + 1/7)),
// p(1) ∝ exp(-25/12). An unseen annotator has the prior [[4, 1], [1, 4]]: a
// label 1 gives p(0) ∝ exp(psi(1) - psi(5)) = exp(-25/12),
// p(1) ∝ exp(psi(4) - psi(5)) = exp(-1/4).
TEST(IbccTest, HandCheckedPosterior) {
  ByteWriter writer;
  WriteModelHeader(writer, IbccModel::kMethod, true);
  writer.WriteU32(2);  // classes
  writer.WriteU32(1);  // annotators
  for (double v : {2.0, 2.0, 6.0, 2.0, 1.0, 4.0}) writer.WriteF64(v);
  std::unique_ptr<IbccModel> model = CreateOrFail<IbccModel>(2);
  ASSERT_THAT(model->Restore(writer.Finish()), IsOk());
  std::vector<double> out(2);
  model->ItemPosterior({{0, 0}}, -1, absl::MakeSpan(out));
  const double a = std::exp(-(1.0 / 6 + 1.0 / 7)), b = std::exp(-25.0 / 12);
  EXPECT_NEAR(out[0], a / (a + b), 1e-12);
  model->ItemPosterior({{5, 1}}, -1, absl::MakeSpan(out));
  const double c = std::exp(-25.0 / 12), d = std::exp(-0.25);
  EXPECT_NEAR(out[1], d / (c + d), 1e-12);
  // Both labels: the product, order-independent bit for bit.
  std::vector<double> both(2), swapped(2);
  model->ItemPosterior({{0, 0}, {5, 1}}, -1, absl::MakeSpan(both));
  model->ItemPosterior({{5, 1}, {0, 0}}, -1, absl::MakeSpan(swapped));
  EXPECT_NEAR(both[0], a * c / (a * c + b * d), 1e-12);
  EXPECT_EQ(both, swapped);
  model->ItemPosterior({}, -1, absl::MakeSpan(out));
  EXPECT_NEAR(out[0], 0.5, 1e-15);
  model->ItemPosterior({{0, 0}}, 1, absl::MakeSpan(out));
  EXPECT_EQ(out, std::vector<double>({0.0, 1.0}));
  EXPECT_EQ(model->AnnotatorConfusion(0),
            std::vector<double>({6.0 / 8, 2.0 / 8, 1.0 / 5, 4.0 / 5}));
  EXPECT_EQ(model->AnnotatorConfusion(3),
            std::vector<double>({4.0 / 5, 1.0 / 5, 1.0 / 5, 4.0 / 5}));
}

// 20 items of alternating truth; annotators 0 and 1 always say 0, annotator
// 2 always gives the truth. Items 0..18 have gold, item 19 (truth 1) none:
// gold shows annotator 2 right, so item 19 follows it; without gold the
// majority (0, 1) wins.
TEST(IbccTest, GoldIsClampedAndTeachesTheConfusions) {
  std::vector<Annotation> triples;
  std::vector<int32_t> gold;
  for (int32_t i = 0; i < 20; ++i) {
    triples.push_back({i, 0, 0});
    triples.push_back({i, 1, 0});
    triples.push_back({i, 2, i % 2});
    gold.push_back(i < 19 ? i % 2 : -1);
  }
  const AnnotationMatrix m = *AnnotationMatrix::Build(20, 3, 2, triples);
  std::unique_ptr<IbccModel> with_gold = CreateOrFail<IbccModel>(2);
  ASSERT_THAT(with_gold->Fit(m, gold, false), IsOk());
  const std::vector<double> p = AllPosteriors(*with_gold, m, gold);
  for (int32_t i = 0; i < 19; ++i) EXPECT_EQ(p[2 * i + i % 2], 1.0) << i;
  EXPECT_GT(p[2 * 19 + 1], 0.5);
  // Annotator 0 said 0 on the 9 gold items of class 1 (plus the prior 1).
  EXPECT_GT((*with_gold->AnnotatorDirichlet(0))[2], 9.0);
  std::unique_ptr<IbccModel> without_gold = CreateOrFail<IbccModel>(2);
  ASSERT_THAT(without_gold->Fit(m, {}, false), IsOk());
  EXPECT_LT(AllPosteriors(*without_gold, m, {})[2 * 19 + 1], 0.5);
  gold.resize(3);
  EXPECT_THAT(with_gold->Fit(m, gold, false), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(IbccTest, WarmStartFromAConvergedFitConvergesQuickly) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(SpammerCrowdSpec());
  std::unique_ptr<IbccModel> model = CreateOrFail<IbccModel>(3);
  absl::StatusOr<FitReport> cold = model->Fit(crowd.matrix, {}, false);
  ASSERT_THAT(cold, IsOk());
  ASSERT_TRUE(cold->converged);
  const std::vector<int32_t> before = ArgMax(AllPosteriors(*model, crowd.matrix, {}), 3);
  absl::StatusOr<FitReport> warm = model->Fit(crowd.matrix, {}, true);
  ASSERT_THAT(warm, IsOk());
  EXPECT_TRUE(warm->converged);
  EXPECT_LT(warm->iterations, cold->iterations);
  // The tolerance stops the cold fit short of the fixed point: the warm fit
  // may still move a few near-tied items.
  const std::vector<int32_t> after = ArgMax(AllPosteriors(*model, crowd.matrix, {}), 3);
  int changed = 0;
  for (size_t i = 0; i < after.size(); ++i) changed += after[i] != before[i];
  EXPECT_LE(changed, 10);
}

TEST(IbccTest, SerializeRestoreRoundTripsAndRejectsCorruptInput) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(SpammerCrowdSpec());
  std::unique_ptr<IbccModel> model = CreateOrFail<IbccModel>(3);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());
  std::unique_ptr<IbccModel> restored = CreateOrFail<IbccModel>(3);
  std::unique_ptr<IbccModel> binary = CreateOrFail<IbccModel>(2);
  ExpectSerializeRestoreContract(*model, *restored, *binary, crowd.matrix, 13);
  // A Dirichlet parameter below its prior (a diagonal of 2 < 4), well-formed
  // and checksummed, is refused and leaves the model as it was.
  ByteWriter bad;
  WriteModelHeader(bad, IbccModel::kMethod, true);
  bad.WriteU32(2);
  bad.WriteU32(1);
  for (double v : {1.0, 1.0, 2.0, 1.0, 1.0, 4.0}) bad.WriteF64(v);
  EXPECT_THAT(binary->Restore(bad.Finish()), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(binary->has_parameters());
  ASSERT_THAT(restored->Restore(CreateOrFail<IbccModel>(3)->Serialize()), IsOk());
  EXPECT_FALSE(restored->has_parameters());
}

// ibcc.h: alpha_j[k][l] = alpha0[k][l] + sum_i q_i(k) [j said l on i], alpha0 = 4 on the
// diagonal and 1 elsewhere; nu = 1 + sum_i q_i. Every item gold (q fixed): classes 0, 1, 1, and
// annotator 0 says 0, 0, 1. Row k is the true class: (5, 1 | 2, 5); nu = (2, 3); an annotator
// outside the fit gets the prior (4, 1 | 1, 4).
TEST(IbccTest, TheDirichletsArePriorPlusCountsByTrueClass) {
  const AnnotationMatrix m = *AnnotationMatrix::Build(3, 1, 2, {{0, 0, 0}, {1, 0, 0}, {2, 0, 1}});
  std::unique_ptr<IbccModel> model = CreateOrFail<IbccModel>(2);
  ASSERT_THAT(model->Fit(m, std::vector<int32_t>{0, 1, 1}, false), IsOk());
  const auto near = [](const std::vector<double>& actual, const std::vector<double>& expected) {
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(actual[i], expected[i], 1e-9) << i;
  };
  ASSERT_TRUE(model->AnnotatorDirichlet(0).has_value());
  near(*model->AnnotatorDirichlet(0), {5, 1, 2, 5});
  ASSERT_TRUE(model->ClassDirichlet().has_value());
  near(*model->ClassDirichlet(), {2, 3});
  ASSERT_TRUE(model->AnnotatorDirichlet(7).has_value());
  near(*model->AnnotatorDirichlet(7), {4, 1, 1, 4});
}

// An item without labels (and without gold) carries no information and adds nothing to nu:
// the fit of TheDirichletsArePriorPlusCountsByTrueClass with a fourth, unlabelled item gives
// the same Dirichlets, nu = (1 + 1, 1 + 2). (Counted, its E-step posterior, about (0.4, 0.6),
// would be added to nu.)
TEST(IbccTest, AnItemWithoutLabelsAddsNothingToTheClassDirichlet) {
  const AnnotationMatrix m = *AnnotationMatrix::Build(4, 1, 2, {{0, 0, 0}, {1, 0, 0}, {2, 0, 1}});
  std::unique_ptr<IbccModel> model = CreateOrFail<IbccModel>(2);
  ASSERT_THAT(model->Fit(m, std::vector<int32_t>{0, 1, 1, -1}, false), IsOk());
  ASSERT_TRUE(model->ClassDirichlet().has_value());
  ASSERT_EQ(model->ClassDirichlet()->size(), 2u);
  EXPECT_NEAR((*model->ClassDirichlet())[0], 2.0, 1e-9);
  EXPECT_NEAR((*model->ClassDirichlet())[1], 3.0, 1e-9);
  ASSERT_TRUE(model->AnnotatorDirichlet(0).has_value());
  const std::vector<double> alpha = *model->AnnotatorDirichlet(0);
  ASSERT_EQ(alpha.size(), 4u);
  EXPECT_NEAR(alpha[0], 5.0, 1e-9);
  EXPECT_NEAR(alpha[1], 1.0, 1e-9);
  EXPECT_NEAR(alpha[2], 2.0, 1e-9);
  EXPECT_NEAR(alpha[3], 5.0, 1e-9);
}

// A restored model with the asymmetric class Dirichlet nu = (3, 1) and no annotators (every id
// gets the prior alpha0 = (4, 1 | 1, 4)).
std::unique_ptr<IbccModel> AsymmetricClassPriorModel() {
  ByteWriter writer;
  WriteModelHeader(writer, IbccModel::kMethod, true);
  writer.WriteU32(2);  // classes
  writer.WriteU32(0);  // annotators
  writer.WriteF64(3.0);
  writer.WriteF64(1.0);
  std::unique_ptr<IbccModel> model = CreateOrFail<IbccModel>(2);
  EXPECT_THAT(model->Restore(writer.Finish()), IsOk());
  return model;
}

// Promise (ibcc.h): E[ln kappa_k] = psi(nu_k) - psi(sum nu). With nu = (3, 1) and no labels,
// q(0) / q(1) = exp(psi(3) - psi(1)) = exp(1 + 1/2) = e^1.5 (psi(n + 1) = psi(n) + 1/n), so
// q(0) = e^1.5 / (1 + e^1.5) = 0.8175745. (The plug-in log(nu_k / sum nu) would give 3/4.)
TEST(IbccTest, TheClassPriorEntersAsTheDigammaExpectation) {
  std::unique_ptr<IbccModel> model = AsymmetricClassPriorModel();
  std::vector<double> out(2);
  model->ItemPosterior({}, -1, absl::MakeSpan(out));
  EXPECT_NEAR(out[0], std::exp(1.5) / (1 + std::exp(1.5)), 1e-12);
  EXPECT_NEAR(out[0], 0.8175745, 1e-7);
  EXPECT_NEAR(out[1], 1 / (1 + std::exp(1.5)), 1e-12);
}

// Promise (ibcc.h): FitReport::log_likelihood is sum_i ln(sum_k exp(E[ln kappa_k] +
// sum_labels E[ln pi_j[k][l]])), with E[ln kappa_k] = psi(nu_k) - psi(sum nu) (so the
// psi(sum nu) term does not cancel here, unlike in the posterior), and a warm fit starts from the
// previous nu. One warm iteration from nu = (3, 1), one item labelled 0 by an annotator with the
// prior rows (4, 1 | 1, 4):
//   class 0: psi(3) - psi(4) + psi(4) - psi(5) = -1/3 - 1/4 = -7/12,
//   class 1: psi(1) - psi(4) + psi(1) - psi(5) = -11/6 - 25/12 = -47/12,
// ll = -7/12 + log(1 + exp(-40/12)) = -0.5482809.
TEST(IbccTest, TheLogLikelihoodKeepsTheNormaliserOfTheClassPrior) {
  std::unique_ptr<IbccModel> model = AsymmetricClassPriorModel();
  TruthModelOptions one_iteration;
  one_iteration.max_iterations = 1;
  std::unique_ptr<IbccModel> fitted = CreateOrFail<IbccModel>(2, one_iteration);
  ASSERT_THAT(fitted->Restore(model->Serialize()), IsOk());
  const AnnotationMatrix m = *AnnotationMatrix::Build(1, 1, 2, {{0, 0, 0}});
  absl::StatusOr<FitReport> report = fitted->Fit(m, {}, true);
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->iterations, 1);
  EXPECT_NEAR(report->log_likelihood, -7.0 / 12 + std::log1p(std::exp(-40.0 / 12)), 1e-12);
  EXPECT_NEAR(report->log_likelihood, -0.5482809, 1e-7);
}

// Promise (ibcc.h): Restore refuses a Dirichlet parameter below its prior or not finite, and
// leaves the model as it was. nu below kClassPrior (1), an off-diagonal alpha below
// kOffDiagonalPrior (1), and an infinite or NaN alpha are refused; the priors themselves
// (nu = 1, alpha = alpha0) are accepted.
TEST(IbccTest, RestoreRefusesEveryParameterBelowItsPriorOrNotFinite) {
  const auto blob = [](double nu0, double alpha01, double alpha11) {
    ByteWriter writer;
    WriteModelHeader(writer, IbccModel::kMethod, true);
    writer.WriteU32(2);  // classes
    writer.WriteU32(1);  // annotators
    for (double v : {nu0, 1.0, 4.0, alpha01, 1.0, alpha11}) writer.WriteF64(v);
    return writer.Finish();
  };
  std::unique_ptr<IbccModel> model = CreateOrFail<IbccModel>(2);
  ASSERT_THAT(model->Restore(blob(1.0, 1.0, 4.0)), IsOk());
  ASSERT_THAT(model->Restore(blob(2.0, 3.0, 5.0)), IsOk());
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THAT(model->Restore(blob(0.5, 3.0, 5.0)), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(model->Restore(blob(inf, 3.0, 5.0)), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(model->Restore(blob(2.0, 0.5, 5.0)), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(model->Restore(blob(2.0, inf, 5.0)), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(model->Restore(blob(2.0, 3.0, inf)), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(model->Restore(blob(2.0, 3.0, nan)), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(*model->ClassDirichlet(), std::vector<double>({2.0, 1.0}));
  EXPECT_EQ(*model->AnnotatorDirichlet(0), std::vector<double>({4.0, 3.0, 1.0, 5.0}));
}

// Promise (ibcc.h): log_likelihood is the log normaliser of the E-step, and gold items are
// clamped: q_i is one-hot on the gold class, so a gold item's normaliser runs over its gold class
// alone, ln exp(score_g) = score_g. The warm fit of the test above with the item's gold class 0:
// ll = psi(3) - psi(4) + psi(4) - psi(5) = -1/3 - 1/4 = -7/12; with gold class 1,
// psi(1) - psi(4) + psi(1) - psi(5) = -11/6 - 25/12 = -47/12.
TEST(IbccTest, AGoldItemAddsTheLogScoreOfItsGoldClass) {
  TruthModelOptions one_iteration;
  one_iteration.max_iterations = 1;
  const AnnotationMatrix m = *AnnotationMatrix::Build(1, 1, 2, {{0, 0, 0}});
  for (int32_t g : {0, 1}) {
    std::unique_ptr<IbccModel> fitted = CreateOrFail<IbccModel>(2, one_iteration);
    ASSERT_THAT(fitted->Restore(AsymmetricClassPriorModel()->Serialize()), IsOk());
    absl::StatusOr<FitReport> report = fitted->Fit(m, std::vector<int32_t>{g}, true);
    ASSERT_THAT(report, IsOk());
    EXPECT_EQ(report->iterations, 1);
    EXPECT_NEAR(report->log_likelihood, g == 0 ? -7.0 / 12 : -47.0 / 12, 1e-12) << g;
  }
}

// Promise (ibcc.h): a cold fit starts from the soft majority vote as the first q, with gold items
// clamped (q one-hot on the gold class). K = 2: items 0..9 are gold class 1 and annotator 0 says
// 0 on each; item 10, without gold, also gets a 0 from annotator 0. The first q (vote smoothing
// s = 0.01) is (0, 1) on the gold items and (1.01, 0.01) / 1.02 on item 10, so the first M-step
// gives alpha_0 = [[4 + 1.01/1.02, 1], [11 + 0.01/1.02, 4]] and nu = (1 + 1.01/1.02,
// 11 + 0.01/1.02): annotator 0's 0s mean class 1. One E-step then gives item 10
// q(1) = 1 / (1 + exp(E ln kappa_0 + E ln pi[0][0] - E ln kappa_1 - E ln pi[1][0])) = 0.85988
// (digammas evaluated by hand), and the last M-step alpha_0[1][0] = 1 + 10 + 0.85988. A first q
// that ignored the gold (all 0s read as class 0) would leave item 10 at q(1) = 0.0088.
TEST(IbccTest, TheColdStartMajorityVoteClampsTheGoldItems) {
  std::vector<Annotation> triples;
  std::vector<int32_t> gold;
  for (int32_t i = 0; i < 11; ++i) {
    triples.push_back({i, 0, 0});
    gold.push_back(i < 10 ? 1 : -1);
  }
  const AnnotationMatrix m = *AnnotationMatrix::Build(11, 1, 2, triples);
  TruthModelOptions one_iteration;
  one_iteration.max_iterations = 1;
  std::unique_ptr<IbccModel> model = CreateOrFail<IbccModel>(2, one_iteration);
  ASSERT_THAT(model->Fit(m, gold, false), IsOk());
  ASSERT_TRUE(model->AnnotatorDirichlet(0).has_value());
  EXPECT_NEAR((*model->AnnotatorDirichlet(0))[2], 11.85988, 1e-4);
  EXPECT_NEAR((*model->AnnotatorDirichlet(0))[0], 4 + (1 - 0.85988), 1e-4);
}

// Promise (ibcc.h): the first q of a cold fit is the soft majority vote of the items with
// labels; items without labels are skipped in the first M-step as in every later one. K = 2,
// one iteration: item 0 has gold 0 and annotator 0's label 0; items 1 and 2 have gold 1 but
// no label. The first q is (1, 0) on item 0 only, so nu = (2, 1) and alpha_0 = [[5, 1], [1,
// 4]]; item 0's log score is E ln kappa_0 + E ln pi_0[0][0] = psi(2) - psi(3) + psi(5) - psi(6)
// = -1/2 - 1/5 = -7/10, the log-likelihood. (Counting items 1 and 2 in the first M-step,
// nu = (2, 3), would give psi(2) - psi(5) - 1/5 = -13/12 - 1/5.)
TEST(IbccTest, TheColdStartSkipsGoldItemsWithoutLabels) {
  TruthModelOptions one_iteration;
  one_iteration.max_iterations = 1;
  const AnnotationMatrix m = *AnnotationMatrix::Build(3, 1, 2, {{0, 0, 0}});
  std::unique_ptr<IbccModel> model = CreateOrFail<IbccModel>(2, one_iteration);
  absl::StatusOr<FitReport> report = model->Fit(m, std::vector<int32_t>{0, 1, 1}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->iterations, 1);
  EXPECT_NEAR(report->log_likelihood, -0.7, 1e-12);
}

// ibcc.h: convergence compares the log normalisers of two E-steps, so the first iteration (no
// previous E-step) never converges, even with a tolerance of 10 that any relative change meets:
// the fit stops at iteration 2.
TEST(IbccTest, TheFirstIterationNeverConverges) {
  TruthModelOptions loose;
  loose.tolerance = 10.0;
  std::unique_ptr<IbccModel> model = CreateOrFail<IbccModel>(2, loose);
  ExpectTheFirstIterationNeverConverges(*model);
}

// truth_model.h: a gold label clamps the posterior to one-hot, before a fit too (ibcc.h: the soft
// majority vote before a fit, which is one-hot on gold).
TEST(IbccTest, BeforeAFitAGoldLabelClampsThePosterior) {
  std::unique_ptr<IbccModel> model = CreateOrFail<IbccModel>(2);
  std::vector<double> out(2);
  model->ItemPosterior({{3, 0}, {4, 0}}, 1, absl::MakeSpan(out));
  EXPECT_EQ(out, std::vector<double>({0.0, 1.0}));
}

// ibcc.h: Create is INVALID_ARGUMENT if num_classes < 2.
TEST(IbccTest, CreateRefusesFewerThanTwoClasses) {
  EXPECT_THAT(IbccModel::Create(1, {}).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(IbccModel::Create(2, {}).status(), IsOk());
}

// truth_model.h / ibcc.h: ItemPosterior does not depend on the order of the labels, bit for bit
// (the labels are put in (annotator, label) order before the sums). Every item of the crowd,
// its labels given in reverse.
TEST(IbccTest, PosteriorIsTheSameBitForBitForAnyOrderOfTheLabels) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(SpammerCrowdSpec());
  std::unique_ptr<IbccModel> model = CreateOrFail<IbccModel>(3);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());
  EXPECT_EQ(ItemsWhosePosteriorDependsOnLabelOrder(*model, crowd.matrix), 0);
}

// ibcc.h: before a fit every annotator's confusion is uniform, 1 / K in every cell (K = 3).
TEST(IbccTest, BeforeAFitTheConfusionIsUniformOverThreeClasses) {
  std::unique_ptr<IbccModel> model = CreateOrFail<IbccModel>(3);
  ExpectUniformConfusionBeforeAFit(*model);
}

// truth_model.h: ItemPosterior writes a probability distribution whatever the labels. 600 labels
// of class 1 from annotators outside the fit (the prior Dirichlet (4, 1 | 1, 4): each adds psi(4) -
// psi(1) = 1.83 to class 1, beyond exp's range in all) give class 1 probability 1, not an overflow.
TEST(IbccTest, ManyAgreeingLabelsGiveAFinitePosterior) {
  ByteWriter writer;
  WriteModelHeader(writer, IbccModel::kMethod, true);
  writer.WriteU32(2);  // classes
  writer.WriteU32(0);  // annotators: every id gets the prior
  writer.WriteF64(1.0);
  writer.WriteF64(1.0);
  std::unique_ptr<IbccModel> model = CreateOrFail<IbccModel>(2);
  ASSERT_THAT(model->Restore(writer.Finish()), IsOk());
  std::vector<Entry> labels;
  for (int32_t a = 0; a < 600; ++a) labels.push_back({a, 1});
  std::vector<double> out(2);
  model->ItemPosterior(labels, -1, absl::MakeSpan(out));
  EXPECT_EQ(out[0], 0.0);
  EXPECT_EQ(out[1], 1.0);
}

// truth_model.h: Fit with warm_start false starts cold whatever the model holds: a model fitted
// before on another crowd ends where a fresh model fitted on this crowd does.
TEST(IbccTest, AColdFitIgnoresThePreviousParameters) {
  SyntheticCrowdSpec other = SpammerCrowdSpec();
  other.seed += 17;
  const SyntheticCrowd first = GenerateSyntheticCrowd(other);
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(SpammerCrowdSpec());
  std::unique_ptr<IbccModel> refitted = CreateOrFail<IbccModel>(3);
  std::unique_ptr<IbccModel> fresh = CreateOrFail<IbccModel>(3);
  ASSERT_THAT(refitted->Fit(first.matrix, {}, false), IsOk());
  ASSERT_THAT(refitted->Fit(crowd.matrix, {}, false), IsOk());
  ASSERT_THAT(fresh->Fit(crowd.matrix, {}, false), IsOk());
  EXPECT_EQ(AllPosteriors(*refitted, crowd.matrix, {}), AllPosteriors(*fresh, crowd.matrix, {}));
  EXPECT_EQ(refitted->Serialize(), fresh->Serialize());
}

// Restore refuses, as truncated, a checksummed blob whose annotator count needs more bytes than
// it holds: 2,000,000,000 annotators (1.6 TB of Dirichlets at K = 10) with the bytes of one. The
// count is checked before anything is allocated for it, and the model is left unfitted.
TEST(IbccTest, RestoreRefusesMoreAnnotatorsThanTheBlobHolds) {
  ByteWriter blob;
  WriteModelHeader(blob, IbccModel::kMethod, true);
  blob.WriteU32(10);
  blob.WriteU32(2'000'000'000);
  for (int c = 0; c < 10; ++c) blob.WriteF64(1.0);
  for (int c = 0; c < 100; ++c) blob.WriteF64(4.0);
  std::unique_ptr<IbccModel> model = CreateOrFail<IbccModel>(10);
  const absl::Status restored = model->Restore(blob.Finish());
  EXPECT_THAT(restored, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(restored.message(), HasSubstr("truncated"));
  EXPECT_FALSE(model->has_parameters());
}

// Promise (ibcc.h): a warm fit starts from the previous alpha and nu, "annotators beyond them from
// the prior alpha0". The model below knows annotator 0 only (alpha_0 = [[40, 1], [1, 40]],
// nu = (1, 1)); one warm iteration on an item labelled 0 by annotator 1, new to it:
// E ln kappa_k = psi(1) - psi(2) = -1 and, at the prior, E ln pi_1[0][0] = psi(4) - psi(5) = -1/4,
// E ln pi_1[1][0] = psi(1) - psi(5) = -25/12, so ll = -1 + log(e^(-1/4) + e^(-25/12)).
// Starting annotator 1 from annotator 0's alpha would give -1/40 and -H_40 instead.
TEST(IbccTest, AWarmFitStartsNewAnnotatorsFromThePrior) {
  ByteWriter writer;
  WriteModelHeader(writer, IbccModel::kMethod, true);
  writer.WriteU32(2);  // classes
  writer.WriteU32(1);  // annotators
  for (double v : {1.0, 1.0, 40.0, 1.0, 1.0, 40.0}) writer.WriteF64(v);
  TruthModelOptions one_iteration;
  one_iteration.max_iterations = 1;
  std::unique_ptr<IbccModel> model = CreateOrFail<IbccModel>(2, one_iteration);
  ASSERT_THAT(model->Restore(writer.Finish()), IsOk());
  const AnnotationMatrix m = *AnnotationMatrix::Build(1, 2, 2, {{0, 1, 0}});
  absl::StatusOr<FitReport> report = model->Fit(m, {}, true);
  ASSERT_THAT(report, IsOk());
  EXPECT_NEAR(report->log_likelihood, -1.0 + std::log(std::exp(-0.25) + std::exp(-25.0 / 12)),
              1e-12);
}

// ibcc.h: AnnotatorDirichlet and ClassDirichlet are nullopt before the first fit, and the K x K
// and K parameters after one.
TEST(IbccTest, TheDirichletsAreNulloptBeforeAFit) {
  std::unique_ptr<IbccModel> model = CreateOrFail<IbccModel>(2);
  EXPECT_FALSE(model->AnnotatorDirichlet(0).has_value());
  EXPECT_FALSE(model->ClassDirichlet().has_value());
  ASSERT_THAT(model->Fit(*AnnotationMatrix::Build(1, 1, 2, {{0, 0, 0}}), {}, false), IsOk());
  ASSERT_TRUE(model->ClassDirichlet().has_value());
  EXPECT_EQ(model->ClassDirichlet()->size(), 2u);
  ASSERT_TRUE(model->AnnotatorDirichlet(0).has_value());
  EXPECT_EQ(model->AnnotatorDirichlet(0)->size(), 4u);
}

}  // namespace
}  // namespace verity::models

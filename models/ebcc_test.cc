#include "models/ebcc.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
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

// The spammer crowd below needs more than the default 100 iterations for
// EBCC's subtypes to settle (the authors' code allows 500).
TruthModelOptions LongFit() {
  TruthModelOptions options;
  options.max_iterations = 500;
  return options;
}

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

TEST(EbccTest, RecoversTheTruthAndBeatsMajorityVote) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(SpammerCrowdSpec());
  std::unique_ptr<EbccModel> model = CreateOrFail<EbccModel>(3, LongFit());
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

// Hand-set Dirichlets, K = 2, every subtype alike: nu = (2, 2), eta = 1 for
// every (class, subtype), and annotator 0's rows for subtypes of class 0
// (6, 2), of class 1 (1, 4). Then E[ln tau] + E[ln pi] is the same for every
// (class, subtype) and the M subtypes of a class add the same term, so the
// posterior is IBCC's with alpha = [[6, 2], [1, 4]]: with
// psi(n) = -gamma + sum_{m<n} 1/m, a label 0 from annotator 0 gives
// p(0) ∝ exp(psi(6) - psi(8)) = exp(-(1/6 + 1/7)),
// p(1) ∝ exp(psi(1) - psi(5)) = exp(-25/12); an unseen annotator has the
// prior rows (4, 1) / (1, 4): a label 1 gives p(0) ∝ exp(-25/12),
// p(1) ∝ exp(-1/4).
TEST(EbccTest, HandCheckedPosterior) {
  ByteWriter writer;
  WriteModelHeader(writer, EbccModel::kMethod, true);
  writer.WriteU32(2);   // classes
  writer.WriteU32(10);  // subtypes
  writer.WriteU32(1);   // annotators
  writer.WriteF64(2.0);
  writer.WriteF64(2.0);
  for (int c = 0; c < 20; ++c) writer.WriteF64(1.0);
  for (int m = 0; m < 10; ++m) {
    writer.WriteF64(6.0);
    writer.WriteF64(2.0);
  }
  for (int m = 0; m < 10; ++m) {
    writer.WriteF64(1.0);
    writer.WriteF64(4.0);
  }
  const std::string blob = writer.Finish();
  std::unique_ptr<EbccModel> model = CreateOrFail<EbccModel>(2);
  ASSERT_THAT(model->Restore(blob), IsOk());
  std::vector<double> out(2);
  model->ItemPosterior({{0, 0}}, -1, absl::MakeSpan(out));
  const double a = std::exp(-(1.0 / 6 + 1.0 / 7)), b = std::exp(-25.0 / 12);
  EXPECT_NEAR(out[0], a / (a + b), 1e-12);
  model->ItemPosterior({{5, 1}}, -1, absl::MakeSpan(out));
  const double c = std::exp(-25.0 / 12), d = std::exp(-0.25);
  EXPECT_NEAR(out[1], d / (c + d), 1e-12);
  std::vector<double> both(2), swapped(2);
  model->ItemPosterior({{0, 0}, {5, 1}}, -1, absl::MakeSpan(both));
  model->ItemPosterior({{5, 1}, {0, 0}}, -1, absl::MakeSpan(swapped));
  EXPECT_NEAR(both[0], a * c / (a * c + b * d), 1e-12);
  EXPECT_EQ(both, swapped);
  model->ItemPosterior({}, -1, absl::MakeSpan(out));
  EXPECT_NEAR(out[0], 0.5, 1e-15);
  model->ItemPosterior({{0, 0}}, 1, absl::MakeSpan(out));
  EXPECT_EQ(out, std::vector<double>({0.0, 1.0}));
  const std::vector<double> q = model->AnnotatorConfusion(0);
  const std::vector<double> want = {6.0 / 8, 2.0 / 8, 1.0 / 5, 4.0 / 5};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(q[i], want[i], 1e-15) << i;
  EXPECT_EQ(model->Serialize(), blob);
  // Another number of subtypes is refused.
  ByteWriter other;
  WriteModelHeader(other, EbccModel::kMethod, true);
  other.WriteU32(2);
  other.WriteU32(3);
  other.WriteU32(0);
  for (int c = 0; c < 8; ++c) other.WriteF64(2.0);
  absl::Status s = model->Restore(other.Finish());
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(s.message(), HasSubstr("subtypes"));
}

// 20 items of alternating truth; annotators 0 and 1 always say 0, annotator
// 2 always gives the truth. Items 0..18 have gold, item 19 (truth 1) none:
// gold shows annotator 2 right, so item 19 follows it; without gold the
// majority (0, 1) wins.
TEST(EbccTest, GoldIsClampedAndTeachesTheConfusions) {
  std::vector<Annotation> triples;
  std::vector<int32_t> gold;
  for (int32_t i = 0; i < 20; ++i) {
    triples.push_back({i, 0, 0});
    triples.push_back({i, 1, 0});
    triples.push_back({i, 2, i % 2});
    gold.push_back(i < 19 ? i % 2 : -1);
  }
  const AnnotationMatrix m = *AnnotationMatrix::Build(20, 3, 2, triples);
  std::unique_ptr<EbccModel> with_gold = CreateOrFail<EbccModel>(2);
  ASSERT_THAT(with_gold->Fit(m, gold, false), IsOk());
  const std::vector<double> p = AllPosteriors(*with_gold, m, gold);
  for (int32_t i = 0; i < 19; ++i) EXPECT_EQ(p[2 * i + i % 2], 1.0) << i;
  EXPECT_GT(p[2 * 19 + 1], 0.5);
  // Annotator 0 said 0 on the 9 gold items of class 1.
  EXPECT_GT(with_gold->AnnotatorConfusion(0)[2], 0.6);
  std::unique_ptr<EbccModel> without_gold = CreateOrFail<EbccModel>(2);
  ASSERT_THAT(without_gold->Fit(m, {}, false), IsOk());
  EXPECT_LT(AllPosteriors(*without_gold, m, {})[2 * 19 + 1], 0.5);
  gold.resize(3);
  EXPECT_THAT(with_gold->Fit(m, gold, false), StatusIs(absl::StatusCode::kInvalidArgument));
}

// 20 items, each labelled by all 5,000 annotators, 45 % of the labels wrong
// at random: the E-step's product of per-label factors underflows on every
// item, so the fit takes the log form there, and its parameters and
// posteriors stay finite and follow the majority.
TEST(EbccTest, ThousandsOfLabelsOnAnItemKeepTheFitFinite) {
  std::vector<Annotation> triples;
  std::mt19937 generator(3);
  std::bernoulli_distribution wrong(0.45);
  for (int32_t i = 0; i < 20; ++i) {
    for (int32_t a = 0; a < 5000; ++a) {
      triples.push_back({i, a, (i % 2) ^ static_cast<int32_t>(wrong(generator))});
    }
  }
  const AnnotationMatrix m = *AnnotationMatrix::Build(20, 5000, 2, triples);
  std::unique_ptr<EbccModel> model = CreateOrFail<EbccModel>(2);
  absl::StatusOr<FitReport> report = model->Fit(m, {}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_TRUE(std::isfinite(report->log_likelihood));
  for (double v : model->AnnotatorConfusion(0)) EXPECT_TRUE(std::isfinite(v)) << v;
  const std::vector<double> p = AllPosteriors(*model, m, {});
  for (int32_t i = 0; i < 20; ++i) {
    ASSERT_TRUE(std::isfinite(p[2 * i]) && std::isfinite(p[2 * i + 1])) << i;
    EXPECT_NEAR(p[2 * i] + p[2 * i + 1], 1.0, 1e-12) << i;
    EXPECT_GT(p[2 * i + i % 2], 0.5) << i;
  }
}

TEST(EbccTest, WarmStartFromAConvergedFitConvergesQuickly) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(SpammerCrowdSpec());
  std::unique_ptr<EbccModel> model = CreateOrFail<EbccModel>(3, LongFit());
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

TEST(EbccTest, SerializeRestoreRoundTripsAndRejectsCorruptInput) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(SpammerCrowdSpec());
  std::unique_ptr<EbccModel> model = CreateOrFail<EbccModel>(3, LongFit());
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());
  std::unique_ptr<EbccModel> restored = CreateOrFail<EbccModel>(3);
  std::unique_ptr<EbccModel> binary = CreateOrFail<EbccModel>(2);
  ExpectSerializeRestoreContract(*model, *restored, *binary, crowd.matrix, 13);
  // A Dirichlet parameter below its prior (a diagonal of 2 < 4), well-formed
  // and checksummed, is refused and leaves the model as it was.
  ByteWriter bad;
  WriteModelHeader(bad, EbccModel::kMethod, true);
  bad.WriteU32(2);
  bad.WriteU32(10);
  bad.WriteU32(1);
  for (int c = 0; c < 22; ++c) bad.WriteF64(1.0);
  for (int c = 0; c < 40; ++c) bad.WriteF64(c == 0 ? 2.0 : 4.0);
  EXPECT_THAT(binary->Restore(bad.Finish()), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(binary->has_parameters());
  ASSERT_THAT(restored->Restore(CreateOrFail<EbccModel>(3)->Serialize()), IsOk());
  EXPECT_FALSE(restored->has_parameters());
}

// A restored model with the asymmetric class Dirichlet nu = (3, 1), subtype Dirichlets eta = 1 for
// every subtype of class 0 and 2 for every subtype of class 1, and no annotators (every id gets
// the prior beta: rows (4, 1) for class 0, (1, 4) for class 1).
std::unique_ptr<EbccModel> AsymmetricPriorModel(const TruthModelOptions& options = {}) {
  ByteWriter writer;
  WriteModelHeader(writer, EbccModel::kMethod, true);
  writer.WriteU32(2);   // classes
  writer.WriteU32(10);  // subtypes
  writer.WriteU32(0);   // annotators
  writer.WriteF64(3.0);
  writer.WriteF64(1.0);
  for (int m = 0; m < 10; ++m) writer.WriteF64(1.0);
  for (int m = 0; m < 10; ++m) writer.WriteF64(2.0);
  std::unique_ptr<EbccModel> model = CreateOrFail<EbccModel>(2, options);
  EXPECT_THAT(model->Restore(writer.Finish()), IsOk());
  return model;
}

// H_n = 1 + 1/2 + ... + 1/n, so that psi(n + 1) - psi(1) = H_n.
double Harmonic(int n) {
  double h = 0;
  for (int i = 1; i <= n; ++i) h += 1.0 / i;
  return h;
}

// Promise (ebcc.h): with no labels q(k, m) ∝ exp(E[ln tau_k] + E[ln pi_km]), E[ln tau_k] =
// psi(nu_k) - psi(sum nu), E[ln pi_km] = psi(eta_km) - psi(sum_m eta_km). Each class's 10
// subtypes are equal, so q(0) / q(1) = exp([psi(3) - psi(1)] + [psi(1) - psi(10)] -
// [psi(2) - psi(20)]) = exp(1.5 - H_9 + (H_19 - 1)) = exp(0.5 + 1/10 + ... + 1/19)
// = exp(1.2187714); q(0) = 1 / (1 + exp(-1.2187714)) = 0.7718473. Neither digamma normaliser
// cancels: the class prior is asymmetric and the subtype rows of the two classes have different
// totals (10 and 20).
TEST(EbccTest, TheClassAndSubtypePriorsEnterAsDigammaExpectations) {
  std::unique_ptr<EbccModel> model = AsymmetricPriorModel();
  std::vector<double> out(2);
  model->ItemPosterior({}, -1, absl::MakeSpan(out));
  const double log_ratio = 1.5 - Harmonic(9) + (Harmonic(19) - 1);
  EXPECT_NEAR(log_ratio, 1.2187714, 1e-7);
  EXPECT_NEAR(out[0], 1 / (1 + std::exp(-log_ratio)), 1e-12);
  EXPECT_NEAR(out[0], 0.7718473, 1e-7);
  EXPECT_NEAR(out[0] + out[1], 1.0, 1e-12);
}

// Promise (ebcc.h): FitReport::log_likelihood is the log normaliser of the E-step, sum_i
// ln(sum_{k,m} exp(E[ln tau_k] + E[ln pi_km] + sum_labels E[ln v_jkml])), and a warm fit starts
// from the previous Dirichlets. One warm iteration from the model above; one item labelled 0 by
// an annotator with the prior (E[ln v] of label 0: psi(4) - psi(5) = -1/4 for class 0,
// psi(1) - psi(5) = -25/12 for class 1). Per subtype:
//   class 0: psi(3) - psi(4) + psi(1) - psi(10) - 1/4 = -1/3 - H_9 - 1/4,
//   class 1: psi(1) - psi(4) + psi(2) - psi(20) - 25/12 = -11/6 - (H_19 - 1) - 25/12,
// ll = log(10 exp(class 0) + 10 exp(class 1)) = -1.0635399.
TEST(EbccTest, TheLogLikelihoodKeepsTheNormalisersOfThePriors) {
  TruthModelOptions one_iteration;
  one_iteration.max_iterations = 1;
  std::unique_ptr<EbccModel> model = AsymmetricPriorModel(one_iteration);
  const AnnotationMatrix m = *AnnotationMatrix::Build(1, 1, 2, {{0, 0, 0}});
  absl::StatusOr<FitReport> report = model->Fit(m, {}, true);
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->iterations, 1);
  const double class0 = -1.0 / 3 - Harmonic(9) - 0.25;
  const double class1 = -11.0 / 6 - (Harmonic(19) - 1) - 25.0 / 12;
  EXPECT_NEAR(report->log_likelihood, std::log(10 * std::exp(class0) + 10 * std::exp(class1)),
              1e-12);
  EXPECT_NEAR(report->log_likelihood, -1.0635399, 1e-7);
}

// Promise (ebcc.h, PredictLabel): the predictive of a new label conditions on the item's
// subtype, so annotators who err alike predict each other. 800 items of 2 classes, 30 % of
// them "hard"; annotators 0..2 (a clique) give the wrong class on hard items and the right one
// on easy items with probability 0.9, annotators 3..8 the right class with probability 0.9
// everywhere (so the class is clear). On item i the label of clique member i % 3 is held out
// and predicted from the item's other labels: on a hard item the other clique members' wrong
// labels say what it will answer, which sum_k p(k | labels) AnnotatorConfusion(a)[k][.]
// (TruthModel::PredictLabel, the class alone) cannot express. Without parameters the
// predictive is the default one.
TEST(EbccTest, PredictLabelConditionsOnTheSubtypeSoCorrelatedAnnotatorsPredictEachOther) {
  constexpr int32_t kItems = 800;
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<Annotation> kept;
  std::vector<int32_t> held(kItems);
  for (int32_t i = 0; i < kItems; ++i) {
    const int32_t truth = uniform(rng) < 0.5 ? 0 : 1;
    const bool hard = uniform(rng) < 0.3;
    for (int32_t a = 0; a < 9; ++a) {
      const bool clique = a < 3;
      const double right = clique ? (hard ? 0.1 : 0.9) : 0.9;
      const int32_t label = uniform(rng) < right ? truth : 1 - truth;
      if (a == i % 3) {
        held[i] = label;
      } else {
        kept.push_back({i, a, label});
      }
    }
  }
  const AnnotationMatrix data = *AnnotationMatrix::Build(kItems, 9, 2, kept);
  std::unique_ptr<EbccModel> model = CreateOrFail<EbccModel>(2, LongFit());

  const std::vector<double> before = model->PredictLabel(0, data.LabelsOfItem(0), 0);
  const std::vector<double> before_default =
      model->TruthModel::PredictLabel(0, data.LabelsOfItem(0), 0);
  ASSERT_EQ(before.size(), 2u);
  EXPECT_EQ(before, before_default);

  ASSERT_THAT(model->Fit(data, {}, /*warm_start=*/false), IsOk());
  double subtype = 0.0, class_only = 0.0;
  for (int32_t i = 0; i < kItems; ++i) {
    const std::vector<double> p = model->PredictLabel(i, data.LabelsOfItem(i), i % 3);
    const std::vector<double> d =
        model->TruthModel::PredictLabel(i, data.LabelsOfItem(i), i % 3);
    ASSERT_EQ(p.size(), 2u);
    EXPECT_NEAR(p[0] + p[1], 1.0, 1e-12) << i;
    EXPECT_NEAR(d[0] + d[1], 1.0, 1e-12) << i;
    subtype += std::log(p[held[i]]) / kItems;
    class_only += std::log(d[held[i]]) / kItems;
  }
  EXPECT_GT(subtype, class_only + 0.05) << "subtype " << subtype << " class only " << class_only;
}

// Promise (ebcc.h): Restore refuses a Dirichlet parameter below its prior or not finite, and
// leaves the model as it was: nu below alpha (1), eta below a_pi / M (0.01), a confusion cell
// below beta (4 on the diagonal, 1 elsewhere; checked in the last subtype of class 1 too), or
// infinity / NaN anywhere. The priors themselves are accepted.
TEST(EbccTest, RestoreRefusesEveryParameterBelowItsPriorOrNotFinite) {
  // K = 2, one annotator; `at` (0..61, in the order nu, eta, mu) is overwritten with `value`.
  const auto blob = [](int at, double value) {
    std::vector<double> v = {1.0, 1.0};
    for (int c = 0; c < 20; ++c) v.push_back(0.01);
    for (int t = 0; t < 2; ++t) {
      for (int m = 0; m < 10; ++m) {
        for (int l = 0; l < 2; ++l) v.push_back(t == l ? 4.0 : 1.0);
      }
    }
    if (at >= 0) v[at] = value;
    ByteWriter writer;
    WriteModelHeader(writer, EbccModel::kMethod, true);
    writer.WriteU32(2);   // classes
    writer.WriteU32(10);  // subtypes
    writer.WriteU32(1);   // annotators
    for (double x : v) writer.WriteF64(x);
    return writer.Finish();
  };
  std::unique_ptr<EbccModel> model = CreateOrFail<EbccModel>(2);
  ASSERT_THAT(model->Restore(blob(-1, 0.0)), IsOk());
  ASSERT_THAT(model->Restore(blob(0, 3.0)), IsOk());
  const std::string good = model->Serialize();
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // nu_0, eta_{0,0}, eta_{1,9}, the diagonal and off-diagonal of (class 1, subtype 9).
  for (const auto& [at, value] : std::vector<std::pair<int, double>>{
           {0, 0.5}, {1, inf}, {2, 0.005}, {21, 0.0}, {21, nan}, {61, 3.9}, {60, 0.9},
           {61, inf}, {25, nan}}) {
    EXPECT_THAT(model->Restore(blob(at, value)), StatusIs(absl::StatusCode::kInvalidArgument))
        << at << " " << value;
  }
  EXPECT_TRUE(model->Serialize() == good) << "a refused Restore changed the model";
}

// Promise (ebcc.h): gold items are clamped, q_i(k, m) = 0 for k other than the gold class, so the
// log normaliser of a gold item runs over the subtypes of its gold class only. The warm
// iteration of the test above with the item's gold class g: ll = log(10 exp(class g)), with the
// per-subtype log scores class0 and class1 computed there.
TEST(EbccTest, AGoldItemAddsTheLogNormaliserOfItsGoldClassSubtypes) {
  TruthModelOptions one_iteration;
  one_iteration.max_iterations = 1;
  const AnnotationMatrix m = *AnnotationMatrix::Build(1, 1, 2, {{0, 0, 0}});
  const double class0 = -1.0 / 3 - Harmonic(9) - 0.25;
  const double class1 = -11.0 / 6 - (Harmonic(19) - 1) - 25.0 / 12;
  for (int32_t g : {0, 1}) {
    std::unique_ptr<EbccModel> model = AsymmetricPriorModel(one_iteration);
    absl::StatusOr<FitReport> report = model->Fit(m, std::vector<int32_t>{g}, true);
    ASSERT_THAT(report, IsOk());
    EXPECT_EQ(report->iterations, 1);
    EXPECT_NEAR(report->log_likelihood, std::log(10.0) + (g == 0 ? class0 : class1), 1e-12) << g;
  }
}

// Promise (ebcc.h): M-step nu_k = alpha + sum_i q_i(k), eta_km = a_pi / M + sum_i q_i(k, m),
// mu_jkml = beta_kl + sum over j's labels l of q_i(k, m), with alpha = 1, a_pi / M = 0.01,
// beta = (4, 1 | 1, 4); gold items have q_i(k, m) = 0 for k other than the gold class. Three
// items, all gold class 0, annotator 0 says 0, 0, 1. Whatever the split over the subtypes:
// nu = (4, 1); class 1 has no mass, so each eta_1m is 0.01 and each of annotator 0's class-1
// rows is the prior (1, 4); class 0's eta sum to 0.1 + 3, and its rows summed over the
// subtypes to 10 (4, 1) + (2, 1) = (42, 11). The parameters are read back from Serialize()
// (nu, eta, then annotator blocks [k][m][l], as the Restore blobs above).
TEST(EbccTest, TheDirichletsArePriorPlusCountsByTrueClassAndSubtype) {
  const AnnotationMatrix m = *AnnotationMatrix::Build(3, 1, 2, {{0, 0, 0}, {1, 0, 0}, {2, 0, 1}});
  std::unique_ptr<EbccModel> model = CreateOrFail<EbccModel>(2);
  ASSERT_THAT(model->Fit(m, std::vector<int32_t>{0, 0, 0}, false), IsOk());
  const std::string blob = model->Serialize();
  absl::StatusOr<ByteReader> reader = ByteReader::Open(blob);
  ASSERT_THAT(reader, IsOk());
  ASSERT_THAT(ReadModelHeader(*reader, EbccModel::kMethod), IsOk());
  std::vector<uint32_t> counts;
  for (int i = 0; i < 3; ++i) counts.push_back(*reader->ReadU32());
  ASSERT_EQ(counts, std::vector<uint32_t>({2, 10, 1}));
  std::vector<double> v;
  while (reader->remaining() > 0) v.push_back(*reader->ReadF64());
  ASSERT_EQ(v.size(), 2u + 20u + 40u);
  EXPECT_NEAR(v[0], 4.0, 1e-9);
  EXPECT_NEAR(v[1], 1.0, 1e-12);
  double eta0 = 0.0;
  for (int s = 0; s < 10; ++s) {
    EXPECT_GE(v[2 + s], 0.01) << s;
    eta0 += v[2 + s];
    EXPECT_NEAR(v[12 + s], 0.01, 1e-15) << s;
  }
  EXPECT_NEAR(eta0, 3.1, 1e-9);
  double said0 = 0.0, said1 = 0.0;
  for (int s = 0; s < 10; ++s) {
    said0 += v[22 + 2 * s];
    said1 += v[22 + 2 * s + 1];
    EXPECT_NEAR(v[42 + 2 * s], 1.0, 1e-12) << s;
    EXPECT_NEAR(v[42 + 2 * s + 1], 4.0, 1e-12) << s;
  }
  EXPECT_NEAR(said0, 42.0, 1e-9);
  EXPECT_NEAR(said1, 11.0, 1e-9);
}

// Promise (ebcc.h): gold items are clamped, q_i(k, m) = 0 for every class k other than the gold
// class, those *before* it included, and each item's q_i sums to 1. Items 0..2 are gold class 1,
// labelled 0, 0, 1 by annotator 0; items 3 and 4 have no gold and are labelled 0 by annotator 1
// (so class 0 has mass). Whatever the subtype split: the nu sum to K alpha + 5 = 7 and the eta
// to K a_pi + 5 = 5.2; annotator 0's class-0 rows get no count and sum to the prior's 10 (4 + 1)
// = 50, its class-1 rows to 10 (1 + 4) + 3 = 53.
TEST(EbccTest, AGoldItemOfALaterClassGivesTheEarlierClassesNoMass) {
  const AnnotationMatrix m =
      *AnnotationMatrix::Build(5, 2, 2, {{0, 0, 0}, {1, 0, 0}, {2, 0, 1}, {3, 1, 0}, {4, 1, 0}});
  std::unique_ptr<EbccModel> model = CreateOrFail<EbccModel>(2);
  ASSERT_THAT(model->Fit(m, std::vector<int32_t>{1, 1, 1, -1, -1}, false), IsOk());
  const std::string blob = model->Serialize();
  absl::StatusOr<ByteReader> reader = ByteReader::Open(blob);
  ASSERT_THAT(reader, IsOk());
  ASSERT_THAT(ReadModelHeader(*reader, EbccModel::kMethod), IsOk());
  for (int i = 0; i < 3; ++i) ASSERT_THAT(reader->ReadU32(), IsOk());
  std::vector<double> v;
  while (reader->remaining() > 0) v.push_back(*reader->ReadF64());
  ASSERT_EQ(v.size(), 2u + 20u + 80u);
  EXPECT_NEAR(v[0] + v[1], 7.0, 1e-9);
  EXPECT_GE(v[1], 4.0 - 1e-9);
  double eta = 0.0;
  for (int s = 0; s < 20; ++s) eta += v[2 + s];
  EXPECT_NEAR(eta, 5.2, 1e-9);
  double class0 = 0.0, class1 = 0.0;
  for (int c = 0; c < 20; ++c) {
    class0 += v[22 + c];
    class1 += v[42 + c];
  }
  EXPECT_NEAR(class0, 50.0, 1e-9);
  EXPECT_NEAR(class1, 53.0, 1e-9);
}

// truth_model.h: a gold label clamps the posterior to one-hot, before a fit too (ebcc.h: the soft
// majority vote before a fit, which is one-hot on gold).
TEST(EbccTest, BeforeAFitAGoldLabelClampsThePosterior) {
  std::unique_ptr<EbccModel> model = CreateOrFail<EbccModel>(2);
  std::vector<double> out(2);
  model->ItemPosterior({{3, 0}, {4, 0}}, 1, absl::MakeSpan(out));
  EXPECT_EQ(out, std::vector<double>({0.0, 1.0}));
}

// ebcc.h: Create is INVALID_ARGUMENT if num_classes < 2.
TEST(EbccTest, CreateRefusesFewerThanTwoClasses) {
  EXPECT_THAT(EbccModel::Create(1, {}).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(EbccModel::Create(2, {}).status(), IsOk());
}

// truth_model.h / ebcc.h: ItemPosterior does not depend on the order of the labels, bit for bit
// (the labels are put in (annotator, label) order before the sums). Every item of the crowd,
// its labels given in reverse.
TEST(EbccTest, PosteriorIsTheSameBitForBitForAnyOrderOfTheLabels) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(SpammerCrowdSpec());
  std::unique_ptr<EbccModel> model = CreateOrFail<EbccModel>(3);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());
  EXPECT_EQ(ItemsWhosePosteriorDependsOnLabelOrder(*model, crowd.matrix), 0);
}

// ebcc.h: before a fit every annotator's confusion is uniform, 1 / K in every cell (K = 3).
TEST(EbccTest, BeforeAFitTheConfusionIsUniformOverThreeClasses) {
  std::unique_ptr<EbccModel> model = CreateOrFail<EbccModel>(3);
  ExpectUniformConfusionBeforeAFit(*model);
  // PredictLabel before a fit is the default posterior x confusion: uniform too.
  for (double p : model->PredictLabel(0, {{0, 1}}, 5)) EXPECT_DOUBLE_EQ(p, 1.0 / 3);
}

// ebcc.h: a warm fit starts from the previous Dirichlet parameters, annotators' included. The
// restored annotator 0 is inverted: every class-0 row (4, 40), every class-1 row (40, 4); nu =
// (1, 1) and every eta 0.01 keep the class and subtype priors symmetric. Its label 0 on the one
// item then gives, in the first E-step, q(class 1) = e^psi(40) / (e^psi(40) + e^psi(4)) =
// 1 / (1 + e^-(H(39) - H(3))) = 0.9172 (from the prior (4, 1 | 1, 4) it would be 0.14), so after
// one iteration nu_1 = 1 + q(class 1).
TEST(EbccTest, AWarmFitStartsFromTheAnnotatorsPreviousDirichlets) {
  ByteWriter writer;
  WriteModelHeader(writer, EbccModel::kMethod, true);
  writer.WriteU32(2);   // classes
  writer.WriteU32(10);  // subtypes
  writer.WriteU32(1);   // annotators
  writer.WriteF64(1.0);
  writer.WriteF64(1.0);
  for (int s = 0; s < 20; ++s) writer.WriteF64(0.01);
  for (int t = 0; t < 2; ++t) {
    for (int s = 0; s < 10; ++s) {
      writer.WriteF64(t == 0 ? 4.0 : 40.0);
      writer.WriteF64(t == 0 ? 40.0 : 4.0);
    }
  }
  TruthModelOptions one_iteration;
  one_iteration.max_iterations = 1;
  std::unique_ptr<EbccModel> model = CreateOrFail<EbccModel>(2, one_iteration);
  ASSERT_THAT(model->Restore(writer.Finish()), IsOk());
  const AnnotationMatrix m = *AnnotationMatrix::Build(1, 1, 2, {{0, 0, 0}});
  ASSERT_THAT(model->Fit(m, {}, /*warm_start=*/true), IsOk());
  const std::string blob = model->Serialize();
  absl::StatusOr<ByteReader> reader = ByteReader::Open(blob);
  ASSERT_THAT(reader, IsOk());
  ASSERT_THAT(ReadModelHeader(*reader, EbccModel::kMethod), IsOk());
  for (int i = 0; i < 3; ++i) ASSERT_THAT(reader->ReadU32(), IsOk());
  const double nu0 = *reader->ReadF64();
  const double nu1 = *reader->ReadF64();
  const double q1 = 1.0 / (1.0 + std::exp(-(Harmonic(39) - Harmonic(3))));
  EXPECT_NEAR(nu1, 1.0 + q1, 1e-9);
  EXPECT_NEAR(nu0, 2.0 - q1, 1e-9);
}

// truth_model.h: on error Restore leaves the model unchanged. A blob with trailing bytes after
// the parameters is refused, and neither an empty model nor one fitted on other labels takes
// its parameters.
TEST(EbccTest, ARefusedRestoreLeavesTheModelUnchanged) {
  const AnnotationMatrix first =
      *AnnotationMatrix::Build(3, 2, 2, {{0, 0, 0}, {0, 1, 0}, {1, 0, 1}, {1, 1, 1}, {2, 0, 0}});
  const AnnotationMatrix second =
      *AnnotationMatrix::Build(3, 2, 2, {{0, 0, 1}, {0, 1, 0}, {1, 0, 1}, {2, 1, 1}});
  std::unique_ptr<EbccModel> fitted = CreateOrFail<EbccModel>(2);
  ASSERT_THAT(fitted->Fit(first, {}, false), IsOk());
  const std::string blob = WithTrailingBytes(fitted->Serialize());
  std::unique_ptr<EbccModel> empty = CreateOrFail<EbccModel>(2);
  EXPECT_THAT(empty->Restore(blob), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(empty->has_parameters());
  std::unique_ptr<EbccModel> other = CreateOrFail<EbccModel>(2);
  ASSERT_THAT(other->Fit(second, {}, false), IsOk());
  const std::string before = other->Serialize();
  ASSERT_NE(before, fitted->Serialize());
  EXPECT_THAT(other->Restore(blob), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(other->Serialize(), before);
}

// truth_model.h: Fit with warm_start false starts cold whatever the model holds: a model fitted
// before on another crowd ends where a fresh model fitted on this crowd does.
TEST(EbccTest, AColdFitIgnoresThePreviousParameters) {
  SyntheticCrowdSpec spec = SpammerCrowdSpec();
  spec.num_items = 300;
  SyntheticCrowdSpec other = spec;
  other.seed += 17;
  const SyntheticCrowd first = GenerateSyntheticCrowd(other);
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  std::unique_ptr<EbccModel> refitted = CreateOrFail<EbccModel>(3);
  std::unique_ptr<EbccModel> fresh = CreateOrFail<EbccModel>(3);
  ASSERT_THAT(refitted->Fit(first.matrix, {}, false), IsOk());
  ASSERT_THAT(refitted->Fit(crowd.matrix, {}, false), IsOk());
  ASSERT_THAT(fresh->Fit(crowd.matrix, {}, false), IsOk());
  EXPECT_EQ(AllPosteriors(*refitted, crowd.matrix, {}), AllPosteriors(*fresh, crowd.matrix, {}));
  EXPECT_EQ(refitted->Serialize(), fresh->Serialize());
}

// Promise (ebcc.h): a cold fit starts from the majority vote with gold items clamped. Ten items,
// all gold 1, each labelled 0 by annotator 0, one iteration. The clamped start puts all ten
// items' mass on class 1: nu = (1, 11), the subtypes of class 1 hold S_m >= 0 with sum 10, so
// some m has S_m >= 1; annotator 0's row (1, m) is (1 + S_m, 4). The E-step's log normaliser of
// each (clamped) item is at least that of that subtype alone:
//   E ln tau_1 + E ln pi_1m + E ln v_0[1, m, 0]
//   >= [psi(11) - psi(12)] + [psi(1.01) - psi(10.1)] + [psi(2) - psi(6)]
//   = -1/11 - 2.8230 - (1/2 + 1/3 + 1/4 + 1/5) = -4.197,
// so the log-likelihood is above -42. A start that read the 0s as class 0 would leave class 1
// with almost no subtype mass (E ln pi_1m near psi(0.01) - psi(0.1), about -90 per item).
TEST(EbccTest, TheColdStartMajorityVoteClampsTheGoldItems) {
  std::vector<Annotation> triples;
  for (int32_t i = 0; i < 10; ++i) triples.push_back({i, 0, 0});
  const AnnotationMatrix m = *AnnotationMatrix::Build(10, 1, 2, triples);
  TruthModelOptions one_iteration;
  one_iteration.max_iterations = 1;
  std::unique_ptr<EbccModel> model = CreateOrFail<EbccModel>(2, one_iteration);
  absl::StatusOr<FitReport> report = model->Fit(m, std::vector<int32_t>(10, 1), false);
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->iterations, 1);
  EXPECT_GT(report->log_likelihood, -42.0);
  EXPECT_LT(report->log_likelihood, 0.0);
}

// Promise (ebcc.h): the fit stops when every q_i(k) moved less than kClassTolerance "between two
// E-steps"; the first E-step has none before it, so even a crowd without a single label (where
// nothing moves) stops converged at iteration 2, not 1.
TEST(EbccTest, TheFirstIterationNeverConvergesEvenWithoutLabels) {
  const AnnotationMatrix m = *AnnotationMatrix::Build(3, 2, 2, {});
  std::unique_ptr<EbccModel> model = CreateOrFail<EbccModel>(2);
  absl::StatusOr<FitReport> report = model->Fit(m, {}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_TRUE(report->converged);
  EXPECT_EQ(report->iterations, 2);
}

// Restore refuses, as truncated, a checksummed blob whose annotator count needs more bytes than
// it holds: 2,000,000,000 annotators (640 GB of Dirichlets at K = 2) with the bytes of one. The
// count is checked before anything is allocated for it, and the model is left unfitted.
TEST(EbccTest, RestoreRefusesMoreAnnotatorsThanTheBlobHolds) {
  ByteWriter blob;
  WriteModelHeader(blob, EbccModel::kMethod, true);
  blob.WriteU32(2);
  blob.WriteU32(10);
  blob.WriteU32(2'000'000'000);
  for (int c = 0; c < 22; ++c) blob.WriteF64(1.0);
  for (int c = 0; c < 40; ++c) blob.WriteF64(4.0);
  std::unique_ptr<EbccModel> model = CreateOrFail<EbccModel>(2);
  const absl::Status restored = model->Restore(blob.Finish());
  EXPECT_THAT(restored, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(restored.message(), HasSubstr("truncated"));
  EXPECT_FALSE(model->has_parameters());
}

// Promise (ebcc.h): an item whose product of factors falls below 1e-200 takes the log form, which
// agrees with the product form: its log normaliser enters the log-likelihood, over the gold
// class's subtypes alone for a gold item. One item labelled by 600 annotators unknown to the
// model of the tests above (prior rows (4, 1) and (1, 4)), 300 saying 0 and 300 saying 1: every
// class's subtypes score E ln v = 300 (psi(4) - psi(5)) + 300 (psi(1) - psi(5)) = 300 (-1/4) +
// 300 (-25/12) = -700 over the labels (the product of factors, e^(-11/6 * 300) at most,
// underflows), plus the priors class0 = psi(3) - psi(4) + psi(1) - psi(10) = -1/3 - H_9 and
// class1 = psi(1) - psi(4) + psi(2) - psi(20) = -11/6 - (H_19 - 1). One warm iteration:
// ll = log(10 e^class0 + 10 e^class1) - 700 without gold, log(10 e^class_g) - 700 with gold g,
// and the other class gets no mass.
TEST(EbccTest, TheLogFormAddsTheItemsLogNormaliserOverItsGoldClass) {
  std::vector<Annotation> triples;
  for (int32_t a = 0; a < 600; ++a) triples.push_back({0, a, a % 2});
  const AnnotationMatrix m = *AnnotationMatrix::Build(1, 600, 2, triples);
  TruthModelOptions one_iteration;
  one_iteration.max_iterations = 1;
  const double class0 = -1.0 / 3 - Harmonic(9);
  const double class1 = -11.0 / 6 - (Harmonic(19) - 1);
  const double expected[3] = {std::log(10 * std::exp(class0) + 10 * std::exp(class1)) - 700,
                              std::log(10.0) + class0 - 700, std::log(10.0) + class1 - 700};
  for (int32_t g : {-1, 0, 1}) {
    std::unique_ptr<EbccModel> model = AsymmetricPriorModel(one_iteration);
    absl::StatusOr<FitReport> report = model->Fit(m, std::vector<int32_t>{g}, true);
    ASSERT_THAT(report, IsOk());
    EXPECT_NEAR(report->log_likelihood, expected[g + 1], 1e-8) << g;
    if (g < 0) continue;
    // The other class gets no mass: annotator 0's rows for it keep the prior beta, (4, 1) / 5
    // on the diagonal side, whatever the subtype proportions.
    const std::vector<double> confusion = model->AnnotatorConfusion(0);
    for (int l = 0; l < 2; ++l) {
      EXPECT_NEAR(confusion[(1 - g) * 2 + l], l == 1 - g ? 0.8 : 0.2, 1e-12) << g << " " << l;
    }
  }
}

// truth_model.h (FitReport::log_likelihood): a gold item without labels adds nothing in ebcc, and
// it adds nothing to the Dirichlets either, from the cold start on. Item 0 has gold 0 and
// annotator 0's label 0; items 1 and 2 have gold 1 and no label. One iteration gives the
// log-likelihood and the parameters of a fit of item 0 alone (the same subtype split: it is
// item 0 in both). Counting the two gold items in the cold start would raise nu_1 from 1 to 3
// and move item 0's E ln tau_0 by psi(3) - psi(5) = -7/12.
TEST(EbccTest, GoldItemsWithoutLabelsAddNothingToTheFit) {
  TruthModelOptions one_iteration;
  one_iteration.max_iterations = 1;
  const AnnotationMatrix alone = *AnnotationMatrix::Build(1, 1, 2, {{0, 0, 0}});
  const AnnotationMatrix with_unlabelled = *AnnotationMatrix::Build(3, 1, 2, {{0, 0, 0}});
  std::unique_ptr<EbccModel> reference = CreateOrFail<EbccModel>(2, one_iteration);
  std::unique_ptr<EbccModel> model = CreateOrFail<EbccModel>(2, one_iteration);
  absl::StatusOr<FitReport> expected = reference->Fit(alone, std::vector<int32_t>{0}, false);
  absl::StatusOr<FitReport> report =
      model->Fit(with_unlabelled, std::vector<int32_t>{0, 1, 1}, false);
  ASSERT_THAT(expected, IsOk());
  ASSERT_THAT(report, IsOk());
  EXPECT_NEAR(report->log_likelihood, expected->log_likelihood, 1e-12);
  EXPECT_EQ(model->Serialize(), reference->Serialize());
}

// Promise (ebcc.h): a warm fit starts from the previous Dirichlets, "annotators beyond them from
// the prior beta". The model below knows annotator 0 only (rows (40, 1) and (1, 40)); one warm
// iteration on an item labelled 0 by annotator 1, new to it. With the priors of
// AsymmetricPriorModel (class0 = -1/3 - H_9, class1 = -11/6 - (H_19 - 1) per subtype) and
// annotator 1 at the prior beta (E ln v = psi(4) - psi(5) = -1/4 for class 0, psi(1) - psi(5)
// = -25/12 for class 1): ll = log(10 e^(class0 - 1/4) + 10 e^(class1 - 25/12)). Starting
// annotator 1 from annotator 0's rows would give -1/40 and -H_40 instead.
TEST(EbccTest, AWarmFitStartsNewAnnotatorsFromThePrior) {
  ByteWriter writer;
  WriteModelHeader(writer, EbccModel::kMethod, true);
  writer.WriteU32(2);   // classes
  writer.WriteU32(10);  // subtypes
  writer.WriteU32(1);   // annotators
  writer.WriteF64(3.0);
  writer.WriteF64(1.0);
  for (int m = 0; m < 10; ++m) writer.WriteF64(1.0);
  for (int m = 0; m < 10; ++m) writer.WriteF64(2.0);
  for (int k = 0; k < 2; ++k) {
    for (int m = 0; m < 10; ++m) {
      for (int l = 0; l < 2; ++l) writer.WriteF64(k == l ? 40.0 : 1.0);
    }
  }
  TruthModelOptions one_iteration;
  one_iteration.max_iterations = 1;
  std::unique_ptr<EbccModel> model = CreateOrFail<EbccModel>(2, one_iteration);
  ASSERT_THAT(model->Restore(writer.Finish()), IsOk());
  const AnnotationMatrix m = *AnnotationMatrix::Build(1, 2, 2, {{0, 1, 0}});
  absl::StatusOr<FitReport> report = model->Fit(m, {}, true);
  ASSERT_THAT(report, IsOk());
  const double class0 = -1.0 / 3 - Harmonic(9);
  const double class1 = -11.0 / 6 - (Harmonic(19) - 1);
  EXPECT_NEAR(report->log_likelihood,
              std::log(10 * std::exp(class0 - 0.25) + 10 * std::exp(class1 - 25.0 / 12)), 1e-12);
}

// ebcc.h: SubtypeProportions is nullopt before a fit (not an empty or a prior table), and
// K x M after one.
TEST(EbccTest, SubtypeProportionsAreNulloptBeforeAFit) {
  std::unique_ptr<EbccModel> model = CreateOrFail<EbccModel>(2);
  EXPECT_FALSE(model->SubtypeProportions().has_value());
  ASSERT_THAT(model->Fit(*AnnotationMatrix::Build(1, 1, 2, {{0, 0, 0}}), {}, false), IsOk());
  ASSERT_TRUE(model->SubtypeProportions().has_value());
  EXPECT_EQ(model->SubtypeProportions()->size(), 20u);
}

}  // namespace
}  // namespace verity::models

#include "models/mace.h"

#include <cmath>
#include <cstdint>
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
using ::verity::models::testing::Accuracy;
using ::verity::models::testing::GenerateSyntheticCrowd;
using ::verity::models::testing::SymmetricConfusion;
using ::verity::models::testing::SyntheticCrowd;
using ::verity::models::testing::SyntheticCrowdSpec;
using ::verity::models::testing::WithTrailingBytes;
using ::verity::models::testing::ItemsWhosePosteriorDependsOnLabelOrder;
using ::verity::models::testing::ExpectUniformConfusionBeforeAFit;
using ::verity::models::testing::ExpectTheFirstIterationNeverConverges;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;
using Entry = AnnotationMatrix::Entry;

// 10 items, 5 annotators, 3 classes: annotators 3 and 4 nearly always say 2.
// Expected labels from crowd-kit's MACE (default: variational Bayes, 10
// restarts; the same labels for random_state 0, 1 and 2):
//   PYTHONPATH=../shared/peers/crowd-kit /usr/bin/python3
//     tools/crowdkit_reference.py --methods=MACE --triples='0,0,0 0,1,0
//     0,3,2 0,4,2 1,0,1 1,2,1 1,3,2 1,4,2 2,1,2 2,2,2 2,3,2 2,4,2 3,0,0
//     3,2,1 3,3,2 3,4,2 4,0,1 4,1,1 4,2,0 4,3,2 5,1,0 5,2,0 5,4,2 6,0,2
//     6,1,2 6,4,2 7,0,1 7,3,2 7,4,2 8,0,0 8,1,0 8,2,0 8,3,2 9,1,1 9,2,1
//     9,3,2 9,4,2'
// (crowd-kit 35f0661). The majority vote is 0,1,2,2,1,0,2,2,0,1: MACE
// overrules the two spammers on items 3 and 7. (crowd-kit's method='em',
// with its smoothing of 0.01 / K and no priors, puts every item in class 2
// here; Verity's EM uses crowd-kit's VB priors as pseudo-counts.)
TEST(MaceTest, MatchesCrowdKitOnAFixedCase) {
  const std::vector<Annotation> triples = {
      {0, 0, 0}, {0, 1, 0}, {0, 3, 2}, {0, 4, 2}, {1, 0, 1}, {1, 2, 1},
      {1, 3, 2}, {1, 4, 2}, {2, 1, 2}, {2, 2, 2}, {2, 3, 2}, {2, 4, 2},
      {3, 0, 0}, {3, 2, 1}, {3, 3, 2}, {3, 4, 2}, {4, 0, 1}, {4, 1, 1},
      {4, 2, 0}, {4, 3, 2}, {5, 1, 0}, {5, 2, 0}, {5, 4, 2}, {6, 0, 2},
      {6, 1, 2}, {6, 4, 2}, {7, 0, 1}, {7, 3, 2}, {7, 4, 2}, {8, 0, 0},
      {8, 1, 0}, {8, 2, 0}, {8, 3, 2}, {9, 1, 1}, {9, 2, 1}, {9, 3, 2},
      {9, 4, 2}};
  const AnnotationMatrix m = *AnnotationMatrix::Build(10, 5, 3, triples);
  std::unique_ptr<MaceModel> model = CreateOrFail<MaceModel>(3);
  ASSERT_THAT(model->Fit(m, {}, false), IsOk());
  const std::vector<int32_t> expected = {0, 1, 2, 0, 1, 0, 2, 1, 0, 1};
  EXPECT_EQ(ArgMax(AllPosteriors(*model, m, {}), 3), expected);
  EXPECT_LT(*model->AnnotatorCompetence(3), *model->AnnotatorCompetence(0));
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

TEST(MaceTest, FindsTheSpammersAndBeatsMajorityVote) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(SpammerCrowdSpec());
  std::unique_ptr<MaceModel> model = CreateOrFail<MaceModel>(3);
  absl::StatusOr<FitReport> report = model->Fit(crowd.matrix, {}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_TRUE(report->converged);
  // A good annotator of accuracy p has theta = (3p - 1) / 2 (0.475 to 0.85);
  // a spammer theta near 0 with xi near (0.8, 0.1, 0.1).
  for (int a = 0; a < 6; ++a) {
    const double want = (3 * (0.65 + 0.05 * a) - 1) / 2;
    EXPECT_NEAR(*model->AnnotatorCompetence(a), want, 0.08) << a;
  }
  for (int a = 6; a < 12; ++a) {
    EXPECT_LT(*model->AnnotatorCompetence(a), 0.1) << a;
    EXPECT_NEAR((*model->AnnotatorStrategy(a))[0], 0.8, 0.06) << a;
  }
  auto mv = MajorityVoteModel::Create(3, {});
  const double mv_accuracy = Accuracy(AllPosteriors(**mv, crowd.matrix, {}),
                                      crowd.matrix, crowd.truth);
  const double accuracy = Accuracy(AllPosteriors(*model, crowd.matrix, {}),
                                   crowd.matrix, crowd.truth);
  EXPECT_GT(accuracy, mv_accuracy + 0.05);
  // The confusion is theta on the diagonal plus (1 - theta) xi.
  const std::vector<double> c = model->AnnotatorConfusion(2);
  const double theta = *model->AnnotatorCompetence(2);
  const std::vector<double> xi = *model->AnnotatorStrategy(2);
  for (int t = 0; t < 3; ++t) {
    double row = 0.0;
    for (int y = 0; y < 3; ++y) {
      EXPECT_NEAR(c[3 * t + y], (1 - theta) * xi[y] + (t == y ? theta : 0.0),
                  1e-15);
      row += c[3 * t + y];
    }
    EXPECT_NEAR(row, 1.0, 1e-12);
  }
}

// mace.h: an annotator without labels, and any id not in the fit, gets the label-weighted mean
// theta and xi of the fitted annotators. The crowd is rebuilt with a 13th annotator that has
// no label, and the first annotator's labels cut to a third, so that label counts differ.
TEST(MaceTest, AnnotatorsOutsideTheFitGetTheLabelWeightedMeanParameters) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(SpammerCrowdSpec());
  std::vector<Annotation> labels;
  int kept_of_first = 0;
  for (int32_t i = 0; i < crowd.matrix.num_items(); ++i) {
    for (const AnnotationMatrix::Entry& e : crowd.matrix.LabelsOfItem(i)) {
      if (e.other == 0 && kept_of_first++ % 3 != 0) continue;
      labels.push_back({i, e.other, e.label});
    }
  }
  const int32_t fitted = crowd.matrix.num_annotators();
  absl::StatusOr<AnnotationMatrix> m =
      AnnotationMatrix::Build(crowd.matrix.num_items(), fitted + 1, 3, labels);
  ASSERT_THAT(m.status(), IsOk());
  std::unique_ptr<MaceModel> model = CreateOrFail<MaceModel>(3);
  ASSERT_THAT(model->Fit(*m, {}, false), IsOk());
  double theta = 0;
  std::vector<double> xi(3, 0.0);
  const double total = static_cast<double>(m->num_labels());
  for (int32_t a = 0; a < fitted; ++a) {
    const double share = static_cast<double>(m->LabelsOfAnnotator(a).size()) / total;
    theta += *model->AnnotatorCompetence(a) * share;
    const std::vector<double> strategy = *model->AnnotatorStrategy(a);
    for (int y = 0; y < 3; ++y) xi[y] += strategy[y] * share;
  }
  for (int32_t id : {fitted, fitted + 5}) {
    EXPECT_NEAR(*model->AnnotatorCompetence(id), theta, 1e-12) << id;
    const std::vector<double> strategy = *model->AnnotatorStrategy(id);
    for (int y = 0; y < 3; ++y) EXPECT_NEAR(strategy[y], xi[y], 1e-12) << id << " " << y;
  }
}

TEST(MaceTest, PosteriorIsTheProductOfTheConfusions) {
  std::unique_ptr<MaceModel> model = CreateOrFail<MaceModel>(3);
  ASSERT_THAT(
      model->Fit(GenerateSyntheticCrowd(SpammerCrowdSpec()).matrix, {}, false),
      IsOk());
  // Item labelled 1 by annotator 0 and 0 by annotator 7 (a spammer).
  const std::vector<Entry> labels = {{7, 0}, {0, 1}};
  const std::vector<double> q0 = model->AnnotatorConfusion(0);
  const std::vector<double> q7 = model->AnnotatorConfusion(7);
  std::vector<double> want(3);
  double sum = 0.0;
  for (int k = 0; k < 3; ++k) {
    want[k] = q0[3 * k + 1] * q7[3 * k + 0];
    sum += want[k];
  }
  std::vector<double> out(3);
  model->ItemPosterior(labels, -1, absl::MakeSpan(out));
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(out[k], want[k] / sum, 1e-12) << k;
  EXPECT_GT(out[1], out[0]);  // the spammer's 0 weighs little
  model->ItemPosterior({}, -1, absl::MakeSpan(out));
  for (double p : out) EXPECT_NEAR(p, 1.0 / 3, 1e-15);
  model->ItemPosterior(labels, 2, absl::MakeSpan(out));
  EXPECT_EQ(out, std::vector<double>({0.0, 0.0, 1.0}));
  // Order of the labels does not matter, bit for bit.
  std::vector<double> swapped(3);
  model->ItemPosterior({{0, 1}, {7, 0}}, -1, absl::MakeSpan(swapped));
  model->ItemPosterior(labels, -1, absl::MakeSpan(out));
  EXPECT_EQ(out, swapped);
}

// Hand-set parameters: annotator 0 theta 0.8, xi (0.5, 0.5); annotator 1
// theta 0.2, xi (0.9, 0.1). Labels 0 by annotator 0 and 1 by annotator 1:
//   p(0) ∝ Q0[0][0] Q1[0][1] = (0.8 + 0.2 * 0.5) (0.8 * 0.1) = 0.9 * 0.08,
//   p(1) ∝ Q0[1][0] Q1[1][1] = (0.2 * 0.5) (0.2 + 0.08) = 0.1 * 0.28,
// so p(0) = 0.072 / 0.1 = 0.72.
TEST(MaceTest, HandCheckedPosterior) {
  ByteWriter writer;
  WriteModelHeader(writer, MaceModel::kMethod, true);
  writer.WriteU32(2);  // classes
  writer.WriteU32(2);  // annotators
  for (double v : {0.5, 0.5, 0.5, 0.8, 0.5, 0.5, 0.2, 0.9, 0.1}) {
    writer.WriteF64(v);
  }
  std::unique_ptr<MaceModel> model = CreateOrFail<MaceModel>(2);
  ASSERT_THAT(model->Restore(writer.Finish()), IsOk());
  std::vector<double> out(2);
  model->ItemPosterior({{0, 0}, {1, 1}}, -1, absl::MakeSpan(out));
  EXPECT_NEAR(out[0], 0.72, 1e-12);
  EXPECT_NEAR(out[1], 0.28, 1e-12);
  EXPECT_EQ(model->AnnotatorConfusion(1),
            std::vector<double>({0.2 + 0.8 * 0.9, 0.8 * 0.1, 0.8 * 0.9,
                                 0.2 + 0.8 * 0.1}));
  // An unseen annotator gets row 0 (theta 0.5, uniform xi): Q = 0.75 / 0.25.
  model->ItemPosterior({{9, 1}}, -1, absl::MakeSpan(out));
  EXPECT_NEAR(out[1], 0.75, 1e-12);
  // A competence of 1 or a negative strategy is refused.
  ByteWriter bad;
  WriteModelHeader(bad, MaceModel::kMethod, true);
  bad.WriteU32(2);
  bad.WriteU32(0);
  for (double v : {1.0, 0.5, 0.5}) bad.WriteF64(v);
  EXPECT_THAT(model->Restore(bad.Finish()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  model->ItemPosterior({{0, 0}, {1, 1}}, -1, absl::MakeSpan(out));
  EXPECT_NEAR(out[0], 0.72, 1e-12);
}

TEST(MaceTest, WarmStartFromAConvergedFitConvergesQuickly) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(SpammerCrowdSpec());
  std::unique_ptr<MaceModel> model = CreateOrFail<MaceModel>(3);
  absl::StatusOr<FitReport> cold = model->Fit(crowd.matrix, {}, false);
  ASSERT_THAT(cold, IsOk());
  ASSERT_TRUE(cold->converged);
  const std::vector<int32_t> before =
      ArgMax(AllPosteriors(*model, crowd.matrix, {}), 3);
  absl::StatusOr<FitReport> warm = model->Fit(crowd.matrix, {}, true);
  ASSERT_THAT(warm, IsOk());
  EXPECT_TRUE(warm->converged);
  EXPECT_LT(warm->iterations, cold->iterations);
  EXPECT_EQ(ArgMax(AllPosteriors(*model, crowd.matrix, {}), 3), before);
}

TEST(MaceTest, SerializeRestoreRoundTripsAndRejectsCorruptInput) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(SpammerCrowdSpec());
  std::unique_ptr<MaceModel> model = CreateOrFail<MaceModel>(3);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());
  const std::string blob = model->Serialize();
  std::unique_ptr<MaceModel> restored = CreateOrFail<MaceModel>(3);
  ASSERT_THAT(restored->Restore(blob), IsOk());
  EXPECT_EQ(AllPosteriors(*restored, crowd.matrix, {}),
            AllPosteriors(*model, crowd.matrix, {}));
  for (int32_t a = -1; a <= 13; ++a) {
    EXPECT_EQ(restored->AnnotatorConfusion(a), model->AnnotatorConfusion(a));
  }
  EXPECT_EQ(restored->Serialize(), blob);
  std::string flipped = blob;
  flipped[blob.size() / 2] ^= 0x10;
  EXPECT_THAT(restored->Restore(flipped),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(restored->Restore(blob.substr(0, blob.size() - 9)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  auto mv = MajorityVoteModel::Create(3, {});
  absl::Status s = restored->Restore((*mv)->Serialize());
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(s.message(), HasSubstr("method"));
  // Another class count is refused by the header.
  std::unique_ptr<MaceModel> binary = CreateOrFail<MaceModel>(2);
  s = binary->Restore(blob);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(s.message(), HasSubstr("classes"));
  EXPECT_FALSE(binary->has_parameters());
  EXPECT_EQ(AllPosteriors(*restored, crowd.matrix, {}),
            AllPosteriors(*model, crowd.matrix, {}));
  ASSERT_THAT(restored->Restore(CreateOrFail<MaceModel>(3)->Serialize()), IsOk());
  EXPECT_FALSE(restored->has_parameters());
}

// mace.h: theta = (truthful + 0.5) / (labels + 1), xi[y] = (spam[y] + 10) / (spam + 10 K), and
// gold items are clamped in fits. One gold item of class 1 that annotator 0 labels 0: that
// label can only be spam, so theta = 0.5 / 2 = 0.25 and xi = (11/21, 10/21), at every
// iteration (unclamped, the item could be class 0 and theta would rise).
TEST(MaceTest, AGoldItemIsClampedAndThePriorsAreThePseudoCounts) {
  const AnnotationMatrix m = *AnnotationMatrix::Build(1, 1, 2, {{0, 0, 0}});
  std::unique_ptr<MaceModel> model = CreateOrFail<MaceModel>(2);
  ASSERT_THAT(model->Fit(m, std::vector<int32_t>{1}, false), IsOk());
  ASSERT_TRUE(model->AnnotatorCompetence(0).has_value());
  EXPECT_NEAR(*model->AnnotatorCompetence(0), 0.25, 1e-9);
  const std::optional<std::vector<double>> xi = model->AnnotatorStrategy(0);
  ASSERT_TRUE(xi.has_value());
  EXPECT_NEAR((*xi)[0], 11.0 / 21.0, 1e-9);
  EXPECT_NEAR((*xi)[1], 10.0 / 21.0, 1e-9);
}

// Promise (mace.h): the E-step's expected truthful count of a label (j, y) is
// q_i[y] theta_j / Q_j[y][y], Q_j[y][y] = theta_j + (1 - theta_j) xi_j[y], the rest
// (1 - truthful) counting as spam towards xi_j[y]; the M-step is theta = (truthful + 0.5) /
// (n + 1), xi[y] = (spam[y] + 10) / (spam + 10 K); a cold fit's first M-step uses the soft
// majority vote (one-hot on gold). One item, gold 0, labelled 0 by annotator 0, K = 2:
//   start: truthful = q[0] = 1, spam[0] = 1: theta = 1.5 / 2 = 3/4, xi = (11/21, 10/21);
//   iteration 1: Q[0][0] = 3/4 + (1/4)(11/21) = 63/84 + 11/84 = 74/84, so
//     truthful = (3/4) / (74/84) = 63/74, spam[0] = 11/74;
//     theta = (63/74 + 37/74) / 2 = 50/74 = 25/37 = 0.6756757,
//     xi[0] = (11/74 + 10) / (11/74 + 20) = 751/1491, xi[1] = 740/1491.
// (Counting the whole label as truthful would keep theta at 3/4 and xi at (11/21, 10/21).)
TEST(MaceTest, OneIterationSplitsAGoldAgreeingLabelIntoTruthfulAndSpam) {
  const AnnotationMatrix m = *AnnotationMatrix::Build(1, 1, 2, {{0, 0, 0}});
  TruthModelOptions one_iteration;
  one_iteration.max_iterations = 1;
  std::unique_ptr<MaceModel> model = CreateOrFail<MaceModel>(2, one_iteration);
  absl::StatusOr<FitReport> report = model->Fit(m, std::vector<int32_t>{0}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->iterations, 1);
  ASSERT_TRUE(model->AnnotatorCompetence(0).has_value());
  EXPECT_NEAR(*model->AnnotatorCompetence(0), 25.0 / 37.0, 1e-12);
  const std::optional<std::vector<double>> xi = model->AnnotatorStrategy(0);
  ASSERT_TRUE(xi.has_value());
  EXPECT_NEAR((*xi)[0], 751.0 / 1491.0, 1e-12);
  EXPECT_NEAR((*xi)[1], 740.0 / 1491.0, 1e-12);
}

// Promise (mace.h): a cold fit's first M-step takes theta_j from the annotator's expected
// agreement with the soft majority vote. One item, no gold, K = 2: annotator 0 says 0 and
// annotator 1 says 1, so the vote is (1/2, 1/2):
//   start: truthful = q[y] = 1/2, spam[y] = 1: theta = (1/2 + 1/2) / 2 = 1/2,
//     xi_0 = (11/21, 10/21) (xi_1 mirrored);
//   iteration 1: q = (1/2, 1/2) by symmetry; Q_0[0][0] = 1/2 + (1/2)(11/21) = 16/21, so
//     truthful = (1/2)(1/2) / (16/21) = 21/64, spam[0] = 43/64;
//     theta = (21/64 + 1/2) / 2 = 53/128, xi_0[0] = (43/64 + 10) / (43/64 + 20) = 683/1323.
// (Starting every label as truthful, theta = 3/4, would give theta = 0.4628378 here.)
TEST(MaceTest, AColdFitStartsTheCompetenceFromTheAgreementWithTheVote) {
  const AnnotationMatrix m = *AnnotationMatrix::Build(1, 2, 2, {{0, 0, 0}, {0, 1, 1}});
  TruthModelOptions one_iteration;
  one_iteration.max_iterations = 1;
  std::unique_ptr<MaceModel> model = CreateOrFail<MaceModel>(2, one_iteration);
  ASSERT_THAT(model->Fit(m, {}, false), IsOk());
  for (int32_t a : {0, 1}) {
    ASSERT_TRUE(model->AnnotatorCompetence(a).has_value());
    EXPECT_NEAR(*model->AnnotatorCompetence(a), 53.0 / 128.0, 1e-12) << a;
  }
  const std::optional<std::vector<double>> xi = model->AnnotatorStrategy(0);
  ASSERT_TRUE(xi.has_value());
  EXPECT_NEAR((*xi)[0], 683.0 / 1323.0, 1e-12);
  EXPECT_NEAR((*xi)[1], 640.0 / 1323.0, 1e-12);
}

// truth_model.h: an empty model gives the soft majority vote as
// ItemPosterior and uniform confusion matrices (mace.h: "uniform before a
// fit"). One label of class 0, K = 2, vote_smoothing 0.01: (1.01, 0.01) / 1.02.
TEST(MaceTest, BeforeAFitServesTheSoftMajorityVoteAndUniformConfusions) {
  std::unique_ptr<MaceModel> model = CreateOrFail<MaceModel>(2);
  EXPECT_FALSE(model->has_parameters());
  EXPECT_FALSE(model->AnnotatorCompetence(0).has_value());
  EXPECT_EQ(model->AnnotatorConfusion(0),
            std::vector<double>({0.5, 0.5, 0.5, 0.5}));
  std::vector<double> out(2);
  model->ItemPosterior({{3, 0}}, -1, absl::MakeSpan(out));
  EXPECT_NEAR(out[0], 1.01 / 1.02, 1e-12);
  EXPECT_NEAR(out[1], 0.01 / 1.02, 1e-12);
}

// mace.h: the pooled parameters are theta 1/2 and uniform xi if there were no
// labels; they serve any id not in the fit. K = 3, no labels at all.
TEST(MaceTest, AFitWithoutLabelsPoolsOneHalfAndUniform) {
  const AnnotationMatrix m = *AnnotationMatrix::Build(2, 1, 3, {});
  std::unique_ptr<MaceModel> model = CreateOrFail<MaceModel>(3);
  ASSERT_THAT(model->Fit(m, {}, false), IsOk());
  for (int32_t id : {0, 5, -1}) {
    ASSERT_TRUE(model->AnnotatorCompetence(id).has_value()) << id;
    EXPECT_NEAR(*model->AnnotatorCompetence(id), 0.5, 1e-15) << id;
    const std::vector<double> xi = *model->AnnotatorStrategy(id);
    ASSERT_EQ(xi.size(), 3u);
    for (double v : xi) EXPECT_NEAR(v, 1.0 / 3, 1e-15) << id;
  }
}

// mace.h: a warm fit starts from the previous theta and xi, and annotators
// beyond them start with the pooled ones; FitReport.log_likelihood is the
// marginal log-likelihood log p(labels) under the uniform prior 1/K (gold
// items: log p(gold, labels)). Restored parameters (K = 2): pooled theta 0.6,
// xi (0.75, 0.25); annotator 0 theta 0.8, xi (0.5, 0.5). Warm fit, one
// iteration, on
//   item 0, gold 1, labelled 1 by the new annotator 1 (pooled start):
//     Q[1][1] = 0.6 + 0.4 * 0.25 = 0.7; truthful = 0.6 / 0.7 = 6/7, spam 1/7;
//     theta_1 = (6/7 + 1/2) / 2 = 19/28; xi_1 = (10, 10 + 1/7) / (20 + 1/7)
//     = (70/141, 71/141); its log-likelihood term is log(1/2 * 0.7).
//   item 1, no gold, labelled 0 by annotator 0: Q[0][0] = 0.9, Q[1][0] = 0.1,
//     p(label) = (0.9 + 0.1) / 2 = 1/2; q = (0.9, 0.1),
//     truthful = 0.9 * 0.8 / 0.9 = 0.8: theta_0 = (0.8 + 0.5) / 2 = 0.65.
//   log_likelihood = log 0.35 + log 0.5.
TEST(MaceTest, WarmStartGivesNewAnnotatorsThePooledParameters) {
  ByteWriter writer;
  WriteModelHeader(writer, MaceModel::kMethod, true);
  writer.WriteU32(2);  // classes
  writer.WriteU32(1);  // annotators
  for (double v : {0.6, 0.75, 0.25, 0.8, 0.5, 0.5}) writer.WriteF64(v);
  TruthModelOptions one_iteration;
  one_iteration.max_iterations = 1;
  std::unique_ptr<MaceModel> model = CreateOrFail<MaceModel>(2, one_iteration);
  ASSERT_THAT(model->Restore(writer.Finish()), IsOk());

  const AnnotationMatrix m =
      *AnnotationMatrix::Build(2, 2, 2, {{0, 1, 1}, {1, 0, 0}});
  absl::StatusOr<FitReport> report =
      model->Fit(m, std::vector<int32_t>{1, -1}, /*warm_start=*/true);
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->iterations, 1);
  EXPECT_NEAR(report->log_likelihood, std::log(0.35) + std::log(0.5), 1e-12);
  EXPECT_NEAR(*model->AnnotatorCompetence(1), 19.0 / 28.0, 1e-12);
  const std::vector<double> xi = *model->AnnotatorStrategy(1);
  EXPECT_NEAR(xi[0], 70.0 / 141.0, 1e-12);
  EXPECT_NEAR(xi[1], 71.0 / 141.0, 1e-12);
  EXPECT_NEAR(*model->AnnotatorCompetence(0), 0.65, 1e-12);
}

// Restore refuses parameters that would make a log in the posterior
// infinite: a competence or a strategy of 0 (mace.cc: theta in (0, 1), xi in
// (0, 1]), and keeps the parameters it had.
TEST(MaceTest, RestoreRefusesZeroCompetenceOrStrategy) {
  std::unique_ptr<MaceModel> model = CreateOrFail<MaceModel>(2);
  for (const std::vector<double>& row :
       {std::vector<double>{0.0, 0.5, 0.5}, std::vector<double>{0.5, 0.0, 1.0},
        std::vector<double>{0.5, 1.0, 0.0}}) {
    ByteWriter bad;
    WriteModelHeader(bad, MaceModel::kMethod, true);
    bad.WriteU32(2);
    bad.WriteU32(0);
    for (double v : row) bad.WriteF64(v);
    EXPECT_THAT(model->Restore(bad.Finish()),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << row[0] << " " << row[1] << " " << row[2];
    EXPECT_FALSE(model->has_parameters());
  }
}

// truth_model.h: a gold label clamps the posterior to one-hot, class 0 included. Restored
// parameters make annotator 0 (theta 0.8) label 1 on an item whose gold is 0.
TEST(MaceTest, GoldClassZeroClampsThePosterior) {
  ByteWriter writer;
  WriteModelHeader(writer, MaceModel::kMethod, true);
  writer.WriteU32(2);  // classes
  writer.WriteU32(1);  // annotators
  for (double v : {0.5, 0.5, 0.5, 0.8, 0.5, 0.5}) writer.WriteF64(v);
  std::unique_ptr<MaceModel> model = CreateOrFail<MaceModel>(2);
  ASSERT_THAT(model->Restore(writer.Finish()), IsOk());
  std::vector<double> out(2);
  model->ItemPosterior({{0, 1}}, 0, absl::MakeSpan(out));
  EXPECT_EQ(out, std::vector<double>({1.0, 0.0}));
}

// truth_model.h: convergence compares the log-likelihoods of two consecutive E-steps, so the
// first iteration (no previous E-step) never converges, even with a tolerance of 10 that any
// relative change meets: the fit stops at iteration 2.
TEST(MaceTest, TheFirstIterationNeverConverges) {
  TruthModelOptions loose;
  loose.tolerance = 10.0;
  std::unique_ptr<MaceModel> model = CreateOrFail<MaceModel>(2, loose);
  ExpectTheFirstIterationNeverConverges(*model);
}

// A K = 3 model of one annotator restored with uniform xi (so a label has p = 1/3 whatever
// theta is), fitting one iteration at a time: the parameters of the log-likelihood tests.
void RestoreWithUniformXi(std::unique_ptr<MaceModel>* restored) {
  ByteWriter writer;
  WriteModelHeader(writer, MaceModel::kMethod, true);
  writer.WriteU32(3);  // classes
  writer.WriteU32(1);  // annotators
  for (double v : {0.5, 1.0 / 3, 1.0 / 3, 1.0 / 3, 0.7, 1.0 / 3, 1.0 / 3, 1.0 / 3}) {
    writer.WriteF64(v);
  }
  TruthModelOptions one_iteration;
  one_iteration.max_iterations = 1;
  std::unique_ptr<MaceModel> model = CreateOrFail<MaceModel>(3, one_iteration);
  ASSERT_THAT(model->Restore(writer.Finish()), IsOk());
  *restored = std::move(model);
}

// mace.h: FitReport.log_likelihood is log p(labels) under the uniform prior 1 / K. K = 3,
// restored parameters with uniform xi (every theta): p(label y) = sum_k (1/3) Q[k][y] =
// (1/3) (theta + 3 (1 - theta) / 3) = 1/3 for any theta, so one labelled item gives log(1/3).
TEST(MaceTest, TheLogLikelihoodUsesThePriorOneOverK) {
  std::unique_ptr<MaceModel> model;
  ASSERT_NO_FATAL_FAILURE(RestoreWithUniformXi(&model));
  const AnnotationMatrix m = *AnnotationMatrix::Build(1, 1, 3, {{0, 0, 2}});
  absl::StatusOr<FitReport> report = model->Fit(m, {}, /*warm_start=*/true);
  ASSERT_THAT(report, IsOk());
  EXPECT_NEAR(report->log_likelihood, std::log(1.0 / 3), 1e-12);
}

// truth_model.h: a gold label clamps the posterior to one-hot, before a fit too (mace.h: the
// soft majority vote before a fit, which is one-hot on gold).
TEST(MaceTest, BeforeAFitAGoldLabelClampsThePosterior) {
  std::unique_ptr<MaceModel> model = CreateOrFail<MaceModel>(2);
  std::vector<double> out(2);
  model->ItemPosterior({{3, 0}, {4, 0}}, 1, absl::MakeSpan(out));
  EXPECT_EQ(out, std::vector<double>({0.0, 1.0}));
}

// truth_model.h: Clone() is a deep copy, parameters included; Restore refuses a blob with bytes
// after the model (under a valid checksum) and keeps no parameters from it.
TEST(MaceTest, CloneKeepsTheParametersAndRestoreRefusesTrailingBytes) {
  const AnnotationMatrix m =
      *AnnotationMatrix::Build(2, 2, 2, {{0, 0, 0}, {0, 1, 0}, {1, 0, 1}, {1, 1, 0}});
  std::unique_ptr<MaceModel> model = CreateOrFail<MaceModel>(2);
  ASSERT_THAT(model->Fit(m, {}, false), IsOk());
  const std::string blob = model->Serialize();
  const std::unique_ptr<TruthModel> clone = model->Clone();
  EXPECT_TRUE(clone->has_parameters());
  EXPECT_EQ(clone->Serialize(), blob);
  EXPECT_EQ(AllPosteriors(*clone, m, {}), AllPosteriors(*model, m, {}));
  std::unique_ptr<MaceModel> restored = CreateOrFail<MaceModel>(2);
  EXPECT_THAT(restored->Restore(WithTrailingBytes(blob)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(restored->has_parameters());
}

// mace.h: Create is INVALID_ARGUMENT if num_classes < 2.
TEST(MaceTest, CreateRefusesFewerThanTwoClasses) {
  EXPECT_THAT(MaceModel::Create(1, {}).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(MaceModel::Create(2, {}).status(), IsOk());
}

// truth_model.h / mace.h: ItemPosterior does not depend on the order of the labels, bit for bit
// (the labels are put in (annotator, label) order before the sums). Every item of the crowd,
// its labels given in reverse.
TEST(MaceTest, PosteriorIsTheSameBitForBitForAnyOrderOfTheLabels) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(SpammerCrowdSpec());
  std::unique_ptr<MaceModel> model = CreateOrFail<MaceModel>(3);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());
  EXPECT_EQ(ItemsWhosePosteriorDependsOnLabelOrder(*model, crowd.matrix), 0);
}

// mace.h: before a fit every annotator's confusion is uniform, 1 / K in every cell (K = 3).
TEST(MaceTest, BeforeAFitTheConfusionIsUniformOverThreeClasses) {
  std::unique_ptr<MaceModel> model = CreateOrFail<MaceModel>(3);
  ExpectUniformConfusionBeforeAFit(*model);
}

// truth_model.h: ItemPosterior writes a probability distribution whatever the labels. 400
// labels of class 1 from annotators of competence 0.8 (uniform xi, K = 2: each adds log 9 to
// class 1's log score, about 879 in all, beyond exp's range) give class 1 probability 1, not
// an overflow.
TEST(MaceTest, ManyAgreeingLabelsGiveAFinitePosterior) {
  ByteWriter writer;
  WriteModelHeader(writer, MaceModel::kMethod, true);
  writer.WriteU32(2);  // classes
  writer.WriteU32(0);  // annotators: every id gets the pooled row
  for (double v : {0.8, 0.5, 0.5}) writer.WriteF64(v);
  std::unique_ptr<MaceModel> model = CreateOrFail<MaceModel>(2);
  ASSERT_THAT(model->Restore(writer.Finish()), IsOk());
  std::vector<Entry> labels;
  for (int32_t a = 0; a < 400; ++a) labels.push_back({a, 1});
  std::vector<double> out(2);
  model->ItemPosterior(labels, -1, absl::MakeSpan(out));
  EXPECT_EQ(out[0], 0.0);
  EXPECT_EQ(out[1], 1.0);
}

// truth_model.h: Fit is INVALID_ARGUMENT if data.num_classes() != num_classes() or if gold is
// neither empty nor of size data.num_items(), and a refused fit keeps the model as it was. The
// data of 3 classes holds only labels 0 and 1, and the gold vector has one entry too many.
TEST(MaceTest, FitRefusesMismatchedInputAndKeepsTheModel) {
  const AnnotationMatrix m =
      *AnnotationMatrix::Build(2, 2, 2, {{0, 0, 0}, {0, 1, 0}, {1, 0, 1}, {1, 1, 0}});
  std::unique_ptr<MaceModel> model = CreateOrFail<MaceModel>(2);
  ASSERT_THAT(model->Fit(m, {}, false), IsOk());
  const std::string before = model->Serialize();
  const AnnotationMatrix three_classes =
      *AnnotationMatrix::Build(2, 2, 3, {{0, 0, 0}, {0, 1, 0}, {1, 0, 1}, {1, 1, 0}});
  EXPECT_THAT(model->Fit(three_classes, {}, false), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(model->Fit(m, std::vector<int32_t>{0, 1, -1}, false),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("gold")));
  EXPECT_EQ(model->Serialize(), before);
}

// mace.h: a cold fit starts from the soft majority vote, whatever the model held before; only a
// warm fit starts from the previous theta and xi. So a cold fit on a model fitted to another
// crowd gives, bit for bit, the parameters of a fresh model's fit.
TEST(MaceTest, AColdFitIgnoresTheParametersOfAnEarlierFit) {
  const std::vector<Annotation> triples = {{0, 0, 0}, {0, 1, 0}, {0, 2, 1}, {1, 0, 1},
                                           {1, 1, 1}, {1, 2, 1}, {2, 0, 2}, {2, 1, 0},
                                           {2, 2, 2}, {3, 0, 0}, {3, 1, 2}, {3, 2, 0}};
  const AnnotationMatrix small = *AnnotationMatrix::Build(4, 3, 3, triples);
  std::unique_ptr<MaceModel> fresh = CreateOrFail<MaceModel>(3);
  ASSERT_THAT(fresh->Fit(small, {}, false), IsOk());
  std::unique_ptr<MaceModel> refitted = CreateOrFail<MaceModel>(3);
  ASSERT_THAT(refitted->Fit(GenerateSyntheticCrowd(SpammerCrowdSpec()).matrix, {}, false), IsOk());
  ASSERT_THAT(refitted->Fit(small, {}, /*warm_start=*/false), IsOk());
  EXPECT_EQ(refitted->Serialize(), fresh->Serialize());
}

// truth_model.h: FitReport.log_likelihood adds, for a gold item without labels, log p(gold
// class) in mv, ds, one_coin and glad, and nothing in the other methods, mace among them. With
// the parameters of TheLogLikelihoodUsesThePriorOneOverK (uniform xi, so a label has p = 1/3),
// one labelled item and one unlabelled gold item give log(1/3), not 2 log(1/3).
TEST(MaceTest, AGoldItemWithoutLabelsAddsNothingToTheLogLikelihood) {
  std::unique_ptr<MaceModel> model;
  ASSERT_NO_FATAL_FAILURE(RestoreWithUniformXi(&model));
  const AnnotationMatrix m = *AnnotationMatrix::Build(2, 1, 3, {{0, 0, 2}});
  absl::StatusOr<FitReport> report =
      model->Fit(m, std::vector<int32_t>{-1, 1}, /*warm_start=*/true);
  ASSERT_THAT(report, IsOk());
  EXPECT_NEAR(report->log_likelihood, std::log(1.0 / 3), 1e-12);
}

}  // namespace
}  // namespace verity::models

#include "models/one_coin.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/annotation_matrix.h"
#include "models/binary_codec.h"
#include "models/dawid_skene.h"
#include "models/majority_vote.h"
#include "common/status_matchers.h"
#include "models/testing/posterior_checks.h"
#include "models/testing/serialization_checks.h"
#include "models/testing/synthetic_crowd.h"
#include "models/truth_model.h"

namespace verity::models {
namespace {

using ::testing::DoubleNear;
using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::verity::models::testing::Accuracy;
using ::verity::models::testing::GenerateSyntheticCrowd;
using ::verity::models::testing::SymmetricConfusion;
using ::verity::models::testing::SyntheticCrowd;
using ::verity::models::testing::SyntheticCrowdSpec;
using ::verity::models::testing::WithTrailingBytes;
using ::verity::models::testing::ExpectTheFirstIterationNeverConverges;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;
using Entry = AnnotationMatrix::Entry;

std::unique_ptr<OneCoinModel> MakeOneCoin(
    int32_t num_classes, const TruthModelOptions& options = {}) {
  absl::StatusOr<std::unique_ptr<OneCoinModel>> model =
      OneCoinModel::Create(num_classes, options);
  EXPECT_THAT(model, IsOk());
  return model.ok() ? *std::move(model) : nullptr;
}

std::unique_ptr<MajorityVoteModel> MakeMv(int32_t num_classes) {
  absl::StatusOr<std::unique_ptr<MajorityVoteModel>> model =
      MajorityVoteModel::Create(num_classes, {});
  EXPECT_THAT(model, IsOk());
  return model.ok() ? *std::move(model) : nullptr;
}

// Twenty annotators with K = 3 and symmetric confusions of accuracy 0.45 to
// 0.93 (chance is 1/3).
std::vector<double> Accuracies() {
  std::vector<double> accuracies;
  for (int a = 0; a < 20; ++a) accuracies.push_back(0.45 + 0.025 * a);
  return accuracies;
}

SyntheticCrowdSpec SymmetricCrowdSpec(int32_t num_items) {
  SyntheticCrowdSpec spec;
  spec.num_items = num_items;
  spec.num_classes = 3;
  spec.labels_per_item = 5;
  spec.class_prior = {0.4, 0.35, 0.25};
  for (double p : Accuracies()) {
    spec.confusions.push_back(SymmetricConfusion(3, p));
  }
  spec.seed = 17;
  return spec;
}

// The accuracies a fit would find if it knew the truth: each annotator's
// fraction of correct labels.
std::vector<double> OracleAccuracies(const SyntheticCrowd& crowd,
                                     int32_t num_annotators) {
  std::vector<double> correct(num_annotators, 0.0);
  std::vector<double> total(num_annotators, 0.0);
  for (const Annotation& a : crowd.annotations) {
    correct[a.annotator] += a.label == crowd.truth[a.item];
    total[a.annotator] += 1;
  }
  for (int32_t a = 0; a < num_annotators; ++a) correct[a] /= total[a];
  return correct;
}

TEST(OneCoinTest, RecoversAnnotatorAccuraciesOnASymmetricCrowd) {
  // 20000 items, 5 labels each: ~5000 labels per annotator, so the sampling
  // standard deviation of an accuracy is below 0.007.
  const SyntheticCrowdSpec spec = SymmetricCrowdSpec(20000);
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  std::unique_ptr<OneCoinModel> model = MakeOneCoin(3);
  absl::StatusOr<FitReport> report = model->Fit(crowd.matrix, {}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_TRUE(report->converged);
  EXPECT_TRUE(std::isfinite(report->log_likelihood));
  EXPECT_LT(report->log_likelihood, 0);

  const std::vector<double> truth = Accuracies();
  const std::vector<double> oracle = OracleAccuracies(crowd, 20);
  double max_error = 0;
  double max_oracle_error = 0;
  for (int32_t a = 0; a < 20; ++a) {
    max_error =
        std::max(max_error, std::abs(model->AnnotatorAccuracy(a) - truth[a]));
    max_oracle_error = std::max(
        max_oracle_error, std::abs(model->AnnotatorAccuracy(a) - oracle[a]));
  }
  RecordProperty("max_accuracy_error", std::to_string(max_error));
  RecordProperty("max_error_vs_oracle", std::to_string(max_oracle_error));
  EXPECT_LE(max_error, 0.025);
  EXPECT_LE(max_oracle_error, 0.015);
  // The class prior stays uniform unless learn_symmetric_class_prior.
  EXPECT_THAT(model->ClassPrior(), Each(1.0 / 3));
}

TEST(OneCoinTest, LearnsTheClassPriorWhenAskedTo) {
  const SyntheticCrowdSpec spec = SymmetricCrowdSpec(20000);
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  TruthModelOptions options;
  options.learn_symmetric_class_prior = true;
  std::unique_ptr<OneCoinModel> model = MakeOneCoin(3, options);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());
  EXPECT_THAT(model->ClassPrior(), ElementsAre(DoubleNear(0.4, 0.015),
                                               DoubleNear(0.35, 0.015),
                                               DoubleNear(0.25, 0.015)));
}

TEST(OneCoinTest, BeatsMajorityVoteWhenAThirdAreSpammers) {
  SyntheticCrowdSpec spec;
  spec.num_items = 2000;
  spec.num_classes = 2;
  spec.labels_per_item = 5;
  for (int a = 0; a < 30; ++a) {
    spec.confusions.push_back(a % 3 == 0 ? SymmetricConfusion(2, 0.5)
                                         : SymmetricConfusion(2, 0.8));
  }
  spec.seed = 11;
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);

  std::unique_ptr<OneCoinModel> model = MakeOneCoin(2);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());
  std::unique_ptr<MajorityVoteModel> mv = MakeMv(2);
  ASSERT_THAT(mv->Fit(crowd.matrix, {}, false), IsOk());
  const double accuracy = Accuracy(AllPosteriors(*model, crowd.matrix, {}),
                                   crowd.matrix, crowd.truth);
  const double mv_accuracy =
      Accuracy(AllPosteriors(*mv, crowd.matrix, {}), crowd.matrix, crowd.truth);
  RecordProperty("one_coin_accuracy", std::to_string(accuracy));
  RecordProperty("mv_accuracy", std::to_string(mv_accuracy));
  EXPECT_GT(accuracy, mv_accuracy + 0.03);
  // ~330 labels per annotator: the spammers are told apart, and each
  // accuracy is close to the fraction of the annotator's labels that are
  // correct.
  const std::vector<double> oracle = OracleAccuracies(crowd, 30);
  for (int a = 0; a < 30; ++a) {
    EXPECT_NEAR(model->AnnotatorAccuracy(a), oracle[a], 0.04)
        << "annotator " << a;
    if (a % 3 == 0) {
      EXPECT_LT(model->AnnotatorAccuracy(a), 0.65) << "annotator " << a;
    } else {
      EXPECT_GT(model->AnnotatorAccuracy(a), 0.7) << "annotator " << a;
    }
  }
}

TEST(OneCoinTest, PosteriorIsTheOneCoinFormula) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(SymmetricCrowdSpec(500));
  std::unique_ptr<OneCoinModel> model = MakeOneCoin(3);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());

  // Annotators 2 and 15 say 0, annotator 7 says 2; the prior is uniform.
  const std::vector<Entry> labels = {{2, 0}, {7, 2}, {15, 0}};
  std::vector<double> unnormalised(3, 1.0);
  for (const Entry& e : labels) {
    const double p = model->AnnotatorAccuracy(e.other);
    for (int32_t k = 0; k < 3; ++k) {
      unnormalised[k] *= k == e.label ? p : (1 - p) / 2;
    }
  }
  const double total = unnormalised[0] + unnormalised[1] + unnormalised[2];
  std::vector<double> out(3);
  model->ItemPosterior(labels, -1, absl::MakeSpan(out));
  for (int32_t k = 0; k < 3; ++k) {
    EXPECT_NEAR(out[k], unnormalised[k] / total, 1e-12) << k;
  }
}

TEST(OneCoinTest, AnnotatorConfusionIsTheImpliedSymmetricMatrix) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(SymmetricCrowdSpec(500));
  std::unique_ptr<OneCoinModel> model = MakeOneCoin(3);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());
  for (int32_t a : {0, 19, 20, -1}) {
    const double p = model->AnnotatorAccuracy(a);
    const double q = (1 - p) / 2;
    EXPECT_THAT(model->AnnotatorConfusion(a),
                ElementsAre(p, q, q, q, p, q, q, q, p))
        << "annotator " << a;
  }
}

TEST(OneCoinTest, GoldItemsAreClampedAndImproveTheAccuracies) {
  // A hard crowd: three labels per item, more than half near chance.
  SyntheticCrowdSpec spec = SymmetricCrowdSpec(1500);
  spec.labels_per_item = 3;
  for (int a = 0; a < 12; ++a) spec.confusions[a] = SymmetricConfusion(3, 0.4);
  spec.seed = 5;
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  std::vector<double> truth(20);
  for (int a = 0; a < 20; ++a) truth[a] = spec.confusions[a][0];

  std::vector<int32_t> gold(spec.num_items, -1);
  for (int32_t i = 0; i < spec.num_items; i += 3) gold[i] = crowd.truth[i];

  std::unique_ptr<OneCoinModel> without_gold = MakeOneCoin(3);
  ASSERT_THAT(without_gold->Fit(crowd.matrix, {}, false), IsOk());
  std::unique_ptr<OneCoinModel> with_gold = MakeOneCoin(3);
  ASSERT_THAT(with_gold->Fit(crowd.matrix, gold, false), IsOk());

  const std::vector<double> posteriors =
      AllPosteriors(*with_gold, crowd.matrix, gold);
  for (int32_t i = 0; i < spec.num_items; i += 3) {
    for (int32_t k = 0; k < 3; ++k) {
      ASSERT_EQ(posteriors[i * 3 + k], k == gold[i] ? 1.0 : 0.0)
          << "item " << i << " class " << k;
    }
  }
  double error_without = 0;
  double error_with = 0;
  for (int32_t a = 0; a < 20; ++a) {
    error_without += std::abs(without_gold->AnnotatorAccuracy(a) - truth[a]);
    error_with += std::abs(with_gold->AnnotatorAccuracy(a) - truth[a]);
  }
  RecordProperty("mean_error_without_gold", std::to_string(error_without / 20));
  RecordProperty("mean_error_with_gold", std::to_string(error_with / 20));
  EXPECT_LT(error_with, error_without);
}

// Items: 0 labelled by annotators 0, 1; 1 labelled by 0, 1; 2 with no labels;
// 3 labelled only by annotator 2, whose only label it is. Annotator 3 has no
// labels at all.
AnnotationMatrix TinyMatrix() {
  const std::vector<Annotation> triples = {
      {0, 0, 0}, {0, 1, 0}, {1, 0, 1}, {1, 1, 1}, {3, 2, 1}};
  return *AnnotationMatrix::Build(4, 4, 2, triples);
}

TEST(OneCoinTest, NoNanForSparseAnnotatorsAndUnlabelledItems) {
  const AnnotationMatrix m = TinyMatrix();
  std::unique_ptr<OneCoinModel> model = MakeOneCoin(2);
  absl::StatusOr<FitReport> report = model->Fit(m, {}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_TRUE(std::isfinite(report->log_likelihood));

  const std::vector<double> posteriors = AllPosteriors(*model, m, {});
  for (int32_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(std::isfinite(posteriors[2 * i]));
    EXPECT_TRUE(std::isfinite(posteriors[2 * i + 1]));
    EXPECT_NEAR(posteriors[2 * i] + posteriors[2 * i + 1], 1.0, 1e-12);
  }
  // The unlabelled item gets the (uniform) class prior.
  EXPECT_EQ(posteriors[4], 0.5);
  EXPECT_EQ(posteriors[5], 0.5);
  // Item 3's single label pulls toward class 1.
  EXPECT_GT(posteriors[7], 0.5);
  for (int32_t a : {0, 1, 2, 3, 4, -1}) {
    const double p = model->AnnotatorAccuracy(a);
    EXPECT_TRUE(p > 0 && p < 1) << a;
  }
  // An annotator with no labels, and ids never seen, get the pooled accuracy.
  EXPECT_EQ(model->AnnotatorAccuracy(3), model->AnnotatorAccuracy(4));
  EXPECT_EQ(model->AnnotatorAccuracy(-1), model->AnnotatorAccuracy(4));
}

TEST(OneCoinTest, EmptyDataFitsToTheUniformModel) {
  const AnnotationMatrix m = *AnnotationMatrix::Build(3, 2, 2, {});
  std::unique_ptr<OneCoinModel> model = MakeOneCoin(2);
  absl::StatusOr<FitReport> report = model->Fit(m, {}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->log_likelihood, 0.0);
  EXPECT_TRUE(report->converged);
  EXPECT_THAT(AllPosteriors(*model, m, {}),
              ElementsAre(0.5, 0.5, 0.5, 0.5, 0.5, 0.5));
  // (0 + s) / (0 + K s): the pooled accuracy of no labels is 1 / K.
  EXPECT_DOUBLE_EQ(model->AnnotatorAccuracy(0), 0.5);
}

TEST(OneCoinTest, UnseenAnnotatorUsesThePooledAccuracy) {
  SyntheticCrowdSpec spec;
  spec.num_items = 500;
  spec.confusions.assign(10, SymmetricConfusion(2, 0.8));
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  std::unique_ptr<OneCoinModel> model = MakeOneCoin(2);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());

  const double pooled = model->AnnotatorAccuracy(1000);
  EXPECT_NEAR(pooled, 0.8, 0.03);
  std::vector<double> out(2);
  const std::vector<Entry> labels = {{1000, 1}};
  model->ItemPosterior(labels, -1, absl::MakeSpan(out));
  EXPECT_NEAR(out[1], pooled, 1e-12);
}

TEST(OneCoinTest, ItemPosteriorIgnoresTheOrderOfLabels) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(SymmetricCrowdSpec(300));
  std::unique_ptr<OneCoinModel> model = MakeOneCoin(3);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());

  const std::vector<double> all = AllPosteriors(*model, crowd.matrix, {});
  std::vector<double> out(3);
  for (int32_t i = 0; i < crowd.matrix.num_items(); ++i) {
    std::vector<Entry> labels(crowd.matrix.LabelsOfItem(i).begin(),
                              crowd.matrix.LabelsOfItem(i).end());
    std::reverse(labels.begin(), labels.end());
    model->ItemPosterior(labels, -1, absl::MakeSpan(out));
    // Bit-identical: online updates must equal a full recomputation.
    ASSERT_EQ(out[0], all[3 * i]);
    ASSERT_EQ(out[1], all[3 * i + 1]);
    ASSERT_EQ(out[2], all[3 * i + 2]);
  }
}

TEST(OneCoinTest, SerializeRestoreGivesIdenticalPosteriors) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(SymmetricCrowdSpec(400));
  std::unique_ptr<OneCoinModel> model = MakeOneCoin(3);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());
  const std::string blob = model->Serialize();

  std::unique_ptr<OneCoinModel> restored = MakeOneCoin(3);
  EXPECT_FALSE(restored->has_parameters());
  ASSERT_THAT(restored->Restore(blob), IsOk());
  EXPECT_TRUE(restored->has_parameters());
  EXPECT_EQ(AllPosteriors(*restored, crowd.matrix, {}),
            AllPosteriors(*model, crowd.matrix, {}));
  for (int32_t a = -1; a <= 21; ++a) {
    EXPECT_EQ(restored->AnnotatorConfusion(a), model->AnnotatorConfusion(a));
  }
  EXPECT_EQ(restored->ClassPrior(), model->ClassPrior());
  EXPECT_EQ(restored->Serialize(), blob);
}

TEST(OneCoinTest, SerializeRestoreOfAnEmptyModel) {
  std::unique_ptr<OneCoinModel> model = MakeOneCoin(2);
  std::unique_ptr<OneCoinModel> restored = MakeOneCoin(2);
  ASSERT_THAT(restored->Restore(model->Serialize()), IsOk());
  EXPECT_FALSE(restored->has_parameters());
}

TEST(OneCoinTest, RestoreRejectsCorruptOrMismatchedInput) {
  SyntheticCrowdSpec spec;
  spec.num_items = 100;
  spec.confusions.assign(5, SymmetricConfusion(2, 0.8));
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  std::unique_ptr<OneCoinModel> model = MakeOneCoin(2);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());
  const std::string blob = model->Serialize();
  const std::vector<double> before = AllPosteriors(*model, crowd.matrix, {});

  std::string flipped = blob;
  flipped[blob.size() / 2] ^= 0x10;
  EXPECT_THAT(model->Restore(flipped),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(model->Restore(blob.substr(0, blob.size() - 9)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(model->Restore(""),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // A failed Restore leaves the parameters unchanged.
  EXPECT_EQ(AllPosteriors(*model, crowd.matrix, {}), before);

  std::unique_ptr<OneCoinModel> three_classes = MakeOneCoin(3);
  absl::Status s = three_classes->Restore(blob);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(s.message(), HasSubstr("classes"));

  // Neither model reads the other's parameters.
  absl::StatusOr<std::unique_ptr<DawidSkeneModel>> ds =
      DawidSkeneModel::Create(2, {});
  ASSERT_THAT(ds, IsOk());
  ASSERT_THAT((*ds)->Fit(crowd.matrix, {}, false), IsOk());
  s = model->Restore((*ds)->Serialize());
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(s.message(), HasSubstr("method"));
  s = (*ds)->Restore(blob);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(s.message(), HasSubstr("method"));
}

TEST(OneCoinTest, WarmStartFromAConvergedModelConvergesAtOnce) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(SymmetricCrowdSpec(2000));
  std::unique_ptr<OneCoinModel> model = MakeOneCoin(3);
  absl::StatusOr<FitReport> cold = model->Fit(crowd.matrix, {}, false);
  ASSERT_THAT(cold, IsOk());
  ASSERT_TRUE(cold->converged);

  absl::StatusOr<FitReport> warm = model->Fit(crowd.matrix, {}, true);
  ASSERT_THAT(warm, IsOk());
  EXPECT_TRUE(warm->converged);
  EXPECT_LE(warm->iterations, 3);
  EXPECT_NEAR(warm->log_likelihood, cold->log_likelihood,
              1e-5 * std::abs(cold->log_likelihood));
}

TEST(OneCoinTest, WarmStartOnACloneLearnsNewAnnotators) {
  SyntheticCrowdSpec spec;
  spec.num_items = 1000;
  spec.confusions.assign(10, SymmetricConfusion(2, 0.85));
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  std::unique_ptr<OneCoinModel> model = MakeOneCoin(2);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());

  // The same labels plus an eleventh annotator who always contradicts the
  // truth on 200 items.
  std::vector<Annotation> more = crowd.annotations;
  for (int32_t i = 0; i < 200; ++i) more.push_back({i, 10, 1 - crowd.truth[i]});
  const AnnotationMatrix grown = *AnnotationMatrix::Build(1000, 11, 2, more);
  std::unique_ptr<TruthModel> clone = model->Clone();
  ASSERT_THAT(clone->Fit(grown, {}, true), IsOk());
  // Clone() is deep: the original still has ten annotators.
  EXPECT_EQ(model->AnnotatorConfusion(10), model->AnnotatorConfusion(-1));
  // The new annotator started from the pooled accuracy and learned that they
  // are nearly always wrong.
  EXPECT_LT(clone->AnnotatorConfusion(10)[0], 0.1);
}

TEST(OneCoinTest, ThreadedFitIsDeterministicAndMatchesSingleThreaded) {
  SyntheticCrowdSpec spec = SymmetricCrowdSpec(60000);
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  TruthModelOptions threaded;
  threaded.num_threads = 4;
  std::unique_ptr<OneCoinModel> one = MakeOneCoin(3);
  std::unique_ptr<OneCoinModel> four = MakeOneCoin(3, threaded);
  std::unique_ptr<OneCoinModel> four_again = MakeOneCoin(3, threaded);
  absl::StatusOr<FitReport> r1 = one->Fit(crowd.matrix, {}, false);
  absl::StatusOr<FitReport> r4 = four->Fit(crowd.matrix, {}, false);
  ASSERT_THAT(r1, IsOk());
  ASSERT_THAT(r4, IsOk());
  ASSERT_THAT(four_again->Fit(crowd.matrix, {}, false), IsOk());
  EXPECT_EQ(four->Serialize(), four_again->Serialize());
  EXPECT_EQ(r1->iterations, r4->iterations);
  EXPECT_NEAR(r1->log_likelihood, r4->log_likelihood,
              1e-9 * std::abs(r1->log_likelihood));
  for (int32_t a = 0; a < 20; ++a) {
    EXPECT_NEAR(one->AnnotatorAccuracy(a), four->AnnotatorAccuracy(a), 1e-9);
  }
}

TEST(OneCoinTest, UnfittedModelGivesSoftMajorityVote) {
  std::unique_ptr<OneCoinModel> model = MakeOneCoin(2);
  EXPECT_FALSE(model->has_parameters());
  std::vector<double> out(2);
  const std::vector<Entry> labels = {{0, 1}, {1, 1}, {2, 0}};
  model->ItemPosterior(labels, -1, absl::MakeSpan(out));
  EXPECT_NEAR(out[1], (2 + 0.01) / (3 + 0.02), 1e-12);
  model->ItemPosterior(labels, 0, absl::MakeSpan(out));
  EXPECT_THAT(out, ElementsAre(1.0, 0.0));
  EXPECT_THAT(model->AnnotatorConfusion(0), ElementsAre(0.5, 0.5, 0.5, 0.5));
}

TEST(OneCoinTest, FitRejectsBadInputAndKeepsTheModel) {
  const AnnotationMatrix m = TinyMatrix();
  std::unique_ptr<OneCoinModel> model = MakeOneCoin(2);
  ASSERT_THAT(model->Fit(m, {}, false), IsOk());
  const std::string before = model->Serialize();

  const std::vector<int32_t> short_gold = {0, 1};
  absl::StatusOr<FitReport> r = model->Fit(m, short_gold, false);
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(r.status().message(), HasSubstr("gold"));

  const std::vector<int32_t> bad_gold = {0, 1, -1, 2};
  r = model->Fit(m, bad_gold, false);
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(r.status().message(), HasSubstr("gold[3]"));

  std::unique_ptr<OneCoinModel> three = MakeOneCoin(3);
  EXPECT_THAT(three->Fit(m, {}, false),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(model->Serialize(), before);
}

TEST(OneCoinTest, CreateRejectsBadOptions) {
  TruthModelOptions options;
  options.confusion_smoothing = 0;
  absl::StatusOr<std::unique_ptr<OneCoinModel>> m =
      OneCoinModel::Create(2, options);
  EXPECT_THAT(m, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(m.status().message(), HasSubstr("confusion_smoothing"));
  EXPECT_THAT(OneCoinModel::Create(1, {}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// one_coin.h: the pooled accuracy is (C + s) / (N + K s) and annotator a's is
// (c_a + s + m pooled) / (n_a + K s + m), s = confusion_smoothing (0.1), m =
// population_smoothing (2). Every item gold (0, 1, 0), so the counts are fixed: annotator 0 says
// 0, 1, 1 (2 of 3 right), annotator 1 says 0 on item 0 (1 of 1). Pooled 3.1 / 4.2; annotator 0
// (2.1 + 2 pooled) / 5.2; annotator 1 (1.1 + 2 pooled) / 3.2; an unknown one the pooled value.
TEST(OneCoinTest, AccuraciesAreTheSmoothedCountsShrunkTowardThePool) {
  const AnnotationMatrix m =
      *AnnotationMatrix::Build(3, 2, 2, {{0, 0, 0}, {1, 0, 1}, {2, 0, 1}, {0, 1, 0}});
  absl::StatusOr<std::unique_ptr<OneCoinModel>> model = OneCoinModel::Create(2, TruthModelOptions());
  ASSERT_THAT(model, IsOk());
  ASSERT_THAT((*model)->Fit(m, std::vector<int32_t>{0, 1, 0}, false), IsOk());
  const double pooled = 3.1 / 4.2;
  EXPECT_NEAR((*model)->AnnotatorAccuracy(0), (2.1 + 2 * pooled) / 5.2, 1e-9);
  EXPECT_NEAR((*model)->AnnotatorAccuracy(1), (1.1 + 2 * pooled) / 3.2, 1e-9);
  EXPECT_NEAR((*model)->AnnotatorAccuracy(99), pooled, 1e-9);
}

// Promise (one_coin.h): OneCoinParameters::Posterior returns log p(labels) (log p(gold, labels)
// for gold), where a label of annotator a is right with probability p_a and each wrong label has
// probability (1 - p_a) / (K - 1). K = 3, uniform prior 1/3, accuracies 0.5 (annotator 0) and
// 0.8 (annotator 1); annotator 0 says 0, annotator 1 says 1:
//   p(labels | 0) = 0.5 * 0.1 = 0.05, p(labels | 1) = 0.25 * 0.8 = 0.2,
//   p(labels | 2) = 0.25 * 0.1 = 0.025;
//   p(labels) = (0.05 + 0.2 + 0.025) / 3 = 0.275 / 3, posterior (2/11, 8/11, 1/11);
//   gold 2: p(2, labels) = 0.025 / 3; gold 1: 0.2 / 3.
// Every label's wrong-label term log((1 - p_a) / 2) is part of both results.
TEST(OneCoinTest, PosteriorReturnsTheMarginalLogLikelihoodOfTheLabels) {
  OneCoinParameters params(3);
  params.accuracy = {1.0 / 3, 0.5, 0.8};
  params.DeriveLogs();
  const std::vector<Entry> labels = {{0, 0}, {1, 1}};
  std::vector<double> out(3);
  const double ll = params.Posterior(labels, -1, absl::MakeSpan(out));
  EXPECT_NEAR(ll, std::log(0.275 / 3), 1e-12);
  EXPECT_NEAR(out[0], 2.0 / 11, 1e-12);
  EXPECT_NEAR(out[1], 8.0 / 11, 1e-12);
  EXPECT_NEAR(out[2], 1.0 / 11, 1e-12);
  EXPECT_NEAR(params.Posterior(labels, 2, absl::MakeSpan(out)), std::log(0.025 / 3), 1e-12);
  EXPECT_EQ(out, std::vector<double>({0.0, 0.0, 1.0}));
  EXPECT_NEAR(params.Posterior(labels, 1, absl::MakeSpan(out)), std::log(0.2 / 3), 1e-12);
}

// Promise (one_coin.h): with learn_symmetric_class_prior the class prior is
// (mass_k + r) / (mass + K r), r = prior_smoothing (1), mass_k the posterior mass of class k over
// the items with labels or gold; gold items are clamped in every E-step, so the masses are fixed:
// items 0, 1 (gold 0, labelled), 2 (gold 0, no labels) and 3 (gold 1, labelled) give
// mass = (3, 1) and the prior (3 + 1) / (4 + 2) = 2/3, 1/3. (Unsmoothed: 3/4; without the
// unlabelled gold item: 3/5.) K = 3 checks that each class adds r to the denominator.
TEST(OneCoinTest, TheLearnedClassPriorIsTheSmoothedGoldMass) {
  const AnnotationMatrix m =
      *AnnotationMatrix::Build(4, 1, 2, {{0, 0, 0}, {1, 0, 0}, {3, 0, 1}});
  TruthModelOptions options;
  options.learn_symmetric_class_prior = true;
  std::unique_ptr<OneCoinModel> model = MakeOneCoin(2, options);
  ASSERT_THAT(model->Fit(m, std::vector<int32_t>{0, 0, 0, 1}, false), IsOk());
  EXPECT_THAT(model->ClassPrior(),
              ElementsAre(DoubleNear(2.0 / 3, 1e-12), DoubleNear(1.0 / 3, 1e-12)));
  // K = 3, gold (0, 0, 1), each labelled: mass = (2, 1, 0), the prior (3, 2, 1) / (3 + 3).
  const AnnotationMatrix three =
      *AnnotationMatrix::Build(3, 1, 3, {{0, 0, 0}, {1, 0, 0}, {2, 0, 1}});
  std::unique_ptr<OneCoinModel> model3 = MakeOneCoin(3, options);
  ASSERT_THAT(model3->Fit(three, std::vector<int32_t>{0, 0, 1}, false), IsOk());
  EXPECT_THAT(model3->ClassPrior(),
              ElementsAre(DoubleNear(0.5, 1e-12), DoubleNear(1.0 / 3, 1e-12),
                          DoubleNear(1.0 / 6, 1e-12)));
}

// Promise (one_coin.h), with K = 3 so that K s differs from 2 s: pooled = (C + s) / (N + K s),
// p_a = (c_a + s + m pooled) / (n_a + K s + m), s = 0.1, m = 2. Both items gold (0, 1);
// annotator 0 says 0 on item 0 (right) and 2 on item 1 (wrong): C = 1, N = 2, pooled =
// 1.1 / 2.3, p_0 = (1.1 + 2 pooled) / 4.3.
TEST(OneCoinTest, TheSmoothingCountsEveryClass) {
  const AnnotationMatrix m = *AnnotationMatrix::Build(2, 1, 3, {{0, 0, 0}, {1, 0, 2}});
  std::unique_ptr<OneCoinModel> model = MakeOneCoin(3);
  ASSERT_THAT(model->Fit(m, std::vector<int32_t>{0, 1}, false), IsOk());
  const double pooled = 1.1 / 2.3;
  EXPECT_NEAR(model->AnnotatorAccuracy(-1), pooled, 1e-12);
  EXPECT_NEAR(model->AnnotatorAccuracy(0), (1.1 + 2 * pooled) / 4.3, 1e-12);
}

// A one-coin blob, K = 2: prior, then accuracies (pooled first).
std::string OneCoinBlob(const std::vector<double>& prior, const std::vector<double>& accuracy) {
  ByteWriter writer;
  WriteModelHeader(writer, OneCoinModel::kMethod, true);
  writer.WriteU32(2);
  writer.WriteU32(static_cast<uint32_t>(accuracy.size() - 1));
  for (double x : prior) writer.WriteF64(x);
  for (double x : accuracy) writer.WriteF64(x);
  return writer.Finish();
}

// Promise (one_coin.h): every accuracy is strictly inside (0, 1) (so no input produces NaN), and
// the class prior is a distribution. Restore refuses, with INVALID_ARGUMENT and the model
// unchanged, a well-formed, checksummed blob with an accuracy of 0, 1 or NaN, a prior
// probability outside (0, 1], or a prior that does not sum to 1.
TEST(OneCoinTest, RestoreRefusesAccuraciesOutsideTheOpenUnitIntervalAndBadPriors) {
  std::unique_ptr<OneCoinModel> model = MakeOneCoin(2);
  ASSERT_THAT(model->Restore(OneCoinBlob({0.25, 0.75}, {0.6, 0.9})), IsOk());
  EXPECT_EQ(model->AnnotatorAccuracy(0), 0.9);
  EXPECT_EQ(model->ClassPrior(), std::vector<double>({0.25, 0.75}));
  const std::string good = model->Serialize();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<std::string> bad = {
      OneCoinBlob({0.25, 0.75}, {0.6, 1.0}), OneCoinBlob({0.25, 0.75}, {0.0, 0.9}),
      OneCoinBlob({0.25, 0.75}, {0.6, nan}), OneCoinBlob({0.5, 0.6}, {0.6, 0.9}),
      OneCoinBlob({0.0, 1.0}, {0.6, 0.9}), OneCoinBlob({1.5, -0.5}, {0.6, 0.9}),
      OneCoinBlob({nan, 0.5}, {0.6, 0.9})};
  for (size_t i = 0; i < bad.size(); ++i) {
    EXPECT_THAT(model->Restore(bad[i]), StatusIs(absl::StatusCode::kInvalidArgument)) << i;
  }
  EXPECT_TRUE(model->Serialize() == good) << "a refused Restore changed the model";
}

// Promise (one_coin.h): a warm fit's first E-step is that of the previous parameters, in which
// an id never seen in the fit has the pooled accuracy. Restored: pooled 0.6, annotator 0 0.9;
// the new data adds annotator 1, who alone labels item 0 (label 1), while annotator 0 alone
// labels item 1 (label 0). Uniform prior, K = 2: the E-step gives item 0 q(1) = 0.6 (annotator
// 1 at the pooled accuracy) and item 1 q(0) = 0.9, so C = 1.5, N = 2 and the M-step gives
// pooled' = (1.5 + 0.1) / (2 + 0.2) and p_1 = (0.6 + 0.1 + 2 pooled') / (1 + 0.2 + 2).
TEST(OneCoinTest, AWarmFitStartsNewAnnotatorsFromThePooledAccuracy) {
  TruthModelOptions one_iteration;
  one_iteration.max_iterations = 1;
  std::unique_ptr<OneCoinModel> model = MakeOneCoin(2, one_iteration);
  ASSERT_THAT(model->Restore(OneCoinBlob({0.5, 0.5}, {0.6, 0.9})), IsOk());
  const AnnotationMatrix m = *AnnotationMatrix::Build(2, 2, 2, {{0, 1, 1}, {1, 0, 0}});
  ASSERT_THAT(model->Fit(m, {}, true), IsOk());
  const double pooled = 1.6 / 2.2;
  EXPECT_NEAR(model->AnnotatorAccuracy(-1), pooled, 1e-12);
  EXPECT_NEAR(model->AnnotatorAccuracy(1), (0.7 + 2 * pooled) / 3.2, 1e-12);
  EXPECT_NEAR(model->AnnotatorAccuracy(0), (1.0 + 2 * pooled) / 3.2, 1e-12);
}

// one_coin.h: ResizeAnnotators keeps the first annotators and gives new ones the pooled
// accuracy (slot 0), with the logs derived from it.
TEST(OneCoinParametersTest, ResizeGivesNewAnnotatorsThePooledAccuracy) {
  OneCoinParameters params(3);
  params.accuracy = {0.6, 0.9};
  params.DeriveLogs();
  params.ResizeAnnotators(3);
  EXPECT_EQ(params.num_annotators(), 3);
  EXPECT_EQ(params.accuracy, std::vector<double>({0.6, 0.9, 0.6, 0.6}));
  for (size_t slot : {2u, 3u}) {
    EXPECT_EQ(params.log_wrong[slot], params.log_wrong[0]) << slot;
    EXPECT_EQ(params.vote_weight[slot], params.vote_weight[0]) << slot;
  }
}

// one_coin.h: before the first fit AnnotatorAccuracy is 1 / K and the confusion uniform
// (K = 3, where 1 / K is not 1/2).
TEST(OneCoinTest, BeforeAFitTheAccuracyIsOneOverK) {
  std::unique_ptr<OneCoinModel> model = MakeOneCoin(3);
  EXPECT_DOUBLE_EQ(model->AnnotatorAccuracy(0), 1.0 / 3);
  for (double v : model->AnnotatorConfusion(0)) EXPECT_DOUBLE_EQ(v, 1.0 / 3);
}

// Restore refuses a class prior that is not a distribution: (0.5, 0.5002) sums to 1.0002, far
// beyond rounding (the control, (0.5, 0.5), restores).
TEST(OneCoinTest, RestoreRefusesAClassPriorThatDoesNotSumToOne) {
  const auto blob = [](double second) {
    ByteWriter writer;
    WriteModelHeader(writer, OneCoinModel::kMethod, true);
    writer.WriteU32(2);  // classes
    writer.WriteU32(1);  // annotators
    writer.WriteF64(0.5);
    writer.WriteF64(second);
    writer.WriteF64(0.7);  // pooled accuracy
    writer.WriteF64(0.8);  // annotator 0
    return writer.Finish();
  };
  std::unique_ptr<OneCoinModel> model = MakeOneCoin(2);
  ASSERT_THAT(model->Restore(blob(0.5)), IsOk());
  EXPECT_THAT(model->Restore(blob(0.5002)), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_DOUBLE_EQ(model->AnnotatorAccuracy(0), 0.8);
}

// truth_model.h: Clone() is a deep copy, parameters included; Restore refuses a blob with bytes
// after the model (under a valid checksum) and keeps no parameters from it.
TEST(OneCoinTest, CloneKeepsTheParametersAndRestoreRefusesTrailingBytes) {
  const AnnotationMatrix m =
      *AnnotationMatrix::Build(2, 2, 2, {{0, 0, 0}, {0, 1, 0}, {1, 0, 1}, {1, 1, 0}});
  std::unique_ptr<OneCoinModel> model = MakeOneCoin(2);
  ASSERT_THAT(model->Fit(m, {}, false), IsOk());
  const std::string blob = model->Serialize();
  const std::unique_ptr<TruthModel> clone = model->Clone();
  EXPECT_TRUE(clone->has_parameters());
  EXPECT_EQ(clone->Serialize(), blob);
  EXPECT_EQ(AllPosteriors(*clone, m, {}), AllPosteriors(*model, m, {}));
  std::unique_ptr<OneCoinModel> restored = MakeOneCoin(2);
  EXPECT_THAT(restored->Restore(WithTrailingBytes(blob)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(restored->has_parameters());
}

// truth_model.h: convergence compares the log-likelihoods of two consecutive E-steps, so the
// first iteration (no previous E-step) never converges, even with a tolerance of 10 that any
// relative change meets: the fit stops at iteration 2.
TEST(OneCoinTest, TheFirstIterationNeverConverges) {
  TruthModelOptions loose;
  loose.tolerance = 10.0;
  std::unique_ptr<OneCoinModel> model = MakeOneCoin(2, loose);
  ExpectTheFirstIterationNeverConverges(*model);
}

// truth_model.h: ItemPosterior writes a probability distribution whatever the labels. 400 labels
// of class 1 from annotators outside the fit (pooled accuracy 0.9: each adds ln 9 = 2.2 to class 1,
// beyond exp's range in all) give class 1 probability 1, not an overflow.
TEST(OneCoinTest, ManyAgreeingLabelsGiveAFinitePosterior) {
  ByteWriter writer;
  WriteModelHeader(writer, OneCoinModel::kMethod, true);
  writer.WriteU32(2);  // classes
  writer.WriteU32(0);  // annotators: every id gets the pooled accuracy
  writer.WriteF64(0.5);
  writer.WriteF64(0.5);
  writer.WriteF64(0.9);
  std::unique_ptr<OneCoinModel> model = MakeOneCoin(2);
  ASSERT_THAT(model->Restore(writer.Finish()), IsOk());
  std::vector<Entry> labels;
  for (int32_t a = 0; a < 400; ++a) labels.push_back({a, 1});
  std::vector<double> out(2);
  model->ItemPosterior(labels, -1, absl::MakeSpan(out));
  EXPECT_EQ(out[0], 0.0);
  EXPECT_EQ(out[1], 1.0);
}

// one_coin.h: EM stops once the change of the log-likelihood is at most options.tolerance
// times its size (a relative rule, as ds). The log-likelihoods of the iterations come from fits
// capped at 1, 2, ... iterations with tolerance 0; the fit with tolerance 1e-5 must stop at the
// first iteration t >= 2 whose change from t - 1 is within 1e-5 |ll_t|, which (|ll| being in
// the thousands) is earlier than where an absolute rule would stop.
TEST(OneCoinTest, TheToleranceIsRelativeToTheLogLikelihood) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(SymmetricCrowdSpec(400));
  TruthModelOptions capped;
  capped.tolerance = 0;
  std::vector<double> ll = {0.0};  // ll[t]: the log-likelihood of iteration t
  for (int t = 1; t <= 40; ++t) {
    capped.max_iterations = t;
    std::unique_ptr<OneCoinModel> model = MakeOneCoin(3, capped);
    absl::StatusOr<FitReport> report = model->Fit(crowd.matrix, {}, false);
    ASSERT_THAT(report, IsOk());
    ASSERT_EQ(report->iterations, t);
    ll.push_back(report->log_likelihood);
  }
  const double tolerance = 1e-5;
  auto first_within = [&](double scale_of_ll) {
    for (int t = 2; t < static_cast<int>(ll.size()); ++t) {
      const double scale = scale_of_ll > 0 ? std::abs(ll[t]) : 1.0;
      if (std::abs(ll[t] - ll[t - 1]) <= tolerance * scale) return t;
    }
    return -1;
  };
  const int relative = first_within(1.0);
  ASSERT_GT(relative, 0);
  ASSERT_NE(first_within(0.0), relative) << "the case does not tell the two rules apart";
  TruthModelOptions options;
  options.tolerance = tolerance;
  std::unique_ptr<OneCoinModel> model = MakeOneCoin(3, options);
  absl::StatusOr<FitReport> report = model->Fit(crowd.matrix, {}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_TRUE(report->converged);
  EXPECT_EQ(report->iterations, relative);
  EXPECT_EQ(report->log_likelihood, ll[relative]);
}

// one_coin.h: ClassPrior is uniform before the first fit, 1/K for every one of the K classes.
TEST(OneCoinTest, BeforeAFitTheClassPriorIsUniformOverThreeClasses) {
  std::unique_ptr<OneCoinModel> model = MakeOneCoin(3);
  EXPECT_THAT(model->ClassPrior(),
              ElementsAre(DoubleNear(1.0 / 3, 1e-15), DoubleNear(1.0 / 3, 1e-15),
                          DoubleNear(1.0 / 3, 1e-15)));
}

// one_coin.h / truth_model.h: Restore replaces the model's state by the blob's; the blob of a
// model never fitted makes a fitted model empty again (accuracy 1/K, uniform prior).
TEST(OneCoinTest, RestoringAnEmptyModelsBlobEmptiesAFittedModel) {
  const AnnotationMatrix m =
      *AnnotationMatrix::Build(2, 2, 3, {{0, 0, 0}, {0, 1, 0}, {1, 0, 2}, {1, 1, 2}});
  std::unique_ptr<OneCoinModel> model = MakeOneCoin(3);
  ASSERT_THAT(model->Fit(m, {}, false), IsOk());
  ASSERT_TRUE(model->has_parameters());
  ASSERT_THAT(model->Restore(MakeOneCoin(3)->Serialize()), IsOk());
  EXPECT_FALSE(model->has_parameters());
  EXPECT_DOUBLE_EQ(model->AnnotatorAccuracy(0), 1.0 / 3);
  EXPECT_THAT(model->ClassPrior(), Each(DoubleNear(1.0 / 3, 1e-15)));
}

// one_coin.h: only a warm start begins from the previous parameters; a cold fit of a fitted
// model begins, like a new model, from the M-step on the soft majority vote. With one iteration
// the result depends on where the fit started: fitted first on a crowd where annotator 0
// contradicts three others, a cold one-iteration fit of another crowd must give exactly the
// parameters of a new model's (and a warm one must not, or the case would prove nothing).
TEST(OneCoinTest, AColdFitOfAFittedModelForgetsThePreviousParameters) {
  std::vector<Annotation> first, second;
  for (int32_t i = 0; i < 6; ++i) {
    first.push_back({i, 0, 1 - i % 2});
    for (int32_t a = 1; a < 4; ++a) first.push_back({i, a, i % 2});
    second.push_back({i, 0, i % 3 == 0 ? 1 : 0});
    second.push_back({i, 1, i % 2});
    second.push_back({i, 2, 0});
  }
  TruthModelOptions one_iteration;
  one_iteration.max_iterations = 1;
  const AnnotationMatrix first_matrix = *AnnotationMatrix::Build(6, 4, 2, first);
  const AnnotationMatrix m = *AnnotationMatrix::Build(6, 3, 2, second);
  std::unique_ptr<OneCoinModel> model = MakeOneCoin(2, one_iteration);
  ASSERT_THAT(model->Fit(first_matrix, {}, false), IsOk());
  ASSERT_LT(model->AnnotatorAccuracy(0), 0.5);
  ASSERT_THAT(model->Fit(m, {}, false), IsOk());
  std::unique_ptr<OneCoinModel> fresh = MakeOneCoin(2, one_iteration);
  ASSERT_THAT(fresh->Fit(m, {}, false), IsOk());
  for (int32_t a = -1; a < 3; ++a) {
    EXPECT_EQ(model->AnnotatorAccuracy(a), fresh->AnnotatorAccuracy(a)) << "annotator " << a;
  }
  EXPECT_EQ(model->Serialize(), fresh->Serialize());

  std::unique_ptr<OneCoinModel> warm = MakeOneCoin(2, one_iteration);
  ASSERT_THAT(warm->Fit(first_matrix, {}, false), IsOk());
  ASSERT_THAT(warm->Fit(m, {}, true), IsOk());
  bool differs = false;
  for (int32_t a = 0; a < 3; ++a) {
    differs |= std::abs(warm->AnnotatorAccuracy(a) - fresh->AnnotatorAccuracy(a)) > 1e-6;
  }
  EXPECT_TRUE(differs) << "the case does not tell a warm start from a cold one";
}

// one_coin.h: a cold fit's first E-step is the soft majority vote with gold items clamped to
// their class, and FitReport.log_likelihood is that of the last E-step, so with max_iterations 1
// it is the likelihood under the M-step on those clamped responsibilities. One annotator, K = 2,
// uniform prior, s = 0.1, m = 2: item 0 (gold 1) and items 1, 2 (gold 0) all labelled 0, so 2
// of 3 labels are right: pooled = p_0 = (2 + 0.1) / (3 + 0.2) = 21/32 (with a single annotator
// the shrinkage toward the pool changes nothing). The E-step under it:
//   log p(1, label 0) = log(1/2 (1 - 21/32)),  log p(0, label 0) = log(1/2 21/32) (twice).
// (Had the first E-step ignored the gold, all three labels would count as right, and p_0 would
// be (3 1.01/1.02 + 0.1) / 3.2 = 0.96.) The M-step after it sees the same clamped counts: 21/32.
TEST(OneCoinTest, TheFirstEStepClampsGoldItems) {
  const AnnotationMatrix m = *AnnotationMatrix::Build(3, 1, 2, {{0, 0, 0}, {1, 0, 0}, {2, 0, 0}});
  TruthModelOptions one_iteration;
  one_iteration.max_iterations = 1;
  std::unique_ptr<OneCoinModel> model = MakeOneCoin(2, one_iteration);
  absl::StatusOr<FitReport> report = model->Fit(m, std::vector<int32_t>{1, 0, 0}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->iterations, 1);
  const double p = 21.0 / 32;
  EXPECT_NEAR(report->log_likelihood, std::log(0.5 * (1 - p)) + 2 * std::log(0.5 * p), 1e-12);
  EXPECT_NEAR(model->AnnotatorAccuracy(0), p, 1e-12);
  EXPECT_NEAR(model->AnnotatorAccuracy(-1), p, 1e-12);
}

// one_coin.h: a threaded fit splits the items into ranges and merges their counts, so it is
// the single-threaded fit up to rounding; every item must fall in one range even when the items
// do not split evenly. 60001 items of 5 labels (4 threads of > 65536 labels each) leave a
// remainder of 1 item over 4 ranges; one item more or less moves the log-likelihood by ~1e-5
// of itself, far beyond rounding.
TEST(OneCoinTest, ThreadedFitCountsEveryItemWhenTheRangesAreUneven) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(SymmetricCrowdSpec(60001));
  ASSERT_EQ(crowd.matrix.num_items() % 4, 1);
  TruthModelOptions threaded;
  threaded.num_threads = 4;
  std::unique_ptr<OneCoinModel> one = MakeOneCoin(3);
  std::unique_ptr<OneCoinModel> four = MakeOneCoin(3, threaded);
  absl::StatusOr<FitReport> r1 = one->Fit(crowd.matrix, {}, false);
  absl::StatusOr<FitReport> r4 = four->Fit(crowd.matrix, {}, false);
  ASSERT_THAT(r1, IsOk());
  ASSERT_THAT(r4, IsOk());
  EXPECT_EQ(r1->iterations, r4->iterations);
  EXPECT_NEAR(r4->log_likelihood, r1->log_likelihood, 1e-9 * std::abs(r1->log_likelihood));
  for (int32_t a = -1; a < 20; ++a) {
    EXPECT_NEAR(four->AnnotatorAccuracy(a), one->AnnotatorAccuracy(a), 1e-9) << a;
  }
}

// one_coin.h: any id never seen in the fit gets the pooled accuracy, negative ids other than -1
// included: annotator -7's accuracy, confusion and vote are those of an unseen id.
TEST(OneCoinTest, ANegativeIdGetsThePooledAccuracy) {
  const AnnotationMatrix m =
      *AnnotationMatrix::Build(3, 2, 2, {{0, 0, 0}, {0, 1, 0}, {1, 0, 1}, {1, 1, 0}, {2, 1, 1}});
  std::unique_ptr<OneCoinModel> model = MakeOneCoin(2);
  ASSERT_THAT(model->Fit(m, {}, false), IsOk());
  const double pooled = model->AnnotatorAccuracy(1000);
  EXPECT_EQ(model->AnnotatorAccuracy(-7), pooled);
  EXPECT_EQ(model->AnnotatorConfusion(-7), model->AnnotatorConfusion(1000));
  std::vector<double> out(2);
  model->ItemPosterior(std::vector<Entry>{{-7, 1}}, -1, absl::MakeSpan(out));
  EXPECT_NEAR(out[1], pooled, 1e-12);
}

}  // namespace
}  // namespace verity::models

#include "models/dawid_skene.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/annotation_matrix.h"
#include "models/binary_codec.h"
#include "models/confusion_parameters.h"
#include "models/majority_vote.h"
#include "common/status_matchers.h"
#include "models/testing/synthetic_crowd.h"
#include "models/truth_model.h"

namespace verity::models {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::verity::models::testing::Accuracy;
using ::verity::models::testing::GenerateSyntheticCrowd;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;
using ::verity::models::testing::SymmetricConfusion;
using ::verity::models::testing::SyntheticCrowd;
using ::verity::models::testing::SyntheticCrowdSpec;
using Entry = AnnotationMatrix::Entry;

std::unique_ptr<DawidSkeneModel> MakeDs(int32_t num_classes,
                                        const TruthModelOptions& options = {}) {
  absl::StatusOr<std::unique_ptr<DawidSkeneModel>> model =
      DawidSkeneModel::Create(num_classes, options);
  EXPECT_THAT(model, IsOk());
  return model.ok() ? *std::move(model) : nullptr;
}

std::unique_ptr<MajorityVoteModel> MakeMv(int32_t num_classes) {
  absl::StatusOr<std::unique_ptr<MajorityVoteModel>> model =
      MajorityVoteModel::Create(num_classes, {});
  EXPECT_THAT(model, IsOk());
  return model.ok() ? *std::move(model) : nullptr;
}

// Twenty annotators with K = 3 and distinct, asymmetric confusions: accuracy
// from 0.55 to 0.93, errors biased toward the next class.
std::vector<std::vector<double>> VariedConfusions() {
  std::vector<std::vector<double>> confusions;
  for (int a = 0; a < 20; ++a) {
    const double accuracy = 0.55 + 0.02 * a;
    std::vector<double> c(9);
    for (int k = 0; k < 3; ++k) {
      c[k * 3 + k] = accuracy;
      c[k * 3 + (k + 1) % 3] = (1 - accuracy) * 0.7;
      c[k * 3 + (k + 2) % 3] = (1 - accuracy) * 0.3;
    }
    confusions.push_back(c);
  }
  return confusions;
}

double MeanConfusionError(const TruthModel& model,
                          const std::vector<std::vector<double>>& truth) {
  double total = 0;
  size_t cells = 0;
  for (size_t a = 0; a < truth.size(); ++a) {
    const std::vector<double> estimate =
        model.AnnotatorConfusion(static_cast<int32_t>(a));
    for (size_t j = 0; j < estimate.size(); ++j) {
      total += std::abs(estimate[j] - truth[a][j]);
      ++cells;
    }
  }
  return total / cells;
}

double MaxConfusionError(const TruthModel& model,
                         const std::vector<std::vector<double>>& truth) {
  double max_error = 0;
  for (size_t a = 0; a < truth.size(); ++a) {
    const std::vector<double> estimate =
        model.AnnotatorConfusion(static_cast<int32_t>(a));
    for (size_t j = 0; j < estimate.size(); ++j) {
      max_error = std::max(max_error, std::abs(estimate[j] - truth[a][j]));
    }
  }
  return max_error;
}

// The confusions a fit would find if it knew every item's true class: the
// empirical label frequencies per (annotator, true class). Comparing with
// these separates EM's error from the sampling noise of the data.
std::vector<std::vector<double>> OracleConfusions(const SyntheticCrowd& crowd,
                                                  int32_t num_annotators,
                                                  int32_t k) {
  std::vector<std::vector<double>> counts(num_annotators,
                                          std::vector<double>(k * k, 0.0));
  for (const Annotation& a : crowd.annotations) {
    counts[a.annotator][crowd.truth[a.item] * k + a.label] += 1;
  }
  for (std::vector<double>& c : counts) {
    for (int32_t row = 0; row < k; ++row) {
      double total = 0;
      for (int32_t l = 0; l < k; ++l) total += c[row * k + l];
      for (int32_t l = 0; l < k; ++l) c[row * k + l] /= total;
    }
  }
  return counts;
}

SyntheticCrowdSpec VariedCrowdSpec(int32_t num_items) {
  SyntheticCrowdSpec spec;
  spec.num_items = num_items;
  spec.num_classes = 3;
  spec.labels_per_item = 5;
  spec.class_prior = {0.5, 0.3, 0.2};
  spec.confusions = VariedConfusions();
  spec.seed = 7;
  return spec;
}

TEST(DawidSkeneTest, RecoversKnownConfusionMatrices) {
  // 30000 items: each annotator labels about 7500, so even the rarest class
  // (prior 0.2) gives ~1500 labels per confusion row and a sampling standard
  // deviation of at most 0.013 per cell.
  const SyntheticCrowdSpec spec = VariedCrowdSpec(30000);
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);

  std::unique_ptr<DawidSkeneModel> ds = MakeDs(3);
  absl::StatusOr<FitReport> report = ds->Fit(crowd.matrix, {}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_TRUE(report->converged);
  EXPECT_TRUE(std::isfinite(report->log_likelihood));
  EXPECT_LT(report->log_likelihood, 0);

  const double max_error = MaxConfusionError(*ds, spec.confusions);
  RecordProperty("max_confusion_error", std::to_string(max_error));
  EXPECT_LE(max_error, 0.05);
  EXPECT_THAT(ds->ClassPrior(), ElementsAre(DoubleNear(0.5, 0.01),
                                            DoubleNear(0.3, 0.01),
                                            DoubleNear(0.2, 0.01)));
}

TEST(DawidSkeneTest, MatchesOracleConfusionsAndBeatsMajorityVoteOnSmallData) {
  // 2000 items, 20 annotators, 5 labels per item: the confusions are as good
  // as those estimated with the truth known.
  const SyntheticCrowdSpec spec = VariedCrowdSpec(2000);
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);

  std::unique_ptr<DawidSkeneModel> ds = MakeDs(3);
  absl::StatusOr<FitReport> report = ds->Fit(crowd.matrix, {}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_TRUE(report->converged);
  const double oracle_error =
      MaxConfusionError(*ds, OracleConfusions(crowd, 20, 3));
  RecordProperty("max_error_vs_oracle", std::to_string(oracle_error));
  EXPECT_LE(oracle_error, 0.05);

  const double ds_accuracy =
      Accuracy(AllPosteriors(*ds, crowd.matrix, {}), crowd.matrix, crowd.truth);
  std::unique_ptr<MajorityVoteModel> mv = MakeMv(3);
  ASSERT_THAT(mv->Fit(crowd.matrix, {}, false), IsOk());
  const double mv_accuracy =
      Accuracy(AllPosteriors(*mv, crowd.matrix, {}), crowd.matrix, crowd.truth);
  RecordProperty("ds_accuracy", std::to_string(ds_accuracy));
  RecordProperty("mv_accuracy", std::to_string(mv_accuracy));
  EXPECT_GE(ds_accuracy, 0.90);
  EXPECT_GE(ds_accuracy, mv_accuracy + 0.01);
}

TEST(DawidSkeneTest, BeatsMajorityVoteWhenAThirdAreSpammers) {
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

  std::unique_ptr<DawidSkeneModel> ds = MakeDs(2);
  ASSERT_THAT(ds->Fit(crowd.matrix, {}, false), IsOk());
  std::unique_ptr<MajorityVoteModel> mv = MakeMv(2);
  ASSERT_THAT(mv->Fit(crowd.matrix, {}, false), IsOk());
  const double ds_accuracy =
      Accuracy(AllPosteriors(*ds, crowd.matrix, {}), crowd.matrix, crowd.truth);
  const double mv_accuracy =
      Accuracy(AllPosteriors(*mv, crowd.matrix, {}), crowd.matrix, crowd.truth);
  RecordProperty("ds_accuracy", std::to_string(ds_accuracy));
  RecordProperty("mv_accuracy", std::to_string(mv_accuracy));
  EXPECT_GT(ds_accuracy, mv_accuracy + 0.03);
  // The spammers are found: their estimated accuracy is near 0.5.
  for (int a = 0; a < 30; a += 3) {
    const std::vector<double> c = ds->AnnotatorConfusion(a);
    EXPECT_NEAR(c[0], 0.5, 0.1) << "annotator " << a;
    EXPECT_NEAR(c[3], 0.5, 0.1) << "annotator " << a;
  }
}

TEST(DawidSkeneTest, GoldItemsAreClampedAndImproveTheConfusions) {
  // A hard crowd: three labels per item from mostly weak annotators.
  SyntheticCrowdSpec spec;
  spec.num_items = 1500;
  spec.num_classes = 3;
  spec.labels_per_item = 3;
  spec.confusions = VariedConfusions();
  for (int a = 0; a < 12; ++a) spec.confusions[a] = SymmetricConfusion(3, 0.45);
  spec.seed = 5;
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);

  // Gold on every third item.
  std::vector<int32_t> gold(spec.num_items, -1);
  for (int32_t i = 0; i < spec.num_items; i += 3) gold[i] = crowd.truth[i];

  std::unique_ptr<DawidSkeneModel> without_gold = MakeDs(3);
  ASSERT_THAT(without_gold->Fit(crowd.matrix, {}, false), IsOk());
  std::unique_ptr<DawidSkeneModel> with_gold = MakeDs(3);
  ASSERT_THAT(with_gold->Fit(crowd.matrix, gold, false), IsOk());

  const std::vector<double> posteriors =
      AllPosteriors(*with_gold, crowd.matrix, gold);
  for (int32_t i = 0; i < spec.num_items; i += 3) {
    for (int32_t k = 0; k < 3; ++k) {
      ASSERT_EQ(posteriors[i * 3 + k], k == gold[i] ? 1.0 : 0.0)
          << "item " << i << " class " << k;
    }
  }
  const double error_without = MaxConfusionError(*without_gold, spec.confusions);
  const double error_with = MaxConfusionError(*with_gold, spec.confusions);
  RecordProperty("max_error_without_gold", std::to_string(error_without));
  RecordProperty("max_error_with_gold", std::to_string(error_with));
  EXPECT_LT(error_with, error_without);
  const double mean_error_without =
      MeanConfusionError(*without_gold, spec.confusions);
  const double mean_error_with =
      MeanConfusionError(*with_gold, spec.confusions);
  RecordProperty("mean_error_without_gold", std::to_string(mean_error_without));
  RecordProperty("mean_error_with_gold", std::to_string(mean_error_with));
  EXPECT_LT(mean_error_with, mean_error_without);

  // Accuracy on the items without gold improves too.
  std::vector<int32_t> truth_of_unclamped = crowd.truth;
  for (int32_t i = 0; i < spec.num_items; i += 3) truth_of_unclamped[i] = -1;
  const double accuracy_without =
      Accuracy(AllPosteriors(*without_gold, crowd.matrix, {}), crowd.matrix,
               truth_of_unclamped);
  const double accuracy_with =
      Accuracy(posteriors, crowd.matrix, truth_of_unclamped);
  RecordProperty("accuracy_without_gold", std::to_string(accuracy_without));
  RecordProperty("accuracy_with_gold", std::to_string(accuracy_with));
  EXPECT_GE(accuracy_with, accuracy_without);
}

// Items: 0 labelled by annotators 0, 1; 1 labelled by 0, 1; 2 with no labels;
// 3 labelled only by annotator 2, whose only label it is. Annotator 3 has no
// labels at all.
AnnotationMatrix TinyMatrix() {
  const std::vector<Annotation> triples = {
      {0, 0, 0}, {0, 1, 0}, {1, 0, 1}, {1, 1, 1}, {3, 2, 1}};
  return *AnnotationMatrix::Build(4, 4, 2, triples);
}

TEST(DawidSkeneTest, NoNanForSparseAnnotatorsAndUnlabelledItems) {
  const AnnotationMatrix m = TinyMatrix();
  std::unique_ptr<DawidSkeneModel> ds = MakeDs(2);
  absl::StatusOr<FitReport> report = ds->Fit(m, {}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_TRUE(std::isfinite(report->log_likelihood));

  const std::vector<double> posteriors = AllPosteriors(*ds, m, {});
  for (int32_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(std::isfinite(posteriors[2 * i]));
    EXPECT_TRUE(std::isfinite(posteriors[2 * i + 1]));
    EXPECT_NEAR(posteriors[2 * i] + posteriors[2 * i + 1], 1.0, 1e-12);
  }
  // The unlabelled item gets the class prior.
  const std::vector<double> prior = ds->ClassPrior();
  EXPECT_DOUBLE_EQ(posteriors[4], prior[0]);
  EXPECT_DOUBLE_EQ(posteriors[5], prior[1]);
  // Item 3's single label pulls toward class 1.
  EXPECT_GT(posteriors[7], 0.5);

  for (int32_t a : {0, 1, 2, 3, 4, -1}) {
    const std::vector<double> c = ds->AnnotatorConfusion(a);
    ASSERT_EQ(c.size(), 4u);
    for (double p : c) EXPECT_TRUE(std::isfinite(p) && p > 0) << a;
    EXPECT_NEAR(c[0] + c[1], 1.0, 1e-12);
    EXPECT_NEAR(c[2] + c[3], 1.0, 1e-12);
  }
  // An annotator with no labels, and ids never seen, get the population
  // confusion.
  EXPECT_EQ(ds->AnnotatorConfusion(3), ds->AnnotatorConfusion(4));
  EXPECT_EQ(ds->AnnotatorConfusion(-1), ds->AnnotatorConfusion(4));
}

TEST(DawidSkeneTest, EmptyDataFitsToTheUniformModel) {
  const AnnotationMatrix m = *AnnotationMatrix::Build(3, 2, 2, {});
  std::unique_ptr<DawidSkeneModel> ds = MakeDs(2);
  absl::StatusOr<FitReport> report = ds->Fit(m, {}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->log_likelihood, 0.0);
  EXPECT_TRUE(report->converged);
  EXPECT_THAT(AllPosteriors(*ds, m, {}),
              ElementsAre(0.5, 0.5, 0.5, 0.5, 0.5, 0.5));
}

TEST(DawidSkeneTest, UnseenAnnotatorUsesPopulationConfusion) {
  SyntheticCrowdSpec spec;
  spec.num_items = 500;
  spec.confusions.assign(10, SymmetricConfusion(2, 0.8));
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  std::unique_ptr<DawidSkeneModel> ds = MakeDs(2);
  ASSERT_THAT(ds->Fit(crowd.matrix, {}, false), IsOk());

  const std::vector<double> population = ds->AnnotatorConfusion(1000);
  EXPECT_NEAR(population[0], 0.8, 0.03);
  EXPECT_NEAR(population[3], 0.8, 0.03);
  // A label from an unseen annotator moves the posterior exactly as the
  // population confusion says.
  std::vector<double> out(2);
  const std::vector<Entry> labels = {{1000, 1}};
  ds->ItemPosterior(labels, -1, absl::MakeSpan(out));
  const std::vector<double> prior = ds->ClassPrior();
  const double p1 = prior[1] * population[3];
  const double p0 = prior[0] * population[1];
  EXPECT_NEAR(out[1], p1 / (p0 + p1), 1e-12);
}

TEST(DawidSkeneTest, ItemPosteriorIgnoresTheOrderOfLabels) {
  SyntheticCrowdSpec spec;
  spec.num_items = 300;
  spec.num_classes = 3;
  spec.confusions = VariedConfusions();
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  std::unique_ptr<DawidSkeneModel> ds = MakeDs(3);
  ASSERT_THAT(ds->Fit(crowd.matrix, {}, false), IsOk());

  const std::vector<double> all = AllPosteriors(*ds, crowd.matrix, {});
  std::vector<double> out(3);
  for (int32_t i = 0; i < spec.num_items; ++i) {
    std::vector<Entry> labels(crowd.matrix.LabelsOfItem(i).begin(),
                              crowd.matrix.LabelsOfItem(i).end());
    std::reverse(labels.begin(), labels.end());
    ds->ItemPosterior(labels, -1, absl::MakeSpan(out));
    // Bit-identical, not merely close: online updates must equal a full
    // recomputation after a restart.
    ASSERT_EQ(out[0], all[3 * i]);
    ASSERT_EQ(out[1], all[3 * i + 1]);
    ASSERT_EQ(out[2], all[3 * i + 2]);
  }
}

TEST(DawidSkeneTest, SerializeRestoreGivesIdenticalPosteriors) {
  SyntheticCrowdSpec spec;
  spec.num_items = 400;
  spec.num_classes = 3;
  spec.confusions = VariedConfusions();
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  std::unique_ptr<DawidSkeneModel> ds = MakeDs(3);
  ASSERT_THAT(ds->Fit(crowd.matrix, {}, false), IsOk());
  const std::string blob = ds->Serialize();

  std::unique_ptr<DawidSkeneModel> restored = MakeDs(3);
  EXPECT_FALSE(restored->has_parameters());
  ASSERT_THAT(restored->Restore(blob), IsOk());
  EXPECT_TRUE(restored->has_parameters());
  EXPECT_EQ(AllPosteriors(*restored, crowd.matrix, {}),
            AllPosteriors(*ds, crowd.matrix, {}));
  for (int32_t a = -1; a <= 21; ++a) {
    EXPECT_EQ(restored->AnnotatorConfusion(a), ds->AnnotatorConfusion(a));
  }
  EXPECT_EQ(restored->ClassPrior(), ds->ClassPrior());
  EXPECT_EQ(restored->Serialize(), blob);
}

TEST(DawidSkeneTest, SerializeRestoreOfAnEmptyModel) {
  std::unique_ptr<DawidSkeneModel> ds = MakeDs(2);
  std::unique_ptr<DawidSkeneModel> restored = MakeDs(2);
  ASSERT_THAT(restored->Restore(ds->Serialize()), IsOk());
  EXPECT_FALSE(restored->has_parameters());
}

TEST(DawidSkeneTest, RestoreRejectsCorruptOrMismatchedInput) {
  SyntheticCrowdSpec spec;
  spec.num_items = 100;
  spec.confusions.assign(5, SymmetricConfusion(2, 0.8));
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  std::unique_ptr<DawidSkeneModel> ds = MakeDs(2);
  ASSERT_THAT(ds->Fit(crowd.matrix, {}, false), IsOk());
  const std::string blob = ds->Serialize();
  const std::vector<double> before = AllPosteriors(*ds, crowd.matrix, {});

  std::string flipped = blob;
  flipped[blob.size() / 2] ^= 0x10;
  EXPECT_THAT(ds->Restore(flipped),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ds->Restore(blob.substr(0, blob.size() - 9)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ds->Restore(""), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ds->Restore("not a model at all"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // A failed Restore leaves the parameters unchanged.
  EXPECT_EQ(AllPosteriors(*ds, crowd.matrix, {}), before);

  std::unique_ptr<DawidSkeneModel> three_classes = MakeDs(3);
  absl::Status s = three_classes->Restore(blob);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(s.message(), HasSubstr("classes"));

  std::unique_ptr<MajorityVoteModel> mv = MakeMv(2);
  s = mv->Restore(blob);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(s.message(), HasSubstr("method"));
}

TEST(DawidSkeneTest, WarmStartFromAConvergedModelConvergesAtOnce) {
  SyntheticCrowdSpec spec;
  spec.num_items = 2000;
  spec.num_classes = 3;
  spec.confusions = VariedConfusions();
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  std::unique_ptr<DawidSkeneModel> ds = MakeDs(3);
  absl::StatusOr<FitReport> cold = ds->Fit(crowd.matrix, {}, false);
  ASSERT_THAT(cold, IsOk());
  ASSERT_TRUE(cold->converged);

  absl::StatusOr<FitReport> warm = ds->Fit(crowd.matrix, {}, true);
  ASSERT_THAT(warm, IsOk());
  EXPECT_TRUE(warm->converged);
  EXPECT_LE(warm->iterations, 3);
  EXPECT_NEAR(warm->log_likelihood, cold->log_likelihood,
              1e-5 * std::abs(cold->log_likelihood));
}

TEST(DawidSkeneTest, WarmStartOnACloneLearnsNewAnnotators) {
  SyntheticCrowdSpec spec;
  spec.num_items = 1000;
  spec.confusions.assign(10, SymmetricConfusion(2, 0.85));
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  std::unique_ptr<DawidSkeneModel> ds = MakeDs(2);
  ASSERT_THAT(ds->Fit(crowd.matrix, {}, false), IsOk());

  // The same labels plus an eleventh annotator who always says 0.
  std::vector<Annotation> more = crowd.annotations;
  for (int32_t i = 0; i < 200; ++i) more.push_back({i, 10, 0});
  const AnnotationMatrix grown = *AnnotationMatrix::Build(1000, 11, 2, more);
  std::unique_ptr<TruthModel> clone = ds->Clone();
  ASSERT_THAT(clone->Fit(grown, {}, true), IsOk());
  // Clone() is deep: the original still has ten annotators.
  EXPECT_EQ(ds->AnnotatorConfusion(10), ds->AnnotatorConfusion(-1));
  // The new annotator started from the population confusion and learned that
  // it says 0 whatever the truth: p(0 | true 0) and p(0 | true 1) near 1.
  const std::vector<double> c = clone->AnnotatorConfusion(10);
  EXPECT_GT(c[2], 0.9);
  EXPECT_GT(c[0], 0.9);
}

TEST(DawidSkeneTest, ThreadedFitMatchesSingleThreaded) {
  SyntheticCrowdSpec spec;
  spec.num_items = 60000;
  spec.num_classes = 3;
  spec.labels_per_item = 5;
  spec.confusions = VariedConfusions();
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  TruthModelOptions threaded;
  threaded.num_threads = 4;
  std::unique_ptr<DawidSkeneModel> one = MakeDs(3);
  std::unique_ptr<DawidSkeneModel> four = MakeDs(3, threaded);
  absl::StatusOr<FitReport> r1 = one->Fit(crowd.matrix, {}, false);
  absl::StatusOr<FitReport> r4 = four->Fit(crowd.matrix, {}, false);
  ASSERT_THAT(r1, IsOk());
  ASSERT_THAT(r4, IsOk());
  EXPECT_EQ(r1->iterations, r4->iterations);
  EXPECT_NEAR(r1->log_likelihood, r4->log_likelihood,
              1e-9 * std::abs(r1->log_likelihood));
  const std::vector<double> c1 = one->AnnotatorConfusion(0);
  const std::vector<double> c4 = four->AnnotatorConfusion(0);
  for (size_t j = 0; j < c1.size(); ++j) EXPECT_NEAR(c1[j], c4[j], 1e-9);
}

TEST(DawidSkeneTest, UnfittedModelGivesSoftMajorityVote) {
  std::unique_ptr<DawidSkeneModel> ds = MakeDs(2);
  EXPECT_FALSE(ds->has_parameters());
  std::vector<double> out(2);
  const std::vector<Entry> labels = {{0, 1}, {1, 1}, {2, 0}};
  ds->ItemPosterior(labels, -1, absl::MakeSpan(out));
  EXPECT_NEAR(out[1], (2 + 0.01) / (3 + 0.02), 1e-12);
  ds->ItemPosterior(labels, 0, absl::MakeSpan(out));
  EXPECT_THAT(out, ElementsAre(1.0, 0.0));
  EXPECT_THAT(ds->AnnotatorConfusion(0), ElementsAre(0.5, 0.5, 0.5, 0.5));
}

TEST(DawidSkeneTest, FitRejectsBadInputAndKeepsTheModel) {
  const AnnotationMatrix m = TinyMatrix();
  std::unique_ptr<DawidSkeneModel> ds = MakeDs(2);
  ASSERT_THAT(ds->Fit(m, {}, false), IsOk());
  const std::string before = ds->Serialize();

  const std::vector<int32_t> short_gold = {0, 1};
  absl::StatusOr<FitReport> r = ds->Fit(m, short_gold, false);
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(r.status().message(), HasSubstr("gold"));

  const std::vector<int32_t> bad_gold = {0, 1, -1, 2};
  r = ds->Fit(m, bad_gold, false);
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(r.status().message(), HasSubstr("gold[3]"));

  std::unique_ptr<DawidSkeneModel> three = MakeDs(3);
  EXPECT_THAT(three->Fit(m, {}, false),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(ds->Serialize(), before);
}

TEST(DawidSkeneTest, OneLabelPerItemGivesTheMajorityVote) {
  // One label per item, a skewed class prior and annotators biased toward
  // class 0: the labels cannot tell a skewed prior from biased annotators.
  // ds used to predict class 0 for every item here.
  SyntheticCrowdSpec spec;
  spec.num_items = 3000;
  spec.num_classes = 3;
  spec.labels_per_item = 1;
  spec.class_prior = {0.6, 0.25, 0.15};
  spec.confusions = VariedConfusions();
  for (std::vector<double>& c : spec.confusions) {
    // Move a fifth of each row's mass onto label 0.
    for (int k = 0; k < 3; ++k) {
      for (int l = 0; l < 3; ++l) c[k * 3 + l] *= 0.8;
      c[k * 3] += 0.2;
    }
  }
  spec.seed = 3;
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);

  std::unique_ptr<DawidSkeneModel> ds = MakeDs(3);
  absl::StatusOr<FitReport> report = ds->Fit(crowd.matrix, {}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_TRUE(report->converged);
  std::unique_ptr<MajorityVoteModel> mv = MakeMv(3);
  ASSERT_THAT(mv->Fit(crowd.matrix, {}, false), IsOk());
  const std::vector<double> ds_posteriors =
      AllPosteriors(*ds, crowd.matrix, {});
  const double ds_accuracy = Accuracy(ds_posteriors, crowd.matrix, crowd.truth);
  const double mv_accuracy =
      Accuracy(AllPosteriors(*mv, crowd.matrix, {}), crowd.matrix, crowd.truth);
  RecordProperty("ds_accuracy", std::to_string(ds_accuracy));
  RecordProperty("mv_accuracy", std::to_string(mv_accuracy));
  EXPECT_NEAR(ds_accuracy, mv_accuracy, 0.01);
  // Without an item with two labels, the parameters are the priors: ds
  // predicts every item's only label, as the majority vote does.
  for (int32_t i = 0; i < spec.num_items; ++i) {
    const double* p = &ds_posteriors[3 * i];
    ASSERT_EQ(std::max_element(p, p + 3) - p,
              crowd.matrix.LabelsOfItem(i)[0].label)
        << "item " << i;
  }
  EXPECT_THAT(ds->ClassPrior(), ElementsAre(DoubleNear(1.0 / 3, 1e-12),
                                            DoubleNear(1.0 / 3, 1e-12),
                                            DoubleNear(1.0 / 3, 1e-12)));
}

TEST(DawidSkeneTest, SingleLabelItemsAddOnlyAUniformShareToTheClassPrior) {
  // 1500 items with five labels and 1500 with one: the single labels get
  // posteriors from the parameters the other items identify, add nothing to
  // the confusions, and add 1/K each to every class's prior mass
  // (dawid_skene.h). So the fit equals one without them whose prior_smoothing
  // is larger by 1500 / 3 = 500.
  SyntheticCrowdSpec spec = VariedCrowdSpec(3000);
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  std::vector<Annotation> mixed, redundant_only;
  std::vector<int32_t> seen(spec.num_items, 0);
  for (const Annotation& a : crowd.annotations) {
    const bool single = a.item % 2 == 1;
    if (single && seen[a.item]++ > 0) continue;
    mixed.push_back(a);
    if (!single) redundant_only.push_back(a);
  }
  const AnnotationMatrix mixed_matrix =
      *AnnotationMatrix::Build(spec.num_items, 20, 3, mixed);
  const AnnotationMatrix redundant_matrix =
      *AnnotationMatrix::Build(spec.num_items, 20, 3, redundant_only);
  // A fixed number of iterations: the single-label items' log-likelihood
  // terms would otherwise move the stopping point.
  TruthModelOptions options;
  options.tolerance = 0;
  options.max_iterations = 30;
  std::unique_ptr<DawidSkeneModel> with_single = MakeDs(3, options);
  TruthModelOptions larger_prior_smoothing = options;
  larger_prior_smoothing.prior_smoothing += 1500.0 / 3;
  std::unique_ptr<DawidSkeneModel> without_single =
      MakeDs(3, larger_prior_smoothing);
  ASSERT_THAT(with_single->Fit(mixed_matrix, {}, false), IsOk());
  ASSERT_THAT(without_single->Fit(redundant_matrix, {}, false), IsOk());
  auto near = [](const std::vector<double>& expected) {
    std::vector<::testing::Matcher<double>> cells;
    for (double e : expected) cells.push_back(DoubleNear(e, 1e-9));
    return ElementsAreArray(cells);
  };
  EXPECT_THAT(with_single->ClassPrior(), near(without_single->ClassPrior()));
  for (int32_t a = -1; a < 20; ++a) {
    EXPECT_THAT(with_single->AnnotatorConfusion(a),
                near(without_single->AnnotatorConfusion(a)))
        << "annotator " << a;
  }
  std::unique_ptr<MajorityVoteModel> mv = MakeMv(3);
  ASSERT_THAT(mv->Fit(mixed_matrix, {}, false), IsOk());
  const double ds_accuracy =
      Accuracy(AllPosteriors(*with_single, mixed_matrix, {}), mixed_matrix,
               crowd.truth);
  const double mv_accuracy =
      Accuracy(AllPosteriors(*mv, mixed_matrix, {}), mixed_matrix, crowd.truth);
  RecordProperty("ds_accuracy", std::to_string(ds_accuracy));
  RecordProperty("mv_accuracy", std::to_string(mv_accuracy));
  EXPECT_GT(ds_accuracy, mv_accuracy);
}

// --- Incremental refits ---

std::unique_ptr<DawidSkeneModel> CloneDs(const DawidSkeneModel& model) {
  std::unique_ptr<TruthModel> clone = model.Clone();
  return std::unique_ptr<DawidSkeneModel>(
      static_cast<DawidSkeneModel*>(clone.release()));
}

// A copy of `model` (parameters and kept state) whose warm fits always run
// full EM: the reference an incremental refit is compared with.
std::unique_ptr<DawidSkeneModel> FullEmCopy(const DawidSkeneModel& model,
                                            int num_threads = 1) {
  TruthModelOptions options;
  options.incremental_refit_max_fraction = 0;
  options.num_threads = num_threads;
  std::unique_ptr<DawidSkeneModel> copy =
      MakeDs(model.num_classes(), options);
  EXPECT_THAT(copy->Restore(model.Serialize()), IsOk());
  return copy;
}

struct ModelDifference {
  double posterior = 0;  // max over items and classes
  double confusion = 0;  // max over annotators (and the population) and cells
  double prior = 0;
  int32_t map_disagreements = 0;
};

ModelDifference Compare(const DawidSkeneModel& a, const DawidSkeneModel& b,
                        const AnnotationMatrix& data,
                        const std::vector<int32_t>& gold) {
  ModelDifference d;
  const int32_t k = data.num_classes();
  const std::vector<double> pa = AllPosteriors(a, data, gold);
  const std::vector<double> pb = AllPosteriors(b, data, gold);
  for (int32_t i = 0; i < data.num_items(); ++i) {
    const double* x = &pa[static_cast<size_t>(i) * k];
    const double* y = &pb[static_cast<size_t>(i) * k];
    for (int32_t c = 0; c < k; ++c) {
      d.posterior = std::max(d.posterior, std::abs(x[c] - y[c]));
    }
    d.map_disagreements +=
        (std::max_element(x, x + k) - x) != (std::max_element(y, y + k) - y);
  }
  for (int32_t annotator = -1; annotator < data.num_annotators(); ++annotator) {
    const std::vector<double> ca = a.AnnotatorConfusion(annotator);
    const std::vector<double> cb = b.AnnotatorConfusion(annotator);
    for (size_t j = 0; j < ca.size(); ++j) {
      d.confusion = std::max(d.confusion, std::abs(ca[j] - cb[j]));
    }
  }
  const std::vector<double> qa = a.ClassPrior();
  const std::vector<double> qb = b.ClassPrior();
  for (int32_t c = 0; c < k; ++c) {
    d.prior = std::max(d.prior, std::abs(qa[c] - qb[c]));
  }
  return d;
}

void RecordDifference(const ModelDifference& d) {
  ::testing::Test::RecordProperty("max_posterior_difference",
                                  std::to_string(d.posterior));
  ::testing::Test::RecordProperty("max_confusion_difference",
                                  std::to_string(d.confusion));
  ::testing::Test::RecordProperty("max_prior_difference",
                                  std::to_string(d.prior));
  ::testing::Test::RecordProperty("map_disagreements",
                                  std::to_string(d.map_disagreements));
}

// The matrix of `annotations` without the labels of items >= first_new.
AnnotationMatrix WithoutItemsFrom(const std::vector<Annotation>& annotations,
                                  int32_t first_new, int32_t num_items,
                                  int32_t num_annotators, int32_t k) {
  std::vector<Annotation> kept;
  for (const Annotation& a : annotations) {
    if (a.item < first_new) kept.push_back(a);
  }
  return *AnnotationMatrix::Build(num_items, num_annotators, k, kept);
}

// The tolerance of an incremental refit against a full warm fit on the same
// data, for the changes these tests make (1-2 % of the labels): no item's
// posterior moves by more than 0.02, no confusion cell or prior by more than
// 0.005, and at most 0.1 % of the items change their most probable class.
// (Measured: see the RecordProperty values of the tests.)
constexpr double kPosteriorTolerance = 0.02;
constexpr double kParameterTolerance = 0.005;

// dawid_skene.h: a warm fit after a fit that did not converge runs full EM passes, not an
// incremental refit. One EM iteration cannot converge (convergence compares two
// log-likelihoods); the same change after a converged fit is refitted incrementally (the test
// below).
TEST(DawidSkeneTest, NoIncrementalRefitAfterAFitThatDidNotConverge) {
  const SyntheticCrowdSpec spec = VariedCrowdSpec(20000);
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  const AnnotationMatrix before =
      WithoutItemsFrom(crowd.annotations, 19800, spec.num_items, 20, 3);
  TruthModelOptions options;
  options.max_iterations = 1;
  std::unique_ptr<DawidSkeneModel> model = MakeDs(3, options);
  absl::StatusOr<FitReport> cold = model->Fit(before, {}, false);
  ASSERT_THAT(cold, IsOk());
  EXPECT_FALSE(cold->converged);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, true), IsOk());
  EXPECT_EQ(model->incremental_refits_in_a_row(), 0);
}

TEST(DawidSkeneTest, IncrementalRefitAfterNewItemsIsCloseToAFullWarmFit) {
  const SyntheticCrowdSpec spec = VariedCrowdSpec(20000);
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  // The last 1 % of the items are new.
  const AnnotationMatrix before =
      WithoutItemsFrom(crowd.annotations, 19800, spec.num_items, 20, 3);
  std::unique_ptr<DawidSkeneModel> base = MakeDs(3);
  ASSERT_THAT(base->Fit(before, {}, false), IsOk());
  EXPECT_TRUE(base->has_refit_state());
  EXPECT_EQ(base->incremental_refits_in_a_row(), 0);

  std::unique_ptr<DawidSkeneModel> incremental = CloneDs(*base);
  absl::StatusOr<FitReport> report = incremental->Fit(crowd.matrix, {}, true);
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(incremental->incremental_refits_in_a_row(), 1);
  EXPECT_TRUE(report->converged);
  EXPECT_GE(report->iterations, 2);
  EXPECT_TRUE(std::isfinite(report->log_likelihood));
  // The base model is untouched (the clone shares its state, immutable).
  EXPECT_EQ(base->incremental_refits_in_a_row(), 0);

  std::unique_ptr<DawidSkeneModel> full = FullEmCopy(*base);
  absl::StatusOr<FitReport> full_report = full->Fit(crowd.matrix, {}, true);
  ASSERT_THAT(full_report, IsOk());
  EXPECT_EQ(full->incremental_refits_in_a_row(), 0);
  const ModelDifference d = Compare(*incremental, *full, crowd.matrix, {});
  RecordDifference(d);
  EXPECT_LE(d.posterior, kPosteriorTolerance);
  EXPECT_LE(d.confusion, kParameterTolerance);
  EXPECT_LE(d.prior, kParameterTolerance);
  EXPECT_LE(d.map_disagreements, spec.num_items / 1000);
  EXPECT_NEAR(report->log_likelihood, full_report->log_likelihood,
              1e-4 * std::abs(full_report->log_likelihood));
}

TEST(DawidSkeneTest, IncrementalRefitOfEveryItemIsFullEm) {
  // When every item changed, the incremental refit takes every old
  // contribution out and E-steps every item: full warm EM, up to rounding.
  // This checks the bookkeeping of the kept counts exactly.
  SyntheticCrowdSpec spec = VariedCrowdSpec(3000);
  spec.labels_per_item = 6;
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  // Before: the first five labels of every item.
  std::vector<Annotation> first_five;
  std::vector<int32_t> seen(spec.num_items, 0);
  for (const Annotation& a : crowd.annotations) {
    if (seen[a.item]++ < 5) first_five.push_back(a);
  }
  const AnnotationMatrix before =
      *AnnotationMatrix::Build(spec.num_items, 20, 3, first_five);
  TruthModelOptions options;
  options.incremental_refit_max_fraction = 1.0;
  std::unique_ptr<DawidSkeneModel> incremental = MakeDs(3, options);
  ASSERT_THAT(incremental->Fit(before, {}, false), IsOk());
  std::unique_ptr<DawidSkeneModel> full = FullEmCopy(*incremental);

  absl::StatusOr<FitReport> r1 = incremental->Fit(crowd.matrix, {}, true);
  absl::StatusOr<FitReport> r2 = full->Fit(crowd.matrix, {}, true);
  ASSERT_THAT(r1, IsOk());
  ASSERT_THAT(r2, IsOk());
  EXPECT_EQ(incremental->incremental_refits_in_a_row(), 1);
  EXPECT_EQ(full->incremental_refits_in_a_row(), 0);
  EXPECT_EQ(r1->iterations, r2->iterations);
  EXPECT_NEAR(r1->log_likelihood, r2->log_likelihood,
              1e-12 * std::abs(r2->log_likelihood));
  const ModelDifference d = Compare(*incremental, *full, crowd.matrix, {});
  RecordDifference(d);
  EXPECT_LE(d.posterior, 1e-9);
  EXPECT_LE(d.confusion, 1e-12);
  EXPECT_LE(d.prior, 1e-12);
}

TEST(DawidSkeneTest, IncrementalRefitHandlesRevisionsRemovalsAndGold) {
  const SyntheticCrowdSpec spec = VariedCrowdSpec(20000);
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  std::unique_ptr<DawidSkeneModel> base = MakeDs(3);
  ASSERT_THAT(base->Fit(crowd.matrix, {}, false), IsOk());

  // Every 150th item has its first label revised, every 300th (offset 7)
  // loses its last label, every 500th (offset 3) gets its true class as gold;
  // item 11 loses all its labels.
  std::vector<Annotation> changed;
  std::vector<int32_t> position(spec.num_items, 0);
  for (const Annotation& a : crowd.annotations) {
    const int32_t j = position[a.item]++;
    if (a.item == 11) continue;
    if (a.item % 300 == 7 && j == spec.labels_per_item - 1) continue;
    Annotation b = a;
    if (a.item % 150 == 0 && j == 0) b.label = (a.label + 1) % 3;
    changed.push_back(b);
  }
  std::vector<int32_t> gold(spec.num_items, -1);
  for (int32_t i = 3; i < spec.num_items; i += 500) gold[i] = crowd.truth[i];
  const AnnotationMatrix after =
      *AnnotationMatrix::Build(spec.num_items, 20, 3, changed);

  std::unique_ptr<DawidSkeneModel> incremental = CloneDs(*base);
  absl::StatusOr<FitReport> report = incremental->Fit(after, gold, true);
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(incremental->incremental_refits_in_a_row(), 1);
  EXPECT_TRUE(std::isfinite(report->log_likelihood));
  std::unique_ptr<DawidSkeneModel> full = FullEmCopy(*base);
  ASSERT_THAT(full->Fit(after, gold, true), IsOk());
  const ModelDifference d = Compare(*incremental, *full, after, gold);
  RecordDifference(d);
  EXPECT_LE(d.posterior, kPosteriorTolerance);
  EXPECT_LE(d.confusion, kParameterTolerance);
  EXPECT_LE(d.prior, kParameterTolerance);
  EXPECT_LE(d.map_disagreements, spec.num_items / 1000);

  const std::vector<double> posteriors =
      AllPosteriors(*incremental, after, gold);
  for (double p : posteriors) ASSERT_TRUE(std::isfinite(p));
  for (int32_t i = 3; i < spec.num_items; i += 500) {
    for (int32_t k = 0; k < 3; ++k) {
      ASSERT_EQ(posteriors[3 * i + k], k == gold[i] ? 1.0 : 0.0) << i;
    }
  }
  // The item without labels gets the class prior.
  const std::vector<double> prior = incremental->ClassPrior();
  EXPECT_THAT(std::vector<double>(posteriors.begin() + 33,
                                  posteriors.begin() + 36),
              ElementsAre(prior[0], prior[1], prior[2]));

  // Undoing the changes in a second incremental refit comes back close to
  // the base fit.
  absl::StatusOr<FitReport> undo = incremental->Fit(crowd.matrix, {}, true);
  ASSERT_THAT(undo, IsOk());
  EXPECT_EQ(incremental->incremental_refits_in_a_row(), 2);
  const ModelDifference back = Compare(*incremental, *base, crowd.matrix, {});
  RecordProperty("max_confusion_difference_after_undo",
                 std::to_string(back.confusion));
  EXPECT_LE(back.confusion, kParameterTolerance);
  EXPECT_LE(back.posterior, kPosteriorTolerance);
}

TEST(DawidSkeneTest, IncrementalRefitLearnsNewAnnotatorsAndItems) {
  SyntheticCrowdSpec spec;
  spec.num_items = 2000;
  spec.labels_per_item = 3;
  spec.confusions.assign(10, SymmetricConfusion(2, 0.85));
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  std::unique_ptr<DawidSkeneModel> base = MakeDs(2);
  ASSERT_THAT(base->Fit(crowd.matrix, {}, false), IsOk());

  // 60 new items (2000..2059), each with the labels of an old item from the
  // same annotators, and a label 0 from a new annotator 10.
  std::vector<Annotation> grown = crowd.annotations;
  for (const Annotation& a : crowd.annotations) {
    if (a.item < 60) grown.push_back({2000 + a.item, a.annotator, a.label});
  }
  for (int32_t i = 2000; i < 2060; ++i) grown.push_back({i, 10, 0});
  const AnnotationMatrix after = *AnnotationMatrix::Build(2060, 11, 2, grown);

  std::unique_ptr<DawidSkeneModel> incremental = CloneDs(*base);
  ASSERT_THAT(incremental->Fit(after, {}, true), IsOk());
  EXPECT_EQ(incremental->incremental_refits_in_a_row(), 1);
  // The new annotator says 0 whatever the truth.
  const std::vector<double> c = incremental->AnnotatorConfusion(10);
  EXPECT_GT(c[0], 0.9);
  EXPECT_GT(c[2], 0.9);
  // The new items get the posteriors of the old items they copy, give or
  // take annotator 10's label.
  std::unique_ptr<DawidSkeneModel> full = FullEmCopy(*base);
  ASSERT_THAT(full->Fit(after, {}, true), IsOk());
  const ModelDifference d = Compare(*incremental, *full, after, {});
  RecordDifference(d);
  EXPECT_LE(d.posterior, kPosteriorTolerance);
  EXPECT_LE(d.confusion, 0.02);  // annotator 10 has only 60 labels
  EXPECT_LE(d.map_disagreements, 2);
}

TEST(DawidSkeneTest, LargeOrManyChangesFallBackToFullEm) {
  const SyntheticCrowdSpec spec = VariedCrowdSpec(10000);
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  // 30 % of the items are new: more than incremental_refit_max_fraction.
  const AnnotationMatrix before =
      WithoutItemsFrom(crowd.annotations, 7000, spec.num_items, 20, 3);
  std::unique_ptr<DawidSkeneModel> model = MakeDs(3);
  ASSERT_THAT(model->Fit(before, {}, false), IsOk());
  std::unique_ptr<DawidSkeneModel> refit = CloneDs(*model);
  ASSERT_THAT(refit->Fit(crowd.matrix, {}, true), IsOk());
  EXPECT_EQ(refit->incremental_refits_in_a_row(), 0);
  std::unique_ptr<DawidSkeneModel> full = FullEmCopy(*model);
  ASSERT_THAT(full->Fit(crowd.matrix, {}, true), IsOk());
  EXPECT_EQ(refit->Serialize(), full->Serialize());  // the full warm fit

  // Small changes, one item more each time: incremental until
  // kMaxIncrementalRefits in a row, then full EM once.
  int32_t first_new = 9900;
  std::unique_ptr<DawidSkeneModel> current = MakeDs(3);
  ASSERT_THAT(current->Fit(WithoutItemsFrom(crowd.annotations, first_new,
                                            spec.num_items, 20, 3),
                           {}, false),
              IsOk());
  for (int32_t refit_number = 1;
       refit_number <= DawidSkeneModel::kMaxIncrementalRefits + 1;
       ++refit_number) {
    ++first_new;
    ASSERT_THAT(current->Fit(WithoutItemsFrom(crowd.annotations, first_new,
                                              spec.num_items, 20, 3),
                             {}, true),
                IsOk());
    EXPECT_EQ(current->incremental_refits_in_a_row(),
              refit_number % (DawidSkeneModel::kMaxIncrementalRefits + 1))
        << "refit " << refit_number;
  }

  // A model restored from the parameters alone (as ds serialized them before
  // it kept a refit state) refits with full EM, and keeps the state after.
  std::unique_ptr<DawidSkeneModel> restored = MakeDs(3);
  ASSERT_THAT(restored->Restore(
                  SerializeConfusionModel(DawidSkeneModel::kMethod,
                                          ConfusionParameters(3))),
              IsOk());
  EXPECT_TRUE(restored->has_parameters());
  EXPECT_FALSE(restored->has_refit_state());
  ASSERT_THAT(restored->Fit(crowd.matrix, {}, true), IsOk());
  EXPECT_TRUE(restored->has_refit_state());
  EXPECT_EQ(restored->incremental_refits_in_a_row(), 0);
}

TEST(DawidSkeneTest, IncrementalRefitWithoutChangesKeepsTheModel) {
  const SyntheticCrowdSpec spec = VariedCrowdSpec(2000);
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  std::unique_ptr<DawidSkeneModel> ds = MakeDs(3);
  absl::StatusOr<FitReport> cold = ds->Fit(crowd.matrix, {}, false);
  ASSERT_THAT(cold, IsOk());
  const std::string before = ds->Serialize();
  absl::StatusOr<FitReport> warm = ds->Fit(crowd.matrix, {}, true);
  ASSERT_THAT(warm, IsOk());
  EXPECT_EQ(warm->iterations, 0);
  EXPECT_TRUE(warm->converged);
  EXPECT_EQ(warm->log_likelihood, cold->log_likelihood);
  EXPECT_EQ(ds->Serialize(), before);
}

TEST(DawidSkeneTest, SerializeRestoreKeepsTheRefitState) {
  const SyntheticCrowdSpec spec = VariedCrowdSpec(5000);
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  std::vector<int32_t> gold(spec.num_items, -1);
  gold[4990] = crowd.truth[4990];
  std::unique_ptr<DawidSkeneModel> model = MakeDs(3);
  ASSERT_THAT(model->Fit(WithoutItemsFrom(crowd.annotations, 4900,
                                          spec.num_items, 20, 3),
                         {}, false),
              IsOk());
  ASSERT_THAT(model->Fit(WithoutItemsFrom(crowd.annotations, 4950,
                                          spec.num_items, 20, 3),
                         {}, true),
              IsOk());
  ASSERT_EQ(model->incremental_refits_in_a_row(), 1);
  const std::string blob = model->Serialize();

  std::unique_ptr<DawidSkeneModel> restored = MakeDs(3);
  ASSERT_THAT(restored->Restore(blob), IsOk());
  EXPECT_TRUE(restored->has_refit_state());
  EXPECT_EQ(restored->incremental_refits_in_a_row(), 1);
  EXPECT_EQ(restored->Serialize(), blob);
  EXPECT_EQ(AllPosteriors(*restored, crowd.matrix, {}),
            AllPosteriors(*model, crowd.matrix, {}));

  // The next incremental refit is bit-identical from the restored model.
  absl::StatusOr<FitReport> r1 = model->Fit(crowd.matrix, gold, true);
  absl::StatusOr<FitReport> r2 = restored->Fit(crowd.matrix, gold, true);
  ASSERT_THAT(r1, IsOk());
  ASSERT_THAT(r2, IsOk());
  EXPECT_EQ(restored->incremental_refits_in_a_row(), 2);
  EXPECT_EQ(r1->iterations, r2->iterations);
  EXPECT_EQ(r1->log_likelihood, r2->log_likelihood);
  EXPECT_EQ(restored->Serialize(), model->Serialize());

  // A corrupt state is rejected, and the model keeps what it had.
  const std::string good = restored->Serialize();
  EXPECT_THAT(restored->Restore(blob.substr(0, blob.size() - 20)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(restored->Serialize(), good);
}

TEST(DawidSkeneTest, IncrementalRefitIsDeterministic) {
  SyntheticCrowdSpec spec = VariedCrowdSpec(70000);
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  const AnnotationMatrix before =
      WithoutItemsFrom(crowd.annotations, 69300, spec.num_items, 20, 3);
  TruthModelOptions threaded;
  threaded.num_threads = 4;
  std::unique_ptr<DawidSkeneModel> one = MakeDs(3);
  std::unique_ptr<DawidSkeneModel> four = MakeDs(3, threaded);
  ASSERT_THAT(one->Fit(before, {}, false), IsOk());
  ASSERT_THAT(four->Fit(before, {}, false), IsOk());

  // The same model refitted twice on the same data: bit-identical.
  std::unique_ptr<DawidSkeneModel> a = CloneDs(*one);
  std::unique_ptr<DawidSkeneModel> b = CloneDs(*one);
  ASSERT_THAT(a->Fit(crowd.matrix, {}, true), IsOk());
  ASSERT_THAT(b->Fit(crowd.matrix, {}, true), IsOk());
  EXPECT_EQ(a->incremental_refits_in_a_row(), 1);
  EXPECT_EQ(a->Serialize(), b->Serialize());

  // Another thread count differs in the last bits only, as for full fits.
  ASSERT_THAT(four->Fit(crowd.matrix, {}, true), IsOk());
  EXPECT_EQ(four->incremental_refits_in_a_row(), 1);
  const ModelDifference d = Compare(*a, *four, crowd.matrix, {});
  EXPECT_LE(d.confusion, 1e-9);
  EXPECT_LE(d.posterior, 1e-9);
}

TEST(DawidSkeneTest, CreateRejectsBadOptions) {
  TruthModelOptions options;
  options.confusion_smoothing = 0;
  absl::StatusOr<std::unique_ptr<DawidSkeneModel>> m =
      DawidSkeneModel::Create(2, options);
  EXPECT_THAT(m, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(m.status().message(), HasSubstr("confusion_smoothing"));

  options = TruthModelOptions();
  options.max_iterations = 0;
  EXPECT_THAT(DawidSkeneModel::Create(2, options),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(DawidSkeneModel::Create(1, {}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// truth_model.h's option ranges, each refused with INVALID_ARGUMENT naming the option, and
// their boundary values accepted.
TEST(DawidSkeneTest, EveryOptionOutsideItsRangeIsRefusedByName) {
  const double nan = std::nan("");
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    const char* name;
    std::function<void(TruthModelOptions&)> set;
  };
  const std::vector<Case> refused = {
      {"confusion_smoothing", [&](TruthModelOptions& o) { o.confusion_smoothing = nan; }},
      {"population_smoothing", [](TruthModelOptions& o) { o.population_smoothing = -0.5; }},
      {"prior_smoothing", [&](TruthModelOptions& o) { o.prior_smoothing = inf; }},
      {"vote_smoothing", [](TruthModelOptions& o) { o.vote_smoothing = 0; }},
      {"max_iterations", [](TruthModelOptions& o) { o.max_iterations = -3; }},
      {"tolerance", [](TruthModelOptions& o) { o.tolerance = -1e-9; }},
      {"population_diagonal_prior", [](TruthModelOptions& o) { o.population_diagonal_prior = 0; }},
      {"incremental_refit_max_fraction",
       [](TruthModelOptions& o) { o.incremental_refit_max_fraction = 1.5; }},
      {"incremental_refit_max_fraction",
       [](TruthModelOptions& o) { o.incremental_refit_max_fraction = -0.1; }},
  };
  for (const Case& c : refused) {
    TruthModelOptions options;
    c.set(options);
    absl::StatusOr<std::unique_ptr<DawidSkeneModel>> m = DawidSkeneModel::Create(2, options);
    EXPECT_THAT(m, StatusIs(absl::StatusCode::kInvalidArgument)) << c.name;
    EXPECT_THAT(m.status().message(), HasSubstr(c.name));
  }
  TruthModelOptions edges;
  edges.population_smoothing = 0;
  edges.tolerance = 0;
  edges.incremental_refit_max_fraction = 1;
  EXPECT_THAT(DawidSkeneModel::Create(2, edges), IsOk());
  edges.incremental_refit_max_fraction = 0;
  EXPECT_THAT(DawidSkeneModel::Create(2, edges), IsOk());
}

// truth_model.h: ds learns from items with at least two labels *or with gold*. One gold item
// of class 0 with a single label: the class prior is (1 + 1, 0 + 1) / (1 + 2) = (2/3, 1/3) with
// prior_smoothing 1; were the item left out, it would stay (1/2, 1/2).
TEST(DawidSkeneTest, AGoldItemWithOneLabelStillTeachesTheClassPrior) {
  const AnnotationMatrix m = *AnnotationMatrix::Build(1, 1, 2, {{0, 0, 1}});
  absl::StatusOr<std::unique_ptr<DawidSkeneModel>> model =
      DawidSkeneModel::Create(2, TruthModelOptions());
  ASSERT_THAT(model, IsOk());
  ASSERT_THAT((*model)->Fit(m, std::vector<int32_t>{0}, false), IsOk());
  const std::vector<double> prior = (*model)->ClassPrior();
  ASSERT_EQ(prior.size(), 2u);
  EXPECT_NEAR(prior[0], 2.0 / 3.0, 1e-9);
  EXPECT_NEAR(prior[1], 1.0 / 3.0, 1e-9);
}


// --- Contracts a user relies on (each pinned by a mutation that survived
// the tests above) ---

TEST(DawidSkeneTest, UnfittedModelHasUniformPriorAndConfusionDiagonal) {
  // K = 3, so that 1/K differs from 1/2.
  std::unique_ptr<DawidSkeneModel> ds = MakeDs(3);
  ASSERT_FALSE(ds->has_parameters());
  EXPECT_THAT(ds->ClassPrior(),
              ElementsAre(DoubleNear(1.0 / 3, 1e-15), DoubleNear(1.0 / 3, 1e-15),
                          DoubleNear(1.0 / 3, 1e-15)));
  EXPECT_THAT(ds->AnnotatorConfusionDiagonal(0),
              ElementsAre(DoubleNear(1.0 / 3, 1e-15), DoubleNear(1.0 / 3, 1e-15),
                          DoubleNear(1.0 / 3, 1e-15)));
}

TEST(DawidSkeneTest, ConfusionDiagonalIsThatOfEachAnnotator) {
  // Annotator a has accuracy 0.6 + 0.035 a, a = 0..10 (0.6 to 0.95): each
  // annotator's fitted diagonal is near its own accuracy, not another's, and
  // is the diagonal of its AnnotatorConfusion.
  SyntheticCrowdSpec spec;
  spec.num_items = 3000;
  spec.labels_per_item = 5;
  for (int a = 0; a <= 10; ++a) {
    spec.confusions.push_back(SymmetricConfusion(2, 0.6 + 0.035 * a));
  }
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  std::unique_ptr<DawidSkeneModel> ds = MakeDs(2);
  ASSERT_THAT(ds->Fit(crowd.matrix, {}, false), IsOk());
  for (int32_t a = 0; a <= 10; ++a) {
    const std::vector<double> diagonal = ds->AnnotatorConfusionDiagonal(a);
    const std::vector<double> confusion = ds->AnnotatorConfusion(a);
    ASSERT_EQ(diagonal.size(), 2u);
    EXPECT_EQ(diagonal[0], confusion[0]) << "annotator " << a;
    EXPECT_EQ(diagonal[1], confusion[3]) << "annotator " << a;
    // About 1360 labels per annotator: standard error of a row < 0.02.
    EXPECT_NEAR(diagonal[0], 0.6 + 0.035 * a, 0.07) << "annotator " << a;
    EXPECT_NEAR(diagonal[1], 0.6 + 0.035 * a, 0.07) << "annotator " << a;
  }
}

TEST(DawidSkeneTest, FitStopsAfterExactlyMaxIterations) {
  // tolerance 0 never stops EM early on this data (the log-likelihood keeps
  // moving in its last bits), so a fit runs options.max_iterations M-steps,
  // no more, and reports that it did not converge.
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(VariedCrowdSpec(500));
  for (int max_iterations : {1, 2, 5}) {
    TruthModelOptions options;
    options.tolerance = 0;
    options.max_iterations = max_iterations;
    std::unique_ptr<DawidSkeneModel> ds = MakeDs(3, options);
    absl::StatusOr<FitReport> report = ds->Fit(crowd.matrix, {}, false);
    ASSERT_THAT(report, IsOk());
    EXPECT_EQ(report->iterations, max_iterations);
    EXPECT_FALSE(report->converged) << max_iterations;
  }
}

TEST(DawidSkeneTest, ColdFitOfAFittedModelIgnoresItsParametersAndState) {
  // warm_start = false: the result is that of a fresh model, bit for bit,
  // even when the data changed by one item only (which a warm fit would
  // refit incrementally) or not at all.
  const SyntheticCrowdSpec spec = VariedCrowdSpec(2000);
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  const AnnotationMatrix before =
      WithoutItemsFrom(crowd.annotations, 1999, spec.num_items, 20, 3);
  std::unique_ptr<DawidSkeneModel> fresh = MakeDs(3);
  absl::StatusOr<FitReport> fresh_report = fresh->Fit(crowd.matrix, {}, false);
  ASSERT_THAT(fresh_report, IsOk());
  ASSERT_GE(fresh_report->iterations, 2);

  std::unique_ptr<DawidSkeneModel> refitted = MakeDs(3);
  ASSERT_THAT(refitted->Fit(before, {}, false), IsOk());
  absl::StatusOr<FitReport> report = refitted->Fit(crowd.matrix, {}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->iterations, fresh_report->iterations);
  EXPECT_EQ(refitted->incremental_refits_in_a_row(), 0);
  EXPECT_EQ(refitted->Serialize(), fresh->Serialize());

  report = refitted->Fit(crowd.matrix, {}, false);  // the same data again
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->iterations, fresh_report->iterations);
  EXPECT_EQ(refitted->Serialize(), fresh->Serialize());
}

// The budget of incremental refits is cumulative: the labels touched by the
// refits since the last full EM, added up, may not exceed
// incremental_refit_max_fraction of all labels. 1990 items of five labels
// (9950 labels) and a fraction of 0.0012 give a budget of 11.9 labels.
constexpr double kSmallRefitFraction = 0.0012;

TEST(DawidSkeneTest, IncrementalRefitBudgetAddsUpNewLabels) {
  // One new item of five labels per refit: 5 and 10 labels fit the budget,
  // 15 do not, so the third refit is full EM and the fourth starts over.
  const SyntheticCrowdSpec spec = VariedCrowdSpec(2000);
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  TruthModelOptions options;
  options.incremental_refit_max_fraction = kSmallRefitFraction;
  std::unique_ptr<DawidSkeneModel> ds = MakeDs(3, options);
  int32_t first_new = 1990;
  absl::StatusOr<FitReport> report = ds->Fit(
      WithoutItemsFrom(crowd.annotations, first_new, spec.num_items, 20, 3),
      {}, false);
  ASSERT_THAT(report, IsOk());
  ASSERT_TRUE(report->converged);
  for (int32_t expected : {1, 2, 0, 1}) {
    ++first_new;
    report = ds->Fit(
        WithoutItemsFrom(crowd.annotations, first_new, spec.num_items, 20, 3),
        {}, true);
    ASSERT_THAT(report, IsOk());
    ASSERT_TRUE(report->converged);
    EXPECT_EQ(ds->incremental_refits_in_a_row(), expected)
        << "items < " << first_new;
  }
}

TEST(DawidSkeneTest, IncrementalRefitBudgetCountsRemovedLabels) {
  // The same with one item losing its five labels per refit: a removal
  // touches the labels the item had, so again the third refit is full EM.
  const SyntheticCrowdSpec spec = VariedCrowdSpec(2000);
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  TruthModelOptions options;
  options.incremental_refit_max_fraction = kSmallRefitFraction;
  std::unique_ptr<DawidSkeneModel> ds = MakeDs(3, options);
  int32_t first_removed = 1990;
  absl::StatusOr<FitReport> report = ds->Fit(
      WithoutItemsFrom(crowd.annotations, first_removed, spec.num_items, 20, 3),
      {}, false);
  ASSERT_THAT(report, IsOk());
  ASSERT_TRUE(report->converged);
  for (int32_t expected : {1, 2, 0, 1}) {
    --first_removed;
    report = ds->Fit(WithoutItemsFrom(crowd.annotations, first_removed,
                                      spec.num_items, 20, 3),
                     {}, true);
    ASSERT_THAT(report, IsOk());
    ASSERT_TRUE(report->converged);
    EXPECT_EQ(ds->incremental_refits_in_a_row(), expected)
        << "items < " << first_removed;
  }
}

TEST(DawidSkeneTest, RestoredStateOfAFitThatDidNotConvergeRefitsFully) {
  // dawid_skene.h: no incremental refit after a fit that did not converge,
  // also when the model was serialized and restored in between.
  const SyntheticCrowdSpec spec = VariedCrowdSpec(2000);
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  TruthModelOptions one_iteration;
  one_iteration.max_iterations = 1;
  std::unique_ptr<DawidSkeneModel> model = MakeDs(3, one_iteration);
  absl::StatusOr<FitReport> cold = model->Fit(
      WithoutItemsFrom(crowd.annotations, 1990, spec.num_items, 20, 3), {},
      false);
  ASSERT_THAT(cold, IsOk());
  ASSERT_FALSE(cold->converged);

  std::unique_ptr<DawidSkeneModel> restored = MakeDs(3);
  ASSERT_THAT(restored->Restore(model->Serialize()), IsOk());
  ASSERT_TRUE(restored->has_refit_state());
  ASSERT_THAT(restored->Fit(crowd.matrix, {}, true), IsOk());
  EXPECT_EQ(restored->incremental_refits_in_a_row(), 0);
}


TEST(DawidSkeneTest, IncrementalRefitOfSingleLabelItemsKeepsTheParameters) {
  // dawid_skene.h: single-label items get posteriors but add no expected
  // counts to the confusions, only 1/K each to every class's prior mass, in
  // incremental refits too. 20 new items with one label each leave the
  // confusions bit for bit as they were; the prior's mass grows by 20 / 3 per
  // class. The first fit's 1,980 items all have five labels (mass 1,980), and
  // prior_smoothing is 1, so a class's prior p becomes
  // (p (1980 + 3) + 20 / 3) / (1980 + 20 + 3).
  const SyntheticCrowdSpec spec = VariedCrowdSpec(2000);
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  std::vector<Annotation> grown;
  std::vector<int32_t> seen(spec.num_items, 0);
  for (const Annotation& a : crowd.annotations) {
    if (a.item < 1980 || seen[a.item]++ == 0) grown.push_back(a);
  }
  std::unique_ptr<DawidSkeneModel> ds = MakeDs(3);
  ASSERT_THAT(ds->Fit(WithoutItemsFrom(crowd.annotations, 1980,
                                       spec.num_items, 20, 3),
                      {}, false),
              IsOk());
  const std::vector<double> prior = ds->ClassPrior();
  std::vector<std::vector<double>> confusions;
  for (int32_t a = -1; a < 20; ++a) {
    confusions.push_back(ds->AnnotatorConfusion(a));
  }
  const AnnotationMatrix after =
      *AnnotationMatrix::Build(spec.num_items, 20, 3, grown);
  ASSERT_THAT(ds->Fit(after, {}, true), IsOk());
  ASSERT_EQ(ds->incremental_refits_in_a_row(), 1);
  const std::vector<double> grown_prior = ds->ClassPrior();
  ASSERT_EQ(grown_prior.size(), 3u);
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(grown_prior[c], (prior[c] * 1983 + 20.0 / 3) / 2003, 1e-12)
        << "class " << c;
  }
  for (int32_t a = -1; a < 20; ++a) {
    EXPECT_EQ(ds->AnnotatorConfusion(a), confusions[a + 1]) << "annotator " << a;
  }
}

TEST(DawidSkeneTest, IncrementalRefitLearnsFromGoldOnAnItemWithoutLabels) {
  // Item 0 has one label, item 1 none: nothing informs the first fit, whose
  // class prior stays (1/2, 1/2). Gold class 0 on item 1 then informs it, in
  // the incremental refit as in a full fit: item 0 adds 1/2 to each class
  // (dawid_skene.h), so with prior_smoothing 1 the prior is
  // (1 + 1/2 + 1, 0 + 1/2 + 1) / (1 + 1 + 2) = (5/8, 3/8).
  const AnnotationMatrix m = *AnnotationMatrix::Build(2, 1, 2, {{0, 0, 1}});
  std::unique_ptr<DawidSkeneModel> ds = MakeDs(2);
  absl::StatusOr<FitReport> cold = ds->Fit(m, {}, false);
  ASSERT_THAT(cold, IsOk());
  ASSERT_TRUE(cold->converged);
  EXPECT_THAT(ds->ClassPrior(),
              ElementsAre(DoubleNear(0.5, 1e-12), DoubleNear(0.5, 1e-12)));
  const std::vector<int32_t> gold = {-1, 0};
  ASSERT_THAT(ds->Fit(m, gold, true), IsOk());
  EXPECT_EQ(ds->incremental_refits_in_a_row(), 1);
  EXPECT_THAT(ds->ClassPrior(), ElementsAre(DoubleNear(5.0 / 8, 1e-9),
                                            DoubleNear(3.0 / 8, 1e-9)));
  std::unique_ptr<DawidSkeneModel> full = MakeDs(2);
  ASSERT_THAT(full->Fit(m, gold, false), IsOk());
  EXPECT_THAT(full->ClassPrior(), ElementsAre(DoubleNear(5.0 / 8, 1e-9),
                                              DoubleNear(3.0 / 8, 1e-9)));
}


TEST(DawidSkeneTest, RestoredModelKeepsTheIncrementalLabelBudgetSpent) {
  // As IncrementalRefitBudgetAddsUpNewLabels, with the model serialized and
  // restored after the second refit: the 10 labels already refitted travel
  // with the state, so the third new item (15 labels, over the budget of
  // 0.0012 x ~10,000 = 12) still makes a full EM. Were the spent budget lost
  // on restore, 5 labels would fit it and the refit would be incremental.
  const SyntheticCrowdSpec spec = VariedCrowdSpec(2000);
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  TruthModelOptions options;
  options.incremental_refit_max_fraction = kSmallRefitFraction;
  std::unique_ptr<DawidSkeneModel> ds = MakeDs(3, options);
  int32_t first_new = 1990;
  absl::StatusOr<FitReport> report = ds->Fit(
      WithoutItemsFrom(crowd.annotations, first_new, spec.num_items, 20, 3),
      {}, false);
  ASSERT_THAT(report, IsOk());
  ASSERT_TRUE(report->converged);
  for (int32_t expected : {1, 2}) {
    ++first_new;
    report = ds->Fit(
        WithoutItemsFrom(crowd.annotations, first_new, spec.num_items, 20, 3),
        {}, true);
    ASSERT_THAT(report, IsOk());
    ASSERT_TRUE(report->converged);
    ASSERT_EQ(ds->incremental_refits_in_a_row(), expected);
  }
  std::unique_ptr<DawidSkeneModel> restored = MakeDs(3, options);
  ASSERT_THAT(restored->Restore(ds->Serialize()), IsOk());
  ASSERT_EQ(restored->incremental_refits_in_a_row(), 2);
  ++first_new;
  ASSERT_THAT(restored->Fit(WithoutItemsFrom(crowd.annotations, first_new,
                                             spec.num_items, 20, 3),
                            {}, true),
              IsOk());
  EXPECT_EQ(restored->incremental_refits_in_a_row(), 0);
}

TEST(DawidSkeneTest, IncrementalRefitTakesOutTheShareOfARemovedSingleLabel) {
  // Items 0-3 have gold class 0 and one label each; item 4 has one label and
  // no gold, so it adds 1/2 to each class's prior mass (dawid_skene.h). With
  // prior_smoothing 1 the prior is (4 + 1/2 + 1, 1/2 + 1) / (5 + 2) =
  // (11/14, 3/14). Removing item 4's label in an incremental refit must take
  // that share out again: (4 + 1, 0 + 1) / (4 + 2) = (5/6, 1/6).
  std::vector<Annotation> labels = {
      {0, 0, 0}, {1, 0, 0}, {2, 0, 0}, {3, 0, 0}, {4, 0, 1}};
  const std::vector<int32_t> gold = {0, 0, 0, 0, -1};
  TruthModelOptions options;
  options.incremental_refit_max_fraction = 1;
  std::unique_ptr<DawidSkeneModel> ds = MakeDs(2, options);
  absl::StatusOr<FitReport> cold =
      ds->Fit(*AnnotationMatrix::Build(5, 1, 2, labels), gold, false);
  ASSERT_THAT(cold, IsOk());
  ASSERT_TRUE(cold->converged);
  EXPECT_THAT(ds->ClassPrior(), ElementsAre(DoubleNear(11.0 / 14, 1e-12),
                                            DoubleNear(3.0 / 14, 1e-12)));
  labels.pop_back();
  ASSERT_THAT(ds->Fit(*AnnotationMatrix::Build(5, 1, 2, labels), gold, true),
              IsOk());
  ASSERT_EQ(ds->incremental_refits_in_a_row(), 1);
  EXPECT_THAT(ds->ClassPrior(), ElementsAre(DoubleNear(5.0 / 6, 1e-12),
                                            DoubleNear(1.0 / 6, 1e-12)));
}

TEST(DawidSkeneTest, TheRefitStateRestoresWithGoldOfTheHighestClass) {
  // The kept state stores gold g as g + 1 (0: none), so gold of class K - 1 is K, the largest
  // value Restore must accept. K = 2: items 0 and 1 have gold 1 and 0; the restored model
  // keeps the state, serializes to the same blob and gives the same posteriors.
  const AnnotationMatrix m = *AnnotationMatrix::Build(
      3, 2, 2, {{0, 0, 1}, {0, 1, 1}, {1, 0, 0}, {1, 1, 0}, {2, 0, 1}, {2, 1, 0}});
  const std::vector<int32_t> gold = {1, 0, -1};
  std::unique_ptr<DawidSkeneModel> model = MakeDs(2);
  ASSERT_THAT(model->Fit(m, gold, false), IsOk());
  ASSERT_TRUE(model->has_refit_state());
  const std::string blob = model->Serialize();
  std::unique_ptr<DawidSkeneModel> restored = MakeDs(2);
  ASSERT_THAT(restored->Restore(blob), IsOk());
  EXPECT_TRUE(restored->has_refit_state());
  EXPECT_EQ(restored->Serialize(), blob);
  EXPECT_EQ(AllPosteriors(*restored, m, gold), AllPosteriors(*model, m, gold));
}

TEST(DawidSkeneTest, AnItemChangedByTwoRefitsIsKeptOnceInTheState) {
  // Item 4's only label is removed by one incremental refit and given back by the next: the
  // kept state must hold item 4 once, as it is now, so that it serializes and restores (the
  // parser refuses changed items out of order) and the prior is back at that of the first fit,
  // (11/14, 3/14) (IncrementalRefitTakesOutTheShareOfARemovedSingleLabel).
  std::vector<Annotation> labels = {
      {0, 0, 0}, {1, 0, 0}, {2, 0, 0}, {3, 0, 0}, {4, 0, 1}};
  const std::vector<int32_t> gold = {0, 0, 0, 0, -1};
  TruthModelOptions options;
  options.incremental_refit_max_fraction = 1;
  std::unique_ptr<DawidSkeneModel> ds = MakeDs(2, options);
  const AnnotationMatrix all = *AnnotationMatrix::Build(5, 1, 2, labels);
  labels.pop_back();
  const AnnotationMatrix without_item_4 = *AnnotationMatrix::Build(5, 1, 2, labels);
  ASSERT_THAT(ds->Fit(all, gold, false), IsOk());
  ASSERT_THAT(ds->Fit(without_item_4, gold, true), IsOk());
  ASSERT_THAT(ds->Fit(all, gold, true), IsOk());
  ASSERT_EQ(ds->incremental_refits_in_a_row(), 2);
  EXPECT_THAT(ds->ClassPrior(), ElementsAre(DoubleNear(11.0 / 14, 1e-12),
                                            DoubleNear(3.0 / 14, 1e-12)));
  std::unique_ptr<DawidSkeneModel> restored = MakeDs(2, options);
  ASSERT_THAT(restored->Restore(ds->Serialize()), IsOk());
  EXPECT_EQ(restored->incremental_refits_in_a_row(), 2);
  EXPECT_EQ(restored->Serialize(), ds->Serialize());
}

TEST(DawidSkeneTest, DataWithFewerItemsOrAnnotatorsThanTheKeptStateRefitFully) {
  // dawid_skene.h: a warm Fit runs full EM passes when the data have fewer items or annotators
  // than the kept state. The first fit sees 300 items and 20 annotators; the data of each warm
  // fit drop the last item (5 labels) or the labels of annotator 19 (about 75), both well
  // within incremental_refit_max_fraction of 1. Each warm fit is then the full warm fit, bit
  // for bit.
  const SyntheticCrowdSpec spec = VariedCrowdSpec(300);
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  TruthModelOptions options;
  options.incremental_refit_max_fraction = 1;
  std::vector<Annotation> without_last_item, without_annotator_19;
  for (const Annotation& a : crowd.annotations) {
    if (a.item < 299) without_last_item.push_back(a);
    if (a.annotator < 19) without_annotator_19.push_back(a);
  }
  ASSERT_LT(without_annotator_19.size(), crowd.annotations.size());
  const std::vector<AnnotationMatrix> smaller = {
      *AnnotationMatrix::Build(299, 20, 3, without_last_item),
      *AnnotationMatrix::Build(300, 19, 3, without_annotator_19)};
  for (size_t s = 0; s < smaller.size(); ++s) {
    std::unique_ptr<DawidSkeneModel> ds = MakeDs(3, options);
    absl::StatusOr<FitReport> cold = ds->Fit(crowd.matrix, {}, false);
    ASSERT_THAT(cold, IsOk());
    ASSERT_TRUE(cold->converged);
    std::unique_ptr<DawidSkeneModel> full = FullEmCopy(*ds);
    absl::StatusOr<FitReport> warm = ds->Fit(smaller[s], {}, true);
    ASSERT_THAT(warm, IsOk());
    ASSERT_THAT(full->Fit(smaller[s], {}, true), IsOk());
    EXPECT_EQ(ds->incremental_refits_in_a_row(), 0) << "data " << s;
    // Full EM passes: at least two, as convergence compares two log-likelihoods.
    EXPECT_GE(warm->iterations, 2) << "data " << s;
    EXPECT_EQ(ds->Serialize(), full->Serialize()) << "data " << s;
  }
}

TEST(DawidSkeneTest, AStateRefittedOnMoreItemsSurvivesARestart) {
  // An incremental refit on data with 10 more items (50 new labels of 1,500) keeps a state
  // of 300 items, so Serialize and Restore carry it whole: the restored model serializes to
  // the same blob, and its next warm fit on the same data finds nothing changed.
  const SyntheticCrowdSpec spec = VariedCrowdSpec(300);
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  std::vector<Annotation> first_290;
  for (const Annotation& a : crowd.annotations) {
    if (a.item < 290) first_290.push_back(a);
  }
  std::unique_ptr<DawidSkeneModel> ds = MakeDs(3);
  absl::StatusOr<FitReport> cold =
      ds->Fit(*AnnotationMatrix::Build(290, 20, 3, first_290), {}, false);
  ASSERT_THAT(cold, IsOk());
  ASSERT_TRUE(cold->converged);
  ASSERT_THAT(ds->Fit(crowd.matrix, {}, true), IsOk());
  ASSERT_EQ(ds->incremental_refits_in_a_row(), 1);

  const std::string blob = ds->Serialize();
  std::unique_ptr<DawidSkeneModel> restored = MakeDs(3);
  ASSERT_THAT(restored->Restore(blob), IsOk());
  EXPECT_TRUE(restored->has_refit_state());
  EXPECT_EQ(restored->Serialize(), blob);
  absl::StatusOr<FitReport> again = restored->Fit(crowd.matrix, {}, true);
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(again->iterations, 0);
  EXPECT_EQ(restored->incremental_refits_in_a_row(), 1);
  EXPECT_EQ(restored->Serialize(), blob);
}

TEST(DawidSkeneTest, ARefitThatDidNotConvergeIsFollowedByFullEm) {
  // dawid_skene.h: a warm Fit runs full EM when the last fit did not converge, an incremental
  // refit included. The state of a converged cold fit is restored into a model allowed one
  // iteration: its first warm fit refits incrementally, in one iteration, which cannot
  // converge (convergence compares two log-likelihoods); its second runs full EM.
  const SyntheticCrowdSpec spec = VariedCrowdSpec(300);
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  std::unique_ptr<DawidSkeneModel> cold = MakeDs(3);
  ASSERT_THAT(cold->Fit(WithoutItemsFrom(crowd.annotations, 290, spec.num_items, 20, 3), {}, false),
              IsOk());
  TruthModelOptions one_iteration;
  one_iteration.max_iterations = 1;
  std::unique_ptr<DawidSkeneModel> ds = MakeDs(3, one_iteration);
  ASSERT_THAT(ds->Restore(cold->Serialize()), IsOk());
  absl::StatusOr<FitReport> refit =
      ds->Fit(WithoutItemsFrom(crowd.annotations, 295, spec.num_items, 20, 3), {}, true);
  ASSERT_THAT(refit, IsOk());
  ASSERT_EQ(ds->incremental_refits_in_a_row(), 1);
  EXPECT_FALSE(refit->converged);
  ASSERT_THAT(ds->Fit(crowd.matrix, {}, true), IsOk());
  EXPECT_EQ(ds->incremental_refits_in_a_row(), 0);
}

TEST(DawidSkeneTest, RestoringParametersWithoutAStateDropsTheKeptState) {
  // Restore replaces the model: a blob without a kept state (as ds wrote before it kept one)
  // leaves none, and the next warm fit runs full EM.
  const SyntheticCrowdSpec spec = VariedCrowdSpec(300);
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  std::unique_ptr<DawidSkeneModel> ds = MakeDs(3);
  ASSERT_THAT(ds->Fit(WithoutItemsFrom(crowd.annotations, 295, spec.num_items, 20, 3), {}, false),
              IsOk());
  ASSERT_TRUE(ds->has_refit_state());
  ASSERT_THAT(
      ds->Restore(SerializeConfusionModel(DawidSkeneModel::kMethod, ConfusionParameters(3))),
      IsOk());
  EXPECT_FALSE(ds->has_refit_state());
  ASSERT_THAT(ds->Fit(crowd.matrix, {}, true), IsOk());
  EXPECT_EQ(ds->incremental_refits_in_a_row(), 0);
}

TEST(DawidSkeneTest, ClearingGoldRefitTakesOutTheTermOfItsLastEStep) {
  // Item 0 has label 1 from annotator 0, item 1 nothing. Nothing informs the cold fit: the
  // prior is uniform and every annotator has the population (1.1, 0.1) / 1.2 per row
  // (confusion_smoothing 0.1, population_diagonal_prior 1), so item 0's term is
  // log(1/2 x 0.1/1.2 + 1/2 x 1.1/1.2) = log(1/2). Gold 0 on item 1 is refitted incrementally
  // (prior (5/8, 3/8), IncrementalRefitLearnsFromGoldOnAnItemWithoutLabels); clearing it
  // again must take out item 1's term under the parameters of its last E-step, log(5/8),
  // leaving item 0's log(1/2) as the log-likelihood (FitReport: an incremental refit's holds
  // the unchanged items' terms at their last E-step).
  const AnnotationMatrix m = *AnnotationMatrix::Build(2, 1, 2, {{0, 0, 1}});
  std::unique_ptr<DawidSkeneModel> ds = MakeDs(2);
  absl::StatusOr<FitReport> report = ds->Fit(m, {}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_NEAR(report->log_likelihood, std::log(0.5), 1e-12);
  ASSERT_THAT(ds->Fit(m, std::vector<int32_t>{-1, 0}, true), IsOk());
  ASSERT_EQ(ds->incremental_refits_in_a_row(), 1);
  report = ds->Fit(m, std::vector<int32_t>{-1, -1}, true);
  ASSERT_THAT(report, IsOk());
  ASSERT_EQ(ds->incremental_refits_in_a_row(), 2);
  EXPECT_NEAR(report->log_likelihood, std::log(0.5), 1e-12);
  EXPECT_THAT(ds->ClassPrior(), ElementsAre(DoubleNear(0.5, 1e-12), DoubleNear(0.5, 1e-12)));
}

// --- The kept state's serialized form (dawid_skene.h: Restore refuses an inconsistent one) ---

// The fields of a serialized refit state, as RefitState::Serialize writes them, for K = 2 and
// two annotators. The defaults are a consistent state: two items, item 0 labelled 0 by both
// annotators, item 1 without labels, no changed items, one parameter set.
struct ForgedState {
  uint32_t layout_version = 1;
  uint32_t num_items = 2;
  std::vector<uint32_t> base_sizes = {2, 0};
  std::optional<uint64_t> base_sizes_count;           // written instead of base_sizes.size()
  std::vector<uint32_t> base_entries = {0, 0, 1, 0};  // (annotator, label) pairs
  std::vector<uint32_t> base_gold = {0, 0};           // gold + 1
  std::vector<uint32_t> changed_items;
  std::vector<uint32_t> changed_sizes;
  std::vector<uint32_t> changed_entries;
  std::vector<uint32_t> changed_gold;
  std::string changed_estep;
  uint32_t num_params = 1;
  double log_likelihood = -1.5;
  uint32_t converged = 1;
  bool with_parameters = true;
};

// An array of u32 as the state writes it: its size, then (if not empty) one string of the
// values in little-endian order.
void WriteForgedArray(ByteWriter& writer, const std::vector<uint32_t>& values,
                      std::optional<uint64_t> count = std::nullopt) {
  writer.WriteU64(count.value_or(values.size()));
  if (values.empty() || count.has_value()) return;
  std::string bytes;
  for (uint32_t v : values) {
    for (int shift = 0; shift < 32; shift += 8) bytes.push_back(static_cast<char>(v >> shift));
  }
  writer.WriteString(bytes);
}

std::string ForgeDsBlob(const ForgedState& s) {
  std::optional<ConfusionParameters> params;
  if (s.with_parameters) params = ConfusionParameters(2);
  return SerializeConfusionModel(DawidSkeneModel::kMethod, params, [&s](ByteWriter& writer) {
    writer.WriteU32(s.layout_version);
    writer.WriteU32(s.num_items);
    ConfusionCounts(2, 2).Serialize(writer);
    WriteForgedArray(writer, s.base_sizes, s.base_sizes_count);
    WriteForgedArray(writer, s.base_entries);
    WriteForgedArray(writer, s.base_gold);
    WriteForgedArray(writer, s.changed_items);
    WriteForgedArray(writer, s.changed_sizes);
    WriteForgedArray(writer, s.changed_entries);
    WriteForgedArray(writer, s.changed_gold);
    writer.WriteString(s.changed_estep);
    writer.WriteU32(s.num_params);
    for (uint32_t v = 0; v < s.num_params; ++v) ConfusionParameters(2).Serialize(writer);
    writer.WriteF64(s.log_likelihood);
    writer.WriteU32(s.converged);
    writer.WriteU32(0);  // incremental refits in a row
    writer.WriteU64(0);  // labels they touched
  });
}

TEST(DawidSkeneTest, RestoreRefusesEachInconsistentFieldOfTheRefitState) {
  // The consistent state restores, and serializes back to the same bytes (so the forged
  // layout is the real one and each refusal below is for its one bad field).
  const std::string good = ForgeDsBlob(ForgedState());
  std::unique_ptr<DawidSkeneModel> ds = MakeDs(2);
  ASSERT_THAT(ds->Restore(good), IsOk());
  ASSERT_TRUE(ds->has_refit_state());
  ASSERT_EQ(ds->Serialize(), good);

  ForgedState changed_item;  // item 1 changed: now gold 0, no labels, parameter set 0
  changed_item.changed_items = {1};
  changed_item.changed_sizes = {0};
  changed_item.changed_gold = {1};
  changed_item.changed_estep = std::string(1, '\0');
  ASSERT_THAT(ds->Restore(ForgeDsBlob(changed_item)), IsOk());
  // Ids use all four bytes of a u32: a changed item 2^24 + 1 of 2^24 + 2 (ds keeps no array
  // of num_items entries, so the state is small) restores and serializes as it was.
  ForgedState high_item = changed_item;
  high_item.num_items = (uint32_t{1} << 24) + 2;
  high_item.changed_items = {(uint32_t{1} << 24) + 1};
  const std::string high_blob = ForgeDsBlob(high_item);
  ASSERT_THAT(ds->Restore(high_blob), IsOk());
  EXPECT_EQ(ds->Serialize(), high_blob);

  std::vector<std::pair<std::string, ForgedState>> refused;
  refused.emplace_back("more items in the snapshot than in the state", ForgedState());
  refused.back().second.num_items = 1;
  refused.emplace_back("a label of class K", ForgedState());
  refused.back().second.base_entries = {0, 0, 1, 2};
  refused.emplace_back("an annotator the counts do not have", ForgedState());
  refused.back().second.base_entries = {0, 0, 2, 0};
  refused.emplace_back("gold of class K", ForgedState());
  refused.back().second.base_gold = {3, 0};
  refused.emplace_back("an unknown layout version", ForgedState());
  refused.back().second.layout_version = 2;
  refused.emplace_back("no parameter set", ForgedState());
  refused.back().second.num_params = 0;
  refused.emplace_back("a state without parameters", ForgedState());
  refused.back().second.with_parameters = false;
  refused.emplace_back("2^31 - 1 items, one more than the most", ForgedState());
  refused.back().second.num_items = (uint32_t{1} << 31) - 1;
  refused.emplace_back("more labels than the rows hold", ForgedState());
  refused.back().second.base_entries = {0, 0, 1, 0, 1, 1};
  refused.emplace_back("gold of more items than the rows", ForgedState());
  refused.back().second.base_gold = {0, 0, 0};
  refused.emplace_back("a log-likelihood of infinity", ForgedState());
  refused.back().second.log_likelihood = std::numeric_limits<double>::infinity();
  refused.emplace_back("a convergence flag of 2", ForgedState());
  refused.back().second.converged = 2;
  refused.emplace_back("a forged array size", ForgedState());
  refused.back().second.base_sizes_count = uint64_t{1} << 62;
  refused.emplace_back("a changed item twice", changed_item);
  refused.back().second.changed_items = {1, 1};
  refused.back().second.changed_sizes = {0, 0};
  refused.back().second.changed_gold = {1, 1};
  refused.back().second.changed_estep = std::string(2, '\0');
  refused.emplace_back("a changed item out of range", changed_item);
  refused.back().second.changed_items = {2};
  refused.emplace_back("more changed rows than changed items", changed_item);
  refused.back().second.changed_sizes = {0, 0};
  refused.emplace_back("more parameter indices than changed items", changed_item);
  refused.back().second.changed_estep = std::string(2, '\0');
  refused.emplace_back("a parameter set out of range", changed_item);
  refused.back().second.changed_estep = "\x01";
  for (const auto& [what, state] : refused) {
    std::unique_ptr<DawidSkeneModel> model = MakeDs(2);
    ASSERT_THAT(model->Restore(good), IsOk());
    EXPECT_THAT(model->Restore(ForgeDsBlob(state)), StatusIs(absl::StatusCode::kInvalidArgument))
        << what;
    // The model keeps what it had.
    EXPECT_EQ(model->Serialize(), good) << what;
  }
}

// --- EM against a direct transcription of the documented formulas ---

// The parameters of a reference fit, dense and row-major ([true class][label]), as
// AnnotatorConfusion returns them; -1 is the population.
struct ReferenceParameters {
  std::vector<double> prior;
  std::vector<double> population;
  std::vector<std::vector<double>> confusions;
};

bool ReferenceInforms(const AnnotationMatrix& m, const std::vector<int32_t>& gold, int32_t i) {
  return m.LabelsOfItem(i).size() >= 2 || (!gold.empty() && gold[i] >= 0);
}

// The M-step of truth_model.h (TruthModelOptions) and dawid_skene.h, from the responsibilities
// q (K per item): items with two labels or gold add their expected counts, single-label items
// add 1/K to each class's prior mass, items without labels or gold add nothing.
ReferenceParameters ReferenceMStep(const AnnotationMatrix& m, const std::vector<int32_t>& gold,
                                   const std::vector<double>& q, const TruthModelOptions& o) {
  const int32_t k = m.num_classes();
  const int32_t num_annotators = m.num_annotators();
  std::vector<double> mass(k, 0.0);
  std::vector<std::vector<double>> n(num_annotators, std::vector<double>(k * k, 0.0));
  std::vector<int32_t> counted_labels(num_annotators, 0);
  for (int32_t i = 0; i < m.num_items(); ++i) {
    const absl::Span<const Entry> labels = m.LabelsOfItem(i);
    if (ReferenceInforms(m, gold, i)) {
      for (int32_t c = 0; c < k; ++c) mass[c] += q[i * k + c];
      for (const Entry& e : labels) {
        ++counted_labels[e.other];
        for (int32_t c = 0; c < k; ++c) n[e.other][c * k + e.label] += q[i * k + c];
      }
    } else if (labels.size() == 1) {
      for (int32_t c = 0; c < k; ++c) mass[c] += 1.0 / k;
    }
  }
  ReferenceParameters r;
  double total_mass = 0;
  for (double x : mass) total_mass += x;
  for (int32_t c = 0; c < k; ++c) {
    r.prior.push_back((mass[c] + o.prior_smoothing) / (total_mass + k * o.prior_smoothing));
  }
  const double alpha = o.confusion_smoothing;
  const double diagonal = o.population_diagonal_prior;
  r.population.assign(k * k, 0.0);
  for (int32_t c = 0; c < k; ++c) {
    double row = 0;
    for (int32_t a = 0; a < num_annotators; ++a) {
      for (int32_t l = 0; l < k; ++l) row += n[a][c * k + l];
    }
    for (int32_t l = 0; l < k; ++l) {
      double pooled = 0;
      for (int32_t a = 0; a < num_annotators; ++a) pooled += n[a][c * k + l];
      r.population[c * k + l] =
          (pooled + alpha + (l == c ? diagonal : 0.0)) / (row + k * alpha + diagonal);
    }
  }
  for (int32_t a = 0; a < num_annotators; ++a) {
    if (counted_labels[a] == 0) {
      r.confusions.push_back(r.population);
      continue;
    }
    std::vector<double> confusion(k * k);
    for (int32_t c = 0; c < k; ++c) {
      double row = 0;
      for (int32_t l = 0; l < k; ++l) row += n[a][c * k + l];
      for (int32_t l = 0; l < k; ++l) {
        confusion[c * k + l] =
            (n[a][c * k + l] + alpha + o.population_smoothing * r.population[c * k + l]) /
            (row + k * alpha + o.population_smoothing);
      }
    }
    r.confusions.push_back(confusion);
  }
  return r;
}

// The E-step: writes every item's posterior into q (the prior for an item without labels or
// gold, one-hot for gold) and returns the log-likelihood, the sum over items with labels or
// gold of log p(labels) or log p(gold, labels).
double ReferenceEStep(const ReferenceParameters& r, const AnnotationMatrix& m,
                      const std::vector<int32_t>& gold, std::vector<double>& q) {
  const int32_t k = m.num_classes();
  q.assign(static_cast<size_t>(m.num_items()) * k, 0.0);
  double ll = 0;
  for (int32_t i = 0; i < m.num_items(); ++i) {
    const absl::Span<const Entry> labels = m.LabelsOfItem(i);
    std::vector<double> joint(r.prior);
    for (int32_t c = 0; c < k; ++c) {
      for (const Entry& e : labels) joint[c] *= r.confusions[e.other][c * k + e.label];
    }
    const int32_t g = gold.empty() ? -1 : gold[i];
    if (g >= 0) {
      q[i * k + g] = 1.0;
      ll += std::log(joint[g]);
      continue;
    }
    double sum = 0;
    for (double p : joint) sum += p;
    for (int32_t c = 0; c < k; ++c) q[i * k + c] = joint[c] / sum;
    if (!labels.empty()) ll += std::log(sum);
  }
  return ll;
}

// The cold start: the M-step on the soft majority vote (count + vote_smoothing) /
// (labels + K vote_smoothing), one-hot for gold.
ReferenceParameters ReferenceInitialisation(const AnnotationMatrix& m,
                                            const std::vector<int32_t>& gold,
                                            const TruthModelOptions& o) {
  const int32_t k = m.num_classes();
  std::vector<double> q(static_cast<size_t>(m.num_items()) * k, 0.0);
  for (int32_t i = 0; i < m.num_items(); ++i) {
    const absl::Span<const Entry> labels = m.LabelsOfItem(i);
    if (!gold.empty() && gold[i] >= 0) {
      q[i * k + gold[i]] = 1.0;
      continue;
    }
    for (int32_t c = 0; c < k; ++c) {
      double votes = 0;
      for (const Entry& e : labels) votes += e.label == c ? 1 : 0;
      q[i * k + c] = (votes + o.vote_smoothing) / (labels.size() + k * o.vote_smoothing);
    }
  }
  return ReferenceMStep(m, gold, q, o);
}

// 30 items, K = 3, 7 annotators: item i has i % 5 labels; annotator 5 labels only items with
// a single label (so it informs nothing and keeps the population confusion), annotator 6
// labels nothing; item 3 (3 labels), item 5 (no labels) and item 6 (one label) have gold.
struct SmallCrowd {
  AnnotationMatrix matrix;
  std::vector<int32_t> gold;
};

SmallCrowd MakeSmallCrowd(uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Annotation> triples;
  for (int32_t i = 0; i < 30; ++i) {
    const int32_t truth = static_cast<int32_t>(rng() % 3);
    const int32_t n = i % 5;
    for (int32_t j = 0; j < n; ++j) {
      const int32_t annotator = n == 1 ? 5 : (i + j) % 5;
      const bool right = static_cast<int32_t>(rng() % 7) < annotator + 2;
      const int32_t label = right ? truth : static_cast<int32_t>(rng() % 3);
      triples.push_back({i, annotator, label});
    }
  }
  std::vector<int32_t> gold(30, -1);
  gold[3] = 1;
  gold[5] = 2;
  gold[6] = 0;
  return {*AnnotationMatrix::Build(30, 7, 3, triples), gold};
}

TruthModelOptions UnusualOptions(int max_iterations) {
  TruthModelOptions o;
  o.confusion_smoothing = 0.3;
  o.population_smoothing = 1.5;
  o.prior_smoothing = 0.7;
  o.population_diagonal_prior = 2.0;
  o.vote_smoothing = 0.05;
  o.tolerance = 0;  // exactly max_iterations EM iterations
  o.max_iterations = max_iterations;
  o.incremental_refit_max_fraction = 0;  // warm fits run full EM
  return o;
}

void ExpectMatchesReference(const DawidSkeneModel& ds, const ReferenceParameters& r,
                            const SmallCrowd& crowd, const std::string& what) {
  SCOPED_TRACE(what);
  auto near = [](const std::vector<double>& expected) {
    std::vector<::testing::Matcher<double>> cells;
    for (double e : expected) cells.push_back(DoubleNear(e, 1e-12));
    return ElementsAreArray(cells);
  };
  EXPECT_THAT(ds.ClassPrior(), near(r.prior));
  EXPECT_THAT(ds.AnnotatorConfusion(-1), near(r.population));
  for (int32_t a = 0; a < crowd.matrix.num_annotators(); ++a) {
    EXPECT_THAT(ds.AnnotatorConfusion(a), near(r.confusions[a])) << "annotator " << a;
  }
  std::vector<double> q;
  ReferenceEStep(r, crowd.matrix, crowd.gold, q);
  EXPECT_THAT(AllPosteriors(ds, crowd.matrix, crowd.gold), near(q));
}

TEST(DawidSkeneTest, ColdAndWarmFitsFollowTheDocumentedEmSteps) {
  const SmallCrowd crowd = MakeSmallCrowd(11);
  for (int iterations : {1, 3}) {
    const TruthModelOptions options = UnusualOptions(iterations);
    ReferenceParameters r = ReferenceInitialisation(crowd.matrix, crowd.gold, options);
    double ll = 0;
    std::vector<double> q;
    for (int t = 0; t < iterations; ++t) {
      ll = ReferenceEStep(r, crowd.matrix, crowd.gold, q);
      r = ReferenceMStep(crowd.matrix, crowd.gold, q, options);
    }
    std::unique_ptr<DawidSkeneModel> ds = MakeDs(3, options);
    absl::StatusOr<FitReport> report = ds->Fit(crowd.matrix, crowd.gold, false);
    ASSERT_THAT(report, IsOk());
    EXPECT_EQ(report->iterations, iterations);
    EXPECT_FALSE(report->converged);
    // The log-likelihood of the last E-step, under the parameters before the last M-step.
    EXPECT_NEAR(report->log_likelihood, ll, 1e-9);
    ExpectMatchesReference(*ds, r, crowd, "cold, iterations " + std::to_string(iterations));

    // A warm full fit on other labels starts its first E-step from these parameters.
    const SmallCrowd other = MakeSmallCrowd(12);
    for (int t = 0; t < iterations; ++t) {
      ll = ReferenceEStep(r, other.matrix, other.gold, q);
      r = ReferenceMStep(other.matrix, other.gold, q, options);
    }
    report = ds->Fit(other.matrix, other.gold, true);
    ASSERT_THAT(report, IsOk());
    EXPECT_EQ(ds->incremental_refits_in_a_row(), 0);
    EXPECT_EQ(report->iterations, iterations);
    EXPECT_NEAR(report->log_likelihood, ll, 1e-9);
    ExpectMatchesReference(*ds, r, other, "warm, iterations " + std::to_string(iterations));
  }
}

TEST(DawidSkeneTest, EmStopsOnTheSizeOfTheChangeWhenTheLogLikelihoodFalls) {
  // truth_model.h: EM has converged when |dLL| / |LL| between two consecutive E-steps is below
  // the tolerance. The log-likelihood is that of the data alone, without the Dirichlet
  // pseudo-counts the M-step also weighs, so with a heavy prior_smoothing it falls from one
  // E-step to the next (here from -4.75 to -5.43, then more slowly); a fall larger than the
  // tolerance must not stop EM any more than a rise does. The reference EM, run with that
  // rule, sets the number of iterations.
  const SmallCrowd crowd = {
      *AnnotationMatrix::Build(4, 2, 2,
                               {{0, 1, 0}, {1, 0, 1}, {1, 1, 1}, {2, 0, 1}, {2, 1, 1}, {3, 0, 0}}),
      {}};
  TruthModelOptions options;
  options.confusion_smoothing = 0.1;
  options.population_smoothing = 2;
  options.prior_smoothing = 20;
  options.population_diagonal_prior = 0.1;
  options.vote_smoothing = 0.5;
  ReferenceParameters r = ReferenceInitialisation(crowd.matrix, crowd.gold, options);
  std::vector<double> lls;
  std::vector<double> q;
  while (static_cast<int>(lls.size()) < options.max_iterations) {
    lls.push_back(ReferenceEStep(r, crowd.matrix, crowd.gold, q));
    r = ReferenceMStep(crowd.matrix, crowd.gold, q, options);
    const size_t t = lls.size() - 1;
    if (t > 0 && std::abs(lls[t] - lls[t - 1]) <= options.tolerance * std::abs(lls[t])) break;
  }
  ASSERT_GE(lls.size(), 3u);
  ASSERT_LT(lls[1], lls[0] - 0.5);
  ASSERT_LT(static_cast<int>(lls.size()), options.max_iterations);

  std::unique_ptr<DawidSkeneModel> ds = MakeDs(2, options);
  absl::StatusOr<FitReport> report = ds->Fit(crowd.matrix, {}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->iterations, static_cast<int>(lls.size()));
  EXPECT_TRUE(report->converged);
  EXPECT_NEAR(report->log_likelihood, lls.back(), 1e-9);
  ExpectMatchesReference(*ds, r, crowd, "converged");
}

}  // namespace
}  // namespace verity::models

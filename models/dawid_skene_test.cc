#include "models/dawid_skene.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/annotation_matrix.h"
#include "models/majority_vote.h"
#include "common/status_matchers.h"
#include "models/testing/synthetic_crowd.h"
#include "models/truth_model.h"

namespace verity::models {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
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

}  // namespace
}  // namespace verity::models

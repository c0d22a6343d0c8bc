#include "models/glad.h"

#include <algorithm>
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
#include "models/annotation_matrix.h"
#include "models/binary_codec.h"
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

std::unique_ptr<GladModel> MakeGlad(int32_t num_classes,
                                    const TruthModelOptions& options = {}) {
  absl::StatusOr<std::unique_ptr<GladModel>> model =
      GladModel::Create(num_classes, options);
  EXPECT_THAT(model, IsOk());
  return model.ok() ? *std::move(model) : nullptr;
}

std::unique_ptr<MajorityVoteModel> MakeMv(int32_t num_classes) {
  absl::StatusOr<std::unique_ptr<MajorityVoteModel>> model =
      MajorityVoteModel::Create(num_classes, {});
  EXPECT_THAT(model, IsOk());
  return model.ok() ? *std::move(model) : nullptr;
}

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Labels drawn from the GLAD model itself: uniform true classes, log
// easiness b_i ~ N(0, easiness_stddev^2), `labels_per_item` distinct
// annotators per item, each right with probability
// sigmoid(ability * e^b_i), else uniformly wrong. Hand-written sampling on
// std::mt19937_64, so a seed gives the same data everywhere.
struct GladCrowd {
  std::vector<Annotation> annotations;
  AnnotationMatrix matrix;
  std::vector<int32_t> truth;
  std::vector<double> log_easiness;
};

GladCrowd GenerateGladCrowd(int32_t num_items, int32_t num_classes,
                            int32_t labels_per_item,
                            const std::vector<double>& abilities,
                            double easiness_stddev, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&rng] {
    return static_cast<double>(rng() >> 11) * 0x1.0p-53;
  };
  const int32_t num_annotators = static_cast<int32_t>(abilities.size());
  GladCrowd crowd;
  std::vector<int32_t> pool(num_annotators);
  for (int32_t a = 0; a < num_annotators; ++a) pool[a] = a;
  for (int32_t i = 0; i < num_items; ++i) {
    const int32_t truth = static_cast<int32_t>(rng() % num_classes);
    // Box-Muller.
    const double b = easiness_stddev *
                     std::sqrt(-2.0 * std::log(1.0 - uniform())) *
                     std::cos(2.0 * M_PI * uniform());
    crowd.truth.push_back(truth);
    crowd.log_easiness.push_back(b);
    for (int32_t j = 0; j < labels_per_item; ++j) {
      const int32_t pick =
          j + static_cast<int32_t>(rng() % (num_annotators - j));
      std::swap(pool[j], pool[pick]);
      const int32_t annotator = pool[j];
      int32_t label = truth;
      if (uniform() >= Sigmoid(abilities[annotator] * std::exp(b))) {
        label = (truth + 1 + static_cast<int32_t>(rng() % (num_classes - 1))) %
                num_classes;
      }
      crowd.annotations.push_back({i, annotator, label});
    }
  }
  crowd.matrix = *AnnotationMatrix::Build(num_items, num_annotators,
                                          num_classes, crowd.annotations);
  return crowd;
}

// Twenty abilities from -0.6 (worse than guessing among three classes:
// sigmoid(-0.6) = 0.35 > 1/3 only barely) to 3.2.
std::vector<double> Abilities() {
  std::vector<double> abilities;
  for (int a = 0; a < 20; ++a) abilities.push_back(-0.6 + 0.2 * a);
  return abilities;
}

double RankCorrelation(const std::vector<double>& x,
                       const std::vector<double>& y) {
  auto ranks = [](const std::vector<double>& v) {
    std::vector<size_t> order(v.size());
    for (size_t i = 0; i < v.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&v](size_t a, size_t b) { return v[a] < v[b]; });
    std::vector<double> r(v.size());
    for (size_t i = 0; i < v.size(); ++i) r[order[i]] = static_cast<double>(i);
    return r;
  };
  const std::vector<double> rx = ranks(x);
  const std::vector<double> ry = ranks(y);
  const double n = static_cast<double>(x.size());
  double d2 = 0;
  for (size_t i = 0; i < x.size(); ++i) d2 += (rx[i] - ry[i]) * (rx[i] - ry[i]);
  return 1.0 - 6.0 * d2 / (n * (n * n - 1.0));
}

double Correlation(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = static_cast<double>(x.size());
  double mx = 0, my = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    mx += x[i] / n;
    my += y[i] / n;
  }
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  return sxy / std::sqrt(sxx * syy);
}

TEST(GladTest, RecoversAbilitiesAndEasinessOfAGladCrowd) {
  // 6000 items, 6 labels each: 1800 labels per annotator.
  const std::vector<double> abilities = Abilities();
  const GladCrowd crowd = GenerateGladCrowd(6000, 3, 6, abilities, 0.5, 3);
  std::unique_ptr<GladModel> model = MakeGlad(3);
  absl::StatusOr<FitReport> report = model->Fit(crowd.matrix, {}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_TRUE(report->converged);
  EXPECT_TRUE(std::isfinite(report->log_likelihood));

  std::vector<double> fitted;
  for (int32_t a = 0; a < 20; ++a) fitted.push_back(model->AnnotatorAbility(a));
  const double rank_correlation = RankCorrelation(fitted, abilities);
  RecordProperty("ability_rank_correlation", std::to_string(rank_correlation));
  EXPECT_GE(rank_correlation, 0.98);
  // The scale of alpha * beta is shared between abilities and easiness (and
  // each item's easiness, from six labels, is shrunk toward the prior), so
  // the abilities are recovered up to a factor, measured ~1.2 here.
  double tt = 0;
  double ft = 0;
  for (int32_t a = 0; a < 20; ++a) {
    tt += abilities[a] * abilities[a];
    ft += fitted[a] * abilities[a];
  }
  const double scale = ft / tt;
  double max_error = 0;
  for (int32_t a = 0; a < 20; ++a) {
    max_error = std::max(max_error, std::abs(fitted[a] - scale * abilities[a]));
  }
  RecordProperty("ability_scale", std::to_string(scale));
  RecordProperty("max_scaled_ability_error", std::to_string(max_error));
  EXPECT_NEAR(scale, 1.0, 0.3);
  EXPECT_LE(max_error, 0.35);
  // Every pair of annotators 0.4 apart is ordered right.
  for (int32_t a = 0; a < 20; ++a) {
    for (int32_t b = a + 2; b < 20; ++b) {
      EXPECT_LT(fitted[a], fitted[b]) << a << " vs " << b;
    }
  }

  std::vector<double> fitted_b;
  for (int32_t i = 0; i < 6000; ++i) {
    fitted_b.push_back(std::log(model->ItemEasiness(i)));
  }
  const double easiness_correlation =
      Correlation(fitted_b, crowd.log_easiness);
  RecordProperty("easiness_correlation", std::to_string(easiness_correlation));
  EXPECT_GE(easiness_correlation, 0.3);

  std::unique_ptr<MajorityVoteModel> mv = MakeMv(3);
  ASSERT_THAT(mv->Fit(crowd.matrix, {}, false), IsOk());
  const double accuracy = Accuracy(AllPosteriors(*model, crowd.matrix, {}),
                                   crowd.matrix, crowd.truth);
  const double mv_accuracy =
      Accuracy(AllPosteriors(*mv, crowd.matrix, {}), crowd.matrix, crowd.truth);
  RecordProperty("glad_accuracy", std::to_string(accuracy));
  RecordProperty("mv_accuracy", std::to_string(mv_accuracy));
  EXPECT_GT(accuracy, mv_accuracy + 0.02);
}

TEST(GladTest, OrdersAbilitiesLikeAccuraciesOnASymmetricCrowd) {
  SyntheticCrowdSpec spec;
  spec.num_items = 5000;
  spec.num_classes = 3;
  spec.labels_per_item = 5;
  for (int a = 0; a < 20; ++a) {
    spec.confusions.push_back(SymmetricConfusion(3, 0.45 + 0.025 * a));
  }
  spec.seed = 23;
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  std::unique_ptr<GladModel> model = MakeGlad(3);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());
  for (int32_t a = 0; a < 20; ++a) {
    for (int32_t b = a + 4; b < 20; ++b) {
      EXPECT_LT(model->AnnotatorAbility(a), model->AnnotatorAbility(b))
          << a << " vs " << b;
    }
  }
}

TEST(GladTest, BeatsMajorityVoteWhenAThirdAreSpammers) {
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

  std::unique_ptr<GladModel> model = MakeGlad(2);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());
  std::unique_ptr<MajorityVoteModel> mv = MakeMv(2);
  ASSERT_THAT(mv->Fit(crowd.matrix, {}, false), IsOk());
  const double accuracy = Accuracy(AllPosteriors(*model, crowd.matrix, {}),
                                   crowd.matrix, crowd.truth);
  const double mv_accuracy =
      Accuracy(AllPosteriors(*mv, crowd.matrix, {}), crowd.matrix, crowd.truth);
  RecordProperty("glad_accuracy", std::to_string(accuracy));
  RecordProperty("mv_accuracy", std::to_string(mv_accuracy));
  EXPECT_GT(accuracy, mv_accuracy + 0.03);
  // Every spammer ranks below every good annotator, near ability 0
  // (p(correct) = 0.5; within 0.5, p is within 0.12 of it).
  double best_spammer = -1e9;
  double worst_good = 1e9;
  for (int a = 0; a < 30; ++a) {
    if (a % 3 == 0) {
      best_spammer = std::max(best_spammer, model->AnnotatorAbility(a));
      EXPECT_NEAR(model->AnnotatorAbility(a), 0.0, 0.5) << a;
    } else {
      worst_good = std::min(worst_good, model->AnnotatorAbility(a));
    }
  }
  EXPECT_LT(best_spammer, worst_good);
}

// glad.h: an item outside the fit, or no item, gets the prior easiness
// exp(glad_log_easiness_prior_mean): exp(0.7) here, not the default's 1; ItemPosterior (no
// item) uses it: with one label of an annotator of ability alpha, the posterior of that label is
// sigmoid(alpha exp(0.7)) (K = 2).
TEST(GladTest, ItemsOutsideTheFitGetThePriorEasinessOfTheOptions) {
  const GladCrowd crowd = GenerateGladCrowd(300, 2, 5, Abilities(), 0.5, 4);
  TruthModelOptions options;
  options.glad_log_easiness_prior_mean = 0.7;
  std::unique_ptr<GladModel> model = MakeGlad(2, options);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());
  EXPECT_NEAR(model->ItemEasiness(-1), std::exp(0.7), 1e-12);
  EXPECT_NEAR(model->ItemEasiness(300), std::exp(0.7), 1e-12);
  std::vector<double> out(2);
  model->ItemPosterior(std::vector<Entry>{{3, 1}}, -1, absl::MakeSpan(out));
  EXPECT_NEAR(out[1], Sigmoid(model->AnnotatorAbility(3) * std::exp(0.7)), 1e-9);
  // AnnotatorConfusion is for an item of that prior easiness too (glad.h):
  // p = sigmoid(alpha exp(0.7)) on the diagonal, 1 - p elsewhere (K = 2).
  const std::vector<double> c = model->AnnotatorConfusion(3);
  ASSERT_EQ(c.size(), 4u);
  EXPECT_NEAR(c[0], Sigmoid(model->AnnotatorAbility(3) * std::exp(0.7)), 1e-12);
  EXPECT_NEAR(c[1], 1 - Sigmoid(model->AnnotatorAbility(3) * std::exp(0.7)), 1e-12);
}

TEST(GladTest, PosteriorIsTheGladFormulaWithTheItemsEasiness) {
  const GladCrowd crowd = GenerateGladCrowd(500, 3, 5, Abilities(), 0.5, 4);
  std::unique_ptr<GladModel> model = MakeGlad(3);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());

  const std::vector<Entry> labels = {{2, 0}, {7, 2}, {15, 0}};
  auto expected = [&](double beta) {
    std::vector<double> p(3, 1.0);
    for (const Entry& e : labels) {
      const double right = Sigmoid(model->AnnotatorAbility(e.other) * beta);
      for (int32_t k = 0; k < 3; ++k) {
        p[k] *= k == e.label ? right : (1 - right) / 2;
      }
    }
    const double total = p[0] + p[1] + p[2];
    for (double& v : p) v /= total;
    return p;
  };
  std::vector<double> out(3);
  for (int32_t item : {0, 123, 499}) {
    const double beta = model->ItemEasiness(item);
    model->ItemPosteriorForItem(item, labels, -1, absl::MakeSpan(out));
    EXPECT_THAT(out, ElementsAre(DoubleNear(expected(beta)[0], 1e-12),
                                 DoubleNear(expected(beta)[1], 1e-12),
                                 DoubleNear(expected(beta)[2], 1e-12)))
        << "item " << item;
  }
  // Items have their own easiness...
  EXPECT_NE(model->ItemEasiness(0), model->ItemEasiness(123));
  // ...and an item out of the fit, or no item, gets the prior easiness
  // exp(glad_log_easiness_prior_mean) = 1.
  EXPECT_EQ(model->ItemEasiness(500), 1.0);
  EXPECT_EQ(model->ItemEasiness(-1), 1.0);
  model->ItemPosterior(labels, -1, absl::MakeSpan(out));
  EXPECT_THAT(out, ElementsAre(DoubleNear(expected(1.0)[0], 1e-12),
                               DoubleNear(expected(1.0)[1], 1e-12),
                               DoubleNear(expected(1.0)[2], 1e-12)));
  std::vector<double> out_of_range(3);
  model->ItemPosteriorForItem(500, labels, -1, absl::MakeSpan(out_of_range));
  EXPECT_EQ(out_of_range, out);
}

TEST(GladTest, OnlinePosteriorsEqualAllPosteriorsBitForBit) {
  const GladCrowd crowd = GenerateGladCrowd(300, 3, 5, Abilities(), 0.5, 5);
  std::unique_ptr<GladModel> model = MakeGlad(3);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());

  const std::vector<double> all = AllPosteriors(*model, crowd.matrix, {});
  std::vector<double> out(3);
  for (int32_t i = 0; i < crowd.matrix.num_items(); ++i) {
    std::vector<Entry> labels(crowd.matrix.LabelsOfItem(i).begin(),
                              crowd.matrix.LabelsOfItem(i).end());
    std::reverse(labels.begin(), labels.end());
    model->ItemPosteriorForItem(i, labels, -1, absl::MakeSpan(out));
    ASSERT_EQ(out[0], all[3 * i]);
    ASSERT_EQ(out[1], all[3 * i + 1]);
    ASSERT_EQ(out[2], all[3 * i + 2]);
  }
}

TEST(GladTest, AnnotatorConfusionIsForAnItemOfPriorEasiness) {
  const GladCrowd crowd = GenerateGladCrowd(500, 3, 5, Abilities(), 0.5, 6);
  std::unique_ptr<GladModel> model = MakeGlad(3);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());
  for (int32_t a : {0, 19, 20, -1}) {
    const double p = Sigmoid(model->AnnotatorAbility(a));
    const double q = (1 - p) / 2;
    const std::vector<double> c = model->AnnotatorConfusion(a);
    ASSERT_EQ(c.size(), 9u);
    for (int32_t k = 0; k < 3; ++k) {
      for (int32_t l = 0; l < 3; ++l) {
        EXPECT_NEAR(c[k * 3 + l], k == l ? p : q, 1e-15) << a;
      }
    }
  }
}

TEST(GladTest, ItemAnnotatorConfusionUsesTheItemsEasiness) {
  const GladCrowd crowd = GenerateGladCrowd(500, 3, 5, Abilities(), 0.5, 6);
  std::unique_ptr<GladModel> model = MakeGlad(3);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());
  for (int32_t item : {0, 123, 499}) {
    const double p = Sigmoid(model->AnnotatorAbility(7) * model->ItemEasiness(item));
    const std::vector<double> c = model->ItemAnnotatorConfusion(item, 7);
    ASSERT_EQ(c.size(), 9u);
    EXPECT_NEAR(c[0], p, 1e-15);
    EXPECT_NEAR(c[1], (1 - p) / 2, 1e-15);
    EXPECT_NEAR(c[0] + c[1] + c[2], 1.0, 1e-12);
  }
  // Out of the fitted range: the prior item, as AnnotatorConfusion.
  EXPECT_EQ(model->ItemAnnotatorConfusion(-1, 7), model->AnnotatorConfusion(7));
  EXPECT_EQ(model->ItemAnnotatorConfusion(10000, 7), model->AnnotatorConfusion(7));
}

TEST(GladTest, GoldItemsAreClampedAndHelp) {
  // A hard crowd: three labels per item from mostly weak annotators.
  std::vector<double> abilities = Abilities();
  for (int a = 0; a < 12; ++a) abilities[a] = -0.7;  // p(correct) = 0.33
  const GladCrowd crowd = GenerateGladCrowd(1500, 3, 3, abilities, 0.5, 7);
  std::vector<int32_t> gold(1500, -1);
  for (int32_t i = 0; i < 1500; i += 3) gold[i] = crowd.truth[i];

  std::unique_ptr<GladModel> without_gold = MakeGlad(3);
  ASSERT_THAT(without_gold->Fit(crowd.matrix, {}, false), IsOk());
  std::unique_ptr<GladModel> with_gold = MakeGlad(3);
  ASSERT_THAT(with_gold->Fit(crowd.matrix, gold, false), IsOk());

  const std::vector<double> posteriors =
      AllPosteriors(*with_gold, crowd.matrix, gold);
  for (int32_t i = 0; i < 1500; i += 3) {
    for (int32_t k = 0; k < 3; ++k) {
      ASSERT_EQ(posteriors[i * 3 + k], k == gold[i] ? 1.0 : 0.0)
          << "item " << i << " class " << k;
    }
  }
  double error_without = 0;
  double error_with = 0;
  for (int32_t a = 0; a < 20; ++a) {
    error_without += std::abs(without_gold->AnnotatorAbility(a) - abilities[a]);
    error_with += std::abs(with_gold->AnnotatorAbility(a) - abilities[a]);
  }
  RecordProperty("mean_ability_error_without_gold",
                 std::to_string(error_without / 20));
  RecordProperty("mean_ability_error_with_gold",
                 std::to_string(error_with / 20));
  EXPECT_LT(error_with, error_without);

  std::vector<int32_t> truth_of_unclamped = crowd.truth;
  for (int32_t i = 0; i < 1500; i += 3) truth_of_unclamped[i] = -1;
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

TEST(GladTest, NoNanForSparseAnnotatorsAndUnlabelledItems) {
  const AnnotationMatrix m = TinyMatrix();
  std::unique_ptr<GladModel> model = MakeGlad(2);
  absl::StatusOr<FitReport> report = model->Fit(m, {}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_TRUE(std::isfinite(report->log_likelihood));

  const std::vector<double> posteriors = AllPosteriors(*model, m, {});
  for (int32_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(std::isfinite(posteriors[2 * i]));
    EXPECT_TRUE(std::isfinite(posteriors[2 * i + 1]));
    EXPECT_NEAR(posteriors[2 * i] + posteriors[2 * i + 1], 1.0, 1e-12);
  }
  // The unlabelled item keeps the prior easiness and gets the prior.
  EXPECT_EQ(model->ItemEasiness(2), 1.0);
  EXPECT_EQ(posteriors[4], 0.5);
  EXPECT_EQ(posteriors[5], 0.5);
  EXPECT_GT(posteriors[7], 0.5);
  for (int32_t a : {0, 1, 2, 3, 4, -1}) {
    EXPECT_TRUE(std::isfinite(model->AnnotatorAbility(a))) << a;
  }
  for (int32_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(model->ItemEasiness(i) > 0 &&
                std::isfinite(model->ItemEasiness(i)))
        << i;
  }
  // An annotator with no labels, and ids never seen, get the population
  // ability: the label-weighted mean of the others.
  const double population = (2 * model->AnnotatorAbility(0) +
                             2 * model->AnnotatorAbility(1) +
                             model->AnnotatorAbility(2)) /
                            5;
  EXPECT_NEAR(model->AnnotatorAbility(3), population, 1e-15);
  EXPECT_EQ(model->AnnotatorAbility(3), model->AnnotatorAbility(4));
  EXPECT_EQ(model->AnnotatorAbility(-1), model->AnnotatorAbility(4));
}

TEST(GladTest, EmptyDataFitsToTheUniformModel) {
  const AnnotationMatrix m = *AnnotationMatrix::Build(3, 2, 2, {});
  std::unique_ptr<GladModel> model = MakeGlad(2);
  absl::StatusOr<FitReport> report = model->Fit(m, {}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->log_likelihood, 0.0);
  EXPECT_TRUE(report->converged);
  EXPECT_THAT(AllPosteriors(*model, m, {}),
              ElementsAre(0.5, 0.5, 0.5, 0.5, 0.5, 0.5));
  EXPECT_EQ(model->AnnotatorAbility(0), 1.0);  // the prior mean
}

TEST(GladTest, SerializeRestoreGivesIdenticalPosteriors) {
  const GladCrowd crowd = GenerateGladCrowd(400, 3, 5, Abilities(), 0.5, 8);
  std::unique_ptr<GladModel> model = MakeGlad(3);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());
  const std::string blob = model->Serialize();

  // The prior easiness of unseen items travels with the parameters, so a
  // model created with other options restores the same posteriors.
  TruthModelOptions other;
  other.glad_log_easiness_prior_mean = 0.7;
  std::unique_ptr<GladModel> restored = MakeGlad(3, other);
  EXPECT_FALSE(restored->has_parameters());
  ASSERT_THAT(restored->Restore(blob), IsOk());
  EXPECT_TRUE(restored->has_parameters());
  EXPECT_EQ(AllPosteriors(*restored, crowd.matrix, {}),
            AllPosteriors(*model, crowd.matrix, {}));
  std::vector<double> a(3), b(3);
  const std::vector<Entry> labels = {{1, 0}, {30, 1}};
  model->ItemPosteriorForItem(1000, labels, -1, absl::MakeSpan(a));
  restored->ItemPosteriorForItem(1000, labels, -1, absl::MakeSpan(b));
  EXPECT_EQ(a, b);
  for (int32_t j = -1; j <= 21; ++j) {
    EXPECT_EQ(restored->AnnotatorConfusion(j), model->AnnotatorConfusion(j));
  }
  EXPECT_EQ(restored->ClassPrior(), model->ClassPrior());
  EXPECT_EQ(restored->Serialize(), blob);
}

TEST(GladTest, SerializeRestoreOfAnEmptyModel) {
  std::unique_ptr<GladModel> model = MakeGlad(2);
  std::unique_ptr<GladModel> restored = MakeGlad(2);
  ASSERT_THAT(restored->Restore(model->Serialize()), IsOk());
  EXPECT_FALSE(restored->has_parameters());
}

TEST(GladTest, RestoreRejectsCorruptOrMismatchedInput) {
  SyntheticCrowdSpec spec;
  spec.num_items = 100;
  spec.confusions.assign(5, SymmetricConfusion(2, 0.8));
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  std::unique_ptr<GladModel> model = MakeGlad(2);
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
  EXPECT_EQ(AllPosteriors(*model, crowd.matrix, {}), before);

  std::unique_ptr<GladModel> three_classes = MakeGlad(3);
  absl::Status s = three_classes->Restore(blob);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(s.message(), HasSubstr("classes"));

  std::unique_ptr<MajorityVoteModel> mv = MakeMv(2);
  s = mv->Restore(blob);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(s.message(), HasSubstr("method"));
  ASSERT_THAT(mv->Fit(crowd.matrix, {}, false), IsOk());
  s = model->Restore(mv->Serialize());
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(s.message(), HasSubstr("method"));
}

TEST(GladTest, WarmStartFromAConvergedModelConvergesAtOnce) {
  const GladCrowd crowd = GenerateGladCrowd(2000, 3, 5, Abilities(), 0.5, 9);
  std::unique_ptr<GladModel> model = MakeGlad(3);
  absl::StatusOr<FitReport> cold = model->Fit(crowd.matrix, {}, false);
  ASSERT_THAT(cold, IsOk());
  ASSERT_TRUE(cold->converged);

  absl::StatusOr<FitReport> warm = model->Fit(crowd.matrix, {}, true);
  ASSERT_THAT(warm, IsOk());
  RecordProperty("cold_iterations", std::to_string(cold->iterations));
  RecordProperty("warm_iterations", std::to_string(warm->iterations));
  EXPECT_TRUE(warm->converged);
  EXPECT_LE(warm->iterations, 3);
  EXPECT_NEAR(warm->log_likelihood, cold->log_likelihood,
              1e-5 * std::abs(cold->log_likelihood));
}

TEST(GladTest, WarmStartOnACloneLearnsNewAnnotatorsAndItems) {
  SyntheticCrowdSpec spec;
  spec.num_items = 1000;
  spec.confusions.assign(10, SymmetricConfusion(2, 0.85));
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  std::unique_ptr<GladModel> model = MakeGlad(2);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());

  // The same labels, 100 new items labelled by the old annotators, and an
  // eleventh annotator who contradicts the truth on 200 old items.
  std::vector<Annotation> more = crowd.annotations;
  for (int32_t i = 0; i < 200; ++i) more.push_back({i, 10, 1 - crowd.truth[i]});
  for (int32_t i = 1000; i < 1100; ++i) {
    for (int32_t a = 0; a < 5; ++a) more.push_back({i, a, i % 2});
  }
  const AnnotationMatrix grown = *AnnotationMatrix::Build(1100, 11, 2, more);
  std::unique_ptr<TruthModel> clone = model->Clone();
  ASSERT_THAT(clone->Fit(grown, {}, true), IsOk());
  // Clone() is deep: the original knows neither the new annotator nor the
  // new items.
  EXPECT_EQ(model->AnnotatorAbility(10), model->AnnotatorAbility(-1));
  EXPECT_EQ(model->ItemEasiness(1050), 1.0);
  // The new annotator started from the population ability and learned that
  // they are nearly always wrong; the new items, where five annotators
  // agree, are easy.
  EXPECT_LT(clone->AnnotatorConfusion(10)[0], 0.2);
  auto* glad_clone = static_cast<GladModel*>(clone.get());
  EXPECT_GT(glad_clone->ItemEasiness(1050), 1.0);
}

TEST(GladTest, ThreadedFitIsDeterministicAndMatchesSingleThreaded) {
  const GladCrowd crowd = GenerateGladCrowd(60000, 3, 5, Abilities(), 0.5, 10);
  TruthModelOptions threaded;
  threaded.num_threads = 4;
  std::unique_ptr<GladModel> one = MakeGlad(3);
  std::unique_ptr<GladModel> four = MakeGlad(3, threaded);
  std::unique_ptr<GladModel> four_again = MakeGlad(3, threaded);
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
    EXPECT_NEAR(one->AnnotatorAbility(a), four->AnnotatorAbility(a), 1e-7);
  }
  for (int32_t i = 0; i < 60000; i += 997) {
    EXPECT_NEAR(one->ItemEasiness(i), four->ItemEasiness(i), 1e-7);
  }
}

TEST(GladTest, LearnsTheClassPriorOnlyWhenAskedTo) {
  SyntheticCrowdSpec spec;
  spec.num_items = 5000;
  spec.num_classes = 2;
  spec.class_prior = {0.75, 0.25};
  spec.confusions.assign(10, SymmetricConfusion(2, 0.85));
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  std::unique_ptr<GladModel> fixed = MakeGlad(2);
  ASSERT_THAT(fixed->Fit(crowd.matrix, {}, false), IsOk());
  EXPECT_THAT(fixed->ClassPrior(), Each(0.5));
  TruthModelOptions options;
  options.learn_symmetric_class_prior = true;
  std::unique_ptr<GladModel> learned = MakeGlad(2, options);
  ASSERT_THAT(learned->Fit(crowd.matrix, {}, false), IsOk());
  EXPECT_THAT(learned->ClassPrior(),
              ElementsAre(DoubleNear(0.75, 0.02), DoubleNear(0.25, 0.02)));
}

TEST(GladTest, UnfittedModelGivesSoftMajorityVote) {
  std::unique_ptr<GladModel> model = MakeGlad(2);
  EXPECT_FALSE(model->has_parameters());
  std::vector<double> out(2);
  const std::vector<Entry> labels = {{0, 1}, {1, 1}, {2, 0}};
  model->ItemPosterior(labels, -1, absl::MakeSpan(out));
  EXPECT_NEAR(out[1], (2 + 0.01) / (3 + 0.02), 1e-12);
  model->ItemPosteriorForItem(0, labels, 0, absl::MakeSpan(out));
  EXPECT_THAT(out, ElementsAre(1.0, 0.0));
  EXPECT_THAT(model->AnnotatorConfusion(0), ElementsAre(0.5, 0.5, 0.5, 0.5));
}

TEST(GladTest, FitRejectsBadInputAndKeepsTheModel) {
  const AnnotationMatrix m = TinyMatrix();
  std::unique_ptr<GladModel> model = MakeGlad(2);
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

  std::unique_ptr<GladModel> three = MakeGlad(3);
  EXPECT_THAT(three->Fit(m, {}, false),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(model->Serialize(), before);
}

TEST(GladTest, CreateRejectsBadOptions) {
  TruthModelOptions options;
  options.glad_ability_prior_stddev = 0;
  absl::StatusOr<std::unique_ptr<GladModel>> m = GladModel::Create(2, options);
  EXPECT_THAT(m, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(m.status().message(), HasSubstr("glad_ability_prior_stddev"));

  options = TruthModelOptions();
  options.glad_log_easiness_prior_mean = 50;
  m = GladModel::Create(2, options);
  EXPECT_THAT(m, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(m.status().message(),
              HasSubstr("glad_log_easiness_prior_mean"));

  options = TruthModelOptions();
  options.glad_log_easiness_prior_stddev = -1;
  EXPECT_THAT(GladModel::Create(2, options),
              StatusIs(absl::StatusCode::kInvalidArgument));
  options = TruthModelOptions();
  options.glad_ability_prior_mean = NAN;
  EXPECT_THAT(GladModel::Create(2, options),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(GladModel::Create(1, {}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// Promise (glad.h): Fit finds the MAP under b_i ~ N(glad_log_easiness_prior_mean,
// glad_log_easiness_prior_stddev^2). At the MAP each b_i balances the prior's pull
// (b_i - mean) / stddev^2 against the gradient of its labels' log-likelihood,
// sum over the item's labels of (q_i[label] - s) alpha_a beta_i, |.| <= sum |alpha_a| beta_i:
// with 5 labels, abilities of a few units and beta_i ~ 1 that is at most ~25, so with
// stddev = 1e-3 (precision 1e6) every |b_i| <= ~2.5e-5 < 1e-4. With the default stddev 1 the
// same crowd (log easiness drawn with stddev 1) fits easiness far from 1 (control).
TEST(GladTest, ATightEasinessPriorHoldsEveryLogEasinessAtItsMean) {
  const GladCrowd crowd = GenerateGladCrowd(600, 3, 5, Abilities(), 1.0, 31);
  TruthModelOptions tight;
  tight.glad_log_easiness_prior_stddev = 1e-3;
  std::unique_ptr<GladModel> model = MakeGlad(3, tight);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());
  for (int32_t i = 0; i < 600; ++i) {
    EXPECT_NEAR(std::log(model->ItemEasiness(i)), 0.0, 1e-4) << i;
  }
  std::unique_ptr<GladModel> loose = MakeGlad(3);
  ASSERT_THAT(loose->Fit(crowd.matrix, {}, false), IsOk());
  double largest = 0;
  for (int32_t i = 0; i < 600; ++i) {
    largest = std::max(largest, std::abs(std::log(loose->ItemEasiness(i))));
  }
  EXPECT_GT(largest, 0.1);
}

// Promise (glad.h): alpha_a ~ N(glad_ability_prior_mean, glad_ability_prior_stddev^2) at the
// MAP; the pull (alpha_a - mean) / stddev^2 balances sum over a's labels of (q - s) beta_i,
// at most n_a max beta ~ 150 labels x ~20 = 3000 here, so with stddev = 1e-4 (precision 1e8)
// every ability, and the population ability (their label-weighted mean), is within ~3e-5 of
// the prior mean 1.5 (not the default 1), whatever the annotators' true abilities (-0.6 to 3.2).
// With the default prior the abilities spread (control).
TEST(GladTest, ATightAbilityPriorHoldsEveryAbilityAtItsMean) {
  const GladCrowd crowd = GenerateGladCrowd(600, 3, 5, Abilities(), 1.0, 31);
  TruthModelOptions tight;
  tight.glad_ability_prior_mean = 1.5;
  tight.glad_ability_prior_stddev = 1e-4;
  std::unique_ptr<GladModel> model = MakeGlad(3, tight);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());
  for (int32_t a = 0; a < 20; ++a) {
    EXPECT_NEAR(model->AnnotatorAbility(a), 1.5, 1e-3) << a;
  }
  EXPECT_NEAR(model->AnnotatorAbility(-1), 1.5, 1e-3);
  std::unique_ptr<GladModel> loose = MakeGlad(3);
  ASSERT_THAT(loose->Fit(crowd.matrix, {}, false), IsOk());
  EXPECT_GT(loose->AnnotatorAbility(19) - loose->AnnotatorAbility(0), 1.0);
}

// Promise (glad.h / TruthModelOptions): with learn_symmetric_class_prior the class prior is
// (mass_k + r) / (mass + K r), r = prior_smoothing (1), mass_k the posterior mass of class k
// over the items with labels or gold; gold items are clamped in every E-step, so the masses are
// fixed: items 0, 1 (gold 0, labelled), 2 (gold 0, no labels) and 3 (gold 1, labelled) give
// mass = (3, 1) and the prior (3 + 1) / (4 + 2) = 2/3, 1/3. (Unsmoothed: 3/4; without the
// unlabelled gold item: 3/5.) K = 3 checks that each class adds r to the denominator.
TEST(GladTest, TheLearnedClassPriorIsTheSmoothedGoldMass) {
  const AnnotationMatrix m =
      *AnnotationMatrix::Build(4, 1, 2, {{0, 0, 0}, {1, 0, 0}, {3, 0, 1}});
  TruthModelOptions options;
  options.learn_symmetric_class_prior = true;
  std::unique_ptr<GladModel> model = MakeGlad(2, options);
  ASSERT_THAT(model->Fit(m, std::vector<int32_t>{0, 0, 0, 1}, false), IsOk());
  EXPECT_THAT(model->ClassPrior(),
              ElementsAre(DoubleNear(2.0 / 3, 1e-12), DoubleNear(1.0 / 3, 1e-12)));
  // K = 3, gold (0, 0, 1), each labelled: mass = (2, 1, 0), the prior (3, 2, 1) / (3 + 3).
  const AnnotationMatrix three =
      *AnnotationMatrix::Build(3, 1, 3, {{0, 0, 0}, {1, 0, 0}, {2, 0, 1}});
  std::unique_ptr<GladModel> model3 = MakeGlad(3, options);
  ASSERT_THAT(model3->Fit(three, std::vector<int32_t>{0, 0, 1}, false), IsOk());
  EXPECT_THAT(model3->ClassPrior(),
              ElementsAre(DoubleNear(0.5, 1e-12), DoubleNear(1.0 / 3, 1e-12),
                          DoubleNear(1.0 / 6, 1e-12)));
}

// Promise (glad.h): an item created since the fit, or any id out of the fitted range, gets the
// prior easiness exp(glad_log_easiness_prior_mean) of the options of the fit. A blob fitted
// with the default mean 0 restored into a model whose options say 0.7 keeps the blob's prior
// easiness 1 until it is refitted; a warm refit then gives exp(0.7).
TEST(GladTest, AWarmFitTakesThePriorEasinessOfItsOwnOptions) {
  const GladCrowd crowd = GenerateGladCrowd(200, 2, 5, Abilities(), 0.5, 12);
  std::unique_ptr<GladModel> model = MakeGlad(2);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());
  TruthModelOptions other;
  other.glad_log_easiness_prior_mean = 0.7;
  std::unique_ptr<GladModel> refitted = MakeGlad(2, other);
  ASSERT_THAT(refitted->Restore(model->Serialize()), IsOk());
  EXPECT_EQ(refitted->ItemEasiness(-1), 1.0);
  ASSERT_THAT(refitted->Fit(crowd.matrix, {}, true), IsOk());
  EXPECT_NEAR(refitted->ItemEasiness(-1), std::exp(0.7), 1e-12);
  EXPECT_NEAR(refitted->ItemEasiness(200), std::exp(0.7), 1e-12);
}

// A GLAD blob, K = 2: prior, abilities (population first), log easiness (prior first).
std::string GladBlob(const std::vector<double>& prior, const std::vector<double>& ability,
                     const std::vector<double>& log_easiness) {
  ByteWriter writer;
  WriteModelHeader(writer, GladModel::kMethod, true);
  writer.WriteU32(2);
  writer.WriteU32(static_cast<uint32_t>(ability.size() - 1));
  writer.WriteU32(static_cast<uint32_t>(log_easiness.size() - 1));
  for (const std::vector<double>* v : {&prior, &ability, &log_easiness}) {
    for (double x : *v) writer.WriteF64(x);
  }
  return writer.Finish();
}

// Promise (glad.h): abilities stay within +-kMaxAbsAbility and log easiness within
// +-kMaxAbsLogEasiness, and the class prior is a distribution: Restore accepts the bounds
// themselves and refuses, with INVALID_ARGUMENT and the model unchanged, a well-formed,
// checksummed blob with a value beyond them, a prior probability outside (0, 1], a prior that
// does not sum to 1, or NaN.
TEST(GladTest, RestoreRefusesParametersOutOfTheirRange) {
  std::unique_ptr<GladModel> model = MakeGlad(2);
  ASSERT_THAT(model->Restore(GladBlob({0.25, 0.75}, {0.5, GladModel::kMaxAbsAbility},
                                      {0.0, -GladModel::kMaxAbsLogEasiness})),
              IsOk());
  EXPECT_EQ(model->AnnotatorAbility(0), GladModel::kMaxAbsAbility);
  EXPECT_EQ(model->ItemEasiness(0), std::exp(-GladModel::kMaxAbsLogEasiness));
  const std::string good = model->Serialize();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<std::string> bad = {
      GladBlob({0.25, 0.75}, {0.5, 1000.5}, {0.0, 0.0}),
      GladBlob({0.25, 0.75}, {-1000.5, 1.0}, {0.0, 0.0}),
      GladBlob({0.25, 0.75}, {0.5, nan}, {0.0, 0.0}),
      GladBlob({0.25, 0.75}, {0.5, 1.0}, {0.0, 30.5}),
      GladBlob({0.25, 0.75}, {0.5, 1.0}, {-30.5, 0.0}),
      GladBlob({0.25, 0.75}, {0.5, 1.0}, {0.0, nan}),
      GladBlob({0.5, 0.6}, {0.5, 1.0}, {0.0, 0.0}),
      GladBlob({0.0, 1.0}, {0.5, 1.0}, {0.0, 0.0}),
      GladBlob({1.5, -0.5}, {0.5, 1.0}, {0.0, 0.0}),
      GladBlob({nan, 0.5}, {0.5, 1.0}, {0.0, 0.0})};
  for (size_t i = 0; i < bad.size(); ++i) {
    EXPECT_THAT(model->Restore(bad[i]), StatusIs(absl::StatusCode::kInvalidArgument)) << i;
  }
  EXPECT_TRUE(model->Serialize() == good) << "a refused Restore changed the model";
}

// Promise (glad.h): FitReport::log_likelihood is the marginal log-likelihood, here of the
// parameters a warm fit starts from (one iteration, so the E-step is of the restored
// parameters). K = 3, uniform prior, abilities 2 (annotator 0) and 1 (annotator 1), no fitted
// items (easiness e^0 = 1); an annotator of ability alpha is right with probability
// sigmoid(alpha) and gives each wrong class with probability (1 - sigmoid(alpha)) / 2.
//   item 0, no gold, both say 0: p = 1/3 [s2 s1 + 2 (1 - s2)/2 (1 - s1)/2];
//   item 1, gold 1, both say 0:  p = 1/3 (1 - s2)/2 (1 - s1)/2;
//   item 2, gold 2, no labels:   p = 1/3.
TEST(GladTest, TheLogLikelihoodIsTheMarginalOfTheLabelsAndGold) {
  ByteWriter writer;
  WriteModelHeader(writer, GladModel::kMethod, true);
  writer.WriteU32(3);  // classes
  writer.WriteU32(2);  // annotators
  writer.WriteU32(0);  // items
  for (double v : {1.0 / 3, 1.0 / 3, 1.0 / 3, 1.5, 2.0, 1.0, 0.0}) writer.WriteF64(v);
  TruthModelOptions one_iteration;
  one_iteration.max_iterations = 1;
  std::unique_ptr<GladModel> model = MakeGlad(3, one_iteration);
  ASSERT_THAT(model->Restore(writer.Finish()), IsOk());
  const AnnotationMatrix m =
      *AnnotationMatrix::Build(3, 2, 3, {{0, 0, 0}, {0, 1, 0}, {1, 0, 0}, {1, 1, 0}});
  absl::StatusOr<FitReport> report = model->Fit(m, std::vector<int32_t>{-1, 1, 2}, true);
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->iterations, 1);
  const double s2 = Sigmoid(2.0), s1 = Sigmoid(1.0);
  const double wrong = (1 - s2) / 2 * (1 - s1) / 2;
  const double expected =
      std::log((s2 * s1 + 2 * wrong) / 3) + std::log(wrong / 3) + std::log(1.0 / 3);
  EXPECT_NEAR(report->log_likelihood, expected, 1e-12);
}

// The set-up of the two tests of an item that lost its labels: a cold fit of 40 items × 5
// annotators in which item 0 is easy (five agreeing labels), then a warm fit of the same data
// without item 0's labels.
void FitThenWarmFitWithoutItem0(std::unique_ptr<GladModel>* fitted) {
  std::vector<Annotation> annotations;
  for (int32_t i = 0; i < 40; ++i) {
    for (int32_t a = 0; a < 5; ++a) {
      annotations.push_back({i, a, (i + (a == 4 && i % 3 == 0 ? 1 : 0)) % 2});
    }
  }
  std::unique_ptr<GladModel> model = MakeGlad(2);
  ASSERT_THAT(model->Fit(*AnnotationMatrix::Build(40, 5, 2, annotations), {}, false), IsOk());
  ASSERT_GT(model->ItemEasiness(0), 1.1);
  std::vector<Annotation> without_item_0;
  for (const Annotation& a : annotations) {
    if (a.item != 0) without_item_0.push_back(a);
  }
  ASSERT_THAT(model->Fit(*AnnotationMatrix::Build(40, 5, 2, without_item_0), {}, true), IsOk());
  *fitted = std::move(model);
}

TEST(GladTest, AWarmFitGivesAnItemThatLostItsLabelsThePriorEasiness) {
  // truth_model.h: items without labels get the prior mean log easiness (0 by default, so
  // easiness 1). Item 0 is easy after the first fit (five agreeing labels); a warm fit on the
  // same data without item 0's labels must not keep that easiness.
  std::unique_ptr<GladModel> model;
  ASSERT_NO_FATAL_FAILURE(FitThenWarmFitWithoutItem0(&model));
  EXPECT_EQ(model->ItemEasiness(0), 1.0);
}

TEST(GladTest, AConvergedFitSatisfiesTheAbilityStationarityCondition) {
  // glad.h: the ability step maximises, given the easiness, sum over the annotator's labels of
  // [q_i alpha beta_i - softplus(alpha beta_i)] - (alpha - mu)^2 / (2 sigma^2), q_i = p(label
  // correct). At a converged fit its derivative,
  //   sum_i beta_i (q_i - sigmoid(alpha beta_i)) - (alpha - mu) / sigma^2,
  // is 0, evaluated here from the fitted abilities, easiness and posteriors (mu = 1, sigma = 1).
  // Without the prior's term the abilities would solve the data part alone and the derivative
  // would be -(alpha - 1), far from 0 for abilities up to 3.2.
  const GladCrowd crowd = GenerateGladCrowd(400, 2, 5, Abilities(), 0.5, 11);
  TruthModelOptions options;
  options.tolerance = 1e-12;
  options.max_iterations = 2000;
  std::unique_ptr<GladModel> model = MakeGlad(2, options);
  absl::StatusOr<FitReport> report = model->Fit(crowd.matrix, {}, false);
  ASSERT_THAT(report, IsOk());
  ASSERT_TRUE(report->converged);
  std::vector<double> q(2);
  for (int32_t a = 0; a < 20; ++a) {
    const double alpha = model->AnnotatorAbility(a);
    double derivative = -(alpha - 1.0);
    for (const Entry& e : crowd.matrix.LabelsOfAnnotator(a)) {
      const int32_t item = e.other;
      model->ItemPosteriorForItem(item, crowd.matrix.LabelsOfItem(item), -1,
                                  absl::MakeSpan(q));
      const double beta = model->ItemEasiness(item);
      derivative += beta * (q[e.label] - Sigmoid(alpha * beta));
    }
    EXPECT_NEAR(derivative, 0.0, 1e-3) << "annotator " << a << ", ability " << alpha;
  }
}

// glad.h: Fit runs EM for the MAP parameters under the Gaussian priors (defaults N(1, 1) on
// alpha, N(0, 1) on b = log beta), each M-step maximising the expected complete-data log
// posterior Q over one block given the other. At convergence the posteriors q no longer move,
// so every parameter is a stationary point of its term of Q:
//   d/db_i: beta_i sum_j q_ij alpha_j - sum_j sigmoid(alpha_j beta_i) alpha_j beta_i - b_i = 0,
//   d/dalpha_a: sum_i q_ia beta_i - sum_i sigmoid(alpha_a beta_i) beta_i - (alpha_a - 1) = 0,
// q_ij = p(label of annotator j on item i is correct). Checked on a crowd of 30 binary items
// and 5 annotators of error rates 0 to 0.4 (to the accuracy of the Newton steps' stopping rule).
TEST(GladTest, AConvergedFitIsAStationaryPointOfTheLogPosterior) {
  std::vector<Annotation> annotations;
  for (int32_t i = 0; i < 30; ++i) {
    for (int32_t a = 0; a < 5; ++a) {
      const bool wrong = (i * 7 + a * 3) % 10 < a;
      annotations.push_back({i, a, wrong ? 1 - i % 2 : i % 2});
    }
  }
  const AnnotationMatrix m = *AnnotationMatrix::Build(30, 5, 2, annotations);
  TruthModelOptions options;
  options.tolerance = 1e-15;
  options.max_iterations = 3000;
  std::unique_ptr<GladModel> model = MakeGlad(2, options);
  ASSERT_THAT(model->Fit(m, {}, false), IsOk());
  const auto sigmoid = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  std::vector<double> ability_gradient(5, 0.0);
  for (int32_t a = 0; a < 5; ++a) ability_gradient[a] = -(model->AnnotatorAbility(a) - 1.0);
  for (int32_t i = 0; i < 30; ++i) {
    const absl::Span<const Entry> labels = m.LabelsOfItem(i);
    std::vector<double> q(2);
    model->ItemPosteriorForItem(i, labels, -1, absl::MakeSpan(q));
    const double beta = model->ItemEasiness(i);
    double gradient = -std::log(beta);
    for (const Entry& e : labels) {
      const double alpha = model->AnnotatorAbility(e.other);
      gradient += beta * alpha * (q[e.label] - sigmoid(alpha * beta));
      ability_gradient[e.other] += beta * (q[e.label] - sigmoid(alpha * beta));
    }
    EXPECT_NEAR(gradient, 0.0, 1e-3) << "item " << i;
  }
  for (int32_t a = 0; a < 5; ++a) EXPECT_NEAR(ability_gradient[a], 0.0, 1e-3) << "annotator " << a;
}

// glad.h: before a fit ItemEasiness is the prior easiness exp(glad_log_easiness_prior_mean) and
// AnnotatorAbility the prior mean, within +-kMaxAbsAbility like every ability.
TEST(GladTest, BeforeAFitServesThePriorEasinessAndTheClampedPriorAbility) {
  TruthModelOptions options;
  options.glad_log_easiness_prior_mean = 0.5;
  options.glad_ability_prior_mean = 2 * GladModel::kMaxAbsAbility;
  std::unique_ptr<GladModel> model = MakeGlad(2, options);
  EXPECT_DOUBLE_EQ(model->ItemEasiness(0), std::exp(0.5));
  EXPECT_EQ(model->AnnotatorAbility(0), GladModel::kMaxAbsAbility);
}

// Restore refuses a class prior that is not a distribution: (0.5, 0.5002) sums to 1.0002, far
// beyond rounding (the control, (0.5, 0.5), restores).
TEST(GladTest, RestoreRefusesAClassPriorThatDoesNotSumToOne) {
  const auto blob = [](double second) {
    ByteWriter writer;
    WriteModelHeader(writer, GladModel::kMethod, true);
    writer.WriteU32(2);  // classes
    writer.WriteU32(1);  // annotators
    writer.WriteU32(1);  // items
    writer.WriteF64(0.5);
    writer.WriteF64(second);
    writer.WriteF64(1.0);  // population ability
    writer.WriteF64(2.0);  // annotator 0
    writer.WriteF64(0.0);  // prior log easiness
    writer.WriteF64(0.3);  // item 0
    return writer.Finish();
  };
  std::unique_ptr<GladModel> model = MakeGlad(2);
  ASSERT_THAT(model->Restore(blob(0.5)), IsOk());
  EXPECT_THAT(model->Restore(blob(0.5002)), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(model->AnnotatorAbility(0), 2.0);
}

// glad.h: a warm fit starts new annotators with the population ability and new items with the
// prior easiness of the current options. So a warm fit from a model that lacks annotator 1 and
// item 1 is, bit for bit, the warm fit from one that has them at exactly those values
// (population ability 2, glad_log_easiness_prior_mean 0.5; one iteration).
TEST(GladTest, AWarmFitStartsNewAnnotatorsAndItemsAtThePopulationAndPrior) {
  const auto blob = [](const std::vector<double>& abilities,
                       const std::vector<double>& log_easiness) {
    ByteWriter writer;
    WriteModelHeader(writer, GladModel::kMethod, true);
    writer.WriteU32(2);  // classes
    writer.WriteU32(static_cast<uint32_t>(abilities.size() - 1));
    writer.WriteU32(static_cast<uint32_t>(log_easiness.size() - 1));
    writer.WriteF64(0.5);
    writer.WriteF64(0.5);
    for (double v : abilities) writer.WriteF64(v);
    for (double v : log_easiness) writer.WriteF64(v);
    return writer.Finish();
  };
  TruthModelOptions options;
  options.glad_log_easiness_prior_mean = 0.5;
  options.max_iterations = 1;
  std::unique_ptr<GladModel> lacking = MakeGlad(2, options);
  ASSERT_THAT(lacking->Restore(blob({2.0, 1.5}, {0.5, 0.3})), IsOk());
  std::unique_ptr<GladModel> explicit_start = MakeGlad(2, options);
  ASSERT_THAT(explicit_start->Restore(blob({2.0, 1.5, 2.0}, {0.5, 0.3, 0.5})), IsOk());
  const AnnotationMatrix m =
      *AnnotationMatrix::Build(2, 2, 2, {{0, 0, 0}, {0, 1, 1}, {1, 0, 1}, {1, 1, 1}});
  ASSERT_THAT(lacking->Fit(m, {}, true), IsOk());
  ASSERT_THAT(explicit_start->Fit(m, {}, true), IsOk());
  for (int32_t a = -1; a < 2; ++a) {
    EXPECT_EQ(lacking->AnnotatorAbility(a), explicit_start->AnnotatorAbility(a)) << a;
  }
  for (int32_t i = -1; i < 2; ++i) {
    EXPECT_EQ(lacking->ItemEasiness(i), explicit_start->ItemEasiness(i)) << i;
  }
}

// truth_model.h: Clone() is a deep copy, parameters included; Restore refuses a blob with bytes
// after the model (under a valid checksum) and keeps no parameters from it.
TEST(GladTest, CloneKeepsTheParametersAndRestoreRefusesTrailingBytes) {
  const AnnotationMatrix m =
      *AnnotationMatrix::Build(2, 2, 2, {{0, 0, 0}, {0, 1, 0}, {1, 0, 1}, {1, 1, 0}});
  std::unique_ptr<GladModel> model = MakeGlad(2);
  ASSERT_THAT(model->Fit(m, {}, false), IsOk());
  const std::string blob = model->Serialize();
  const std::unique_ptr<TruthModel> clone = model->Clone();
  EXPECT_TRUE(clone->has_parameters());
  EXPECT_EQ(clone->Serialize(), blob);
  EXPECT_EQ(AllPosteriors(*clone, m, {}), AllPosteriors(*model, m, {}));
  std::unique_ptr<GladModel> restored = MakeGlad(2);
  EXPECT_THAT(restored->Restore(WithTrailingBytes(blob)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(restored->has_parameters());
}

// truth_model.h: convergence compares the log-likelihoods of two consecutive E-steps, so the
// first iteration (no previous E-step) never converges, even with a tolerance of 10 that any
// relative change meets: the fit stops at iteration 2.
TEST(GladTest, TheFirstIterationNeverConverges) {
  TruthModelOptions loose;
  loose.tolerance = 10.0;
  std::unique_ptr<GladModel> model = MakeGlad(2, loose);
  ExpectTheFirstIterationNeverConverges(*model);
}

// truth_model.h: ItemPosterior writes a probability distribution whatever the labels. 500 labels
// of class 1 from annotators outside the fit (population ability 2, prior easiness 1: each adds 2
// to class 1, beyond exp's range in all) give class 1 probability 1, not an overflow.
TEST(GladTest, ManyAgreeingLabelsGiveAFinitePosterior) {
  ByteWriter writer;
  WriteModelHeader(writer, GladModel::kMethod, true);
  writer.WriteU32(2);  // classes
  writer.WriteU32(0);  // annotators: every id gets the population ability
  writer.WriteU32(0);  // items
  writer.WriteF64(0.5);
  writer.WriteF64(0.5);
  writer.WriteF64(2.0);  // population ability
  writer.WriteF64(0.0);  // prior log easiness
  std::unique_ptr<GladModel> model = MakeGlad(2);
  ASSERT_THAT(model->Restore(writer.Finish()), IsOk());
  std::vector<Entry> labels;
  for (int32_t a = 0; a < 500; ++a) labels.push_back({a, 1});
  std::vector<double> out(2);
  model->ItemPosterior(labels, -1, absl::MakeSpan(out));
  EXPECT_EQ(out[0], 0.0);
  EXPECT_EQ(out[1], 1.0);
}

// glad.h: each EM iteration increases the log posterior (generalised EM): with theta_t the
// parameters after t iterations, log p(labels | theta_t) + log N(alpha; 1, 1) + log N(b; 0, 1)
// (up to constants) does not decrease in t. log p(labels | theta_t) is the log-likelihood that
// the fit with max_iterations t + 1 reports (its last E-step runs at theta_t). A GLAD crowd of
// 60 items, 3 classes, 3 labels each, abilities from -0.6 to 3.2, spread easiness.
TEST(GladTest, EachIterationIncreasesTheLogPosterior) {
  const GladCrowd crowd = GenerateGladCrowd(60, 3, 3, Abilities(), 1.5, 21);
  const AnnotationMatrix& m = crowd.matrix;
  double previous = -std::numeric_limits<double>::infinity();
  for (int t = 1; t <= 12; ++t) {
    TruthModelOptions options;
    options.tolerance = 0.0;
    options.max_iterations = t;
    std::unique_ptr<GladModel> at_t = MakeGlad(3, options);
    ASSERT_THAT(at_t->Fit(m, {}, false), IsOk());
    options.max_iterations = t + 1;
    std::unique_ptr<GladModel> next = MakeGlad(3, options);
    absl::StatusOr<FitReport> report = next->Fit(m, {}, false);
    ASSERT_THAT(report, IsOk());
    double log_posterior = report->log_likelihood;
    for (int32_t a = 0; a < m.num_annotators(); ++a) {
      const double d = at_t->AnnotatorAbility(a) - 1.0;
      log_posterior -= 0.5 * d * d;
    }
    for (int32_t i = 0; i < m.num_items(); ++i) {
      const double b = std::log(at_t->ItemEasiness(i));
      log_posterior -= 0.5 * b * b;
    }
    EXPECT_GE(log_posterior, previous - 1e-9 * std::abs(previous)) << "iteration " << t;
    previous = log_posterior;
  }
}

// glad.h: each b_i takes a Newton step "clamped to +-2 and halved until the term increases".
// A warm fit (one iteration) from restored parameters: population ability 0.3 for every
// annotator, prior log easiness 0, class prior (1/2, 1/2); one item, 223 labels of class 0 and
// 77 of class 1, each from its own annotator; log easiness prior N(0, 2^2) (precision 1/4).
// The E-step gives p(class 0) = sigmoid(146 * 0.3) = 1 - 1e-19, so the item's term is
//   f(b) = e^b * 0.3 * 223 - 300 softplus(0.3 e^b) - b^2 / 8,
// with gradient 0.3 (223 - 300 sigmoid(0.3)) = 15.20 at b = 0 and the Gauss-Newton curvature
// 300 * 0.09 * w(0.3) + 1/4 = 6.85 (w = sigmoid (1 - sigmoid)): the Newton step 2.22 is
// clamped to 2, where f(2) = -202.2 < f(0) = -189.4; halved to 1, f(1) = -172.8 > f(0). So the
// item's log easiness after the iteration is 1 exactly.
TEST(GladTest, TheEasinessStepIsClampedToTwoAndHalvedUntilTheTermIncreases) {
  ByteWriter writer;
  WriteModelHeader(writer, GladModel::kMethod, true);
  writer.WriteU32(2);  // classes
  writer.WriteU32(0);  // annotators: every one starts at the population ability
  writer.WriteU32(0);  // items
  for (double v : {0.5, 0.5, 0.3, 0.0}) writer.WriteF64(v);
  TruthModelOptions options;
  options.max_iterations = 1;
  options.glad_log_easiness_prior_stddev = 2.0;
  std::unique_ptr<GladModel> model = MakeGlad(2, options);
  ASSERT_THAT(model->Restore(writer.Finish()), IsOk());
  std::vector<Annotation> labels;
  for (int32_t a = 0; a < 300; ++a) labels.push_back({0, a, a < 223 ? 0 : 1});
  ASSERT_THAT(model->Fit(*AnnotationMatrix::Build(1, 300, 2, labels), {}, true), IsOk());
  EXPECT_EQ(model->ItemEasiness(0), std::exp(1.0));
}

// glad.h: abilities stay within +-kMaxAbsAbility whatever the options; an annotator without
// labels gets the population ability, which without any label is the (clamped) prior mean.
// A prior mean of 2 kMaxAbsAbility on data without labels: every ability is kMaxAbsAbility,
// and the fitted model serialises to a blob that Restore accepts.
TEST(GladTest, AFitWithAPriorMeanBeyondTheBoundKeepsAbilitiesInRange) {
  TruthModelOptions options;
  options.glad_ability_prior_mean = 2 * GladModel::kMaxAbsAbility;
  std::unique_ptr<GladModel> model = MakeGlad(2, options);
  ASSERT_THAT(model->Fit(*AnnotationMatrix::Build(2, 2, 2, {}), {}, false), IsOk());
  for (int32_t a : {-1, 0, 1, 2}) {
    EXPECT_EQ(model->AnnotatorAbility(a), GladModel::kMaxAbsAbility) << a;
  }
  std::unique_ptr<GladModel> restored = MakeGlad(2);
  EXPECT_THAT(restored->Restore(model->Serialize()), IsOk());
}

// glad.h: an item without labels gets the prior easiness, and the easiness of the items of the
// fit is part of the serialized parameters. So after a warm fit in which item 0 lost its labels
// (as in AWarmFitGivesAnItemThatLostItsLabelsThePriorEasiness), a restored copy also gives it
// the prior easiness 1, not the easiness of the earlier fit.
TEST(GladTest, AnItemThatLostItsLabelsIsSerializedWithThePriorEasiness) {
  std::unique_ptr<GladModel> model;
  ASSERT_NO_FATAL_FAILURE(FitThenWarmFitWithoutItem0(&model));
  std::unique_ptr<GladModel> restored = MakeGlad(2);
  ASSERT_THAT(restored->Restore(model->Serialize()), IsOk());
  EXPECT_EQ(restored->ItemEasiness(0), 1.0);
}

// glad.h: the easiness step is a Newton step with the exact curvature where the item's term is
// concave. A warm fit (one iteration) from restored parameters: population ability 2 for every
// annotator, prior log easiness 0, class prior (1/2, 1/2); one item that annotator 0 labels 0
// and annotator 1 labels 1, so the E-step gives (1/2, 1/2) and the term is
//   f(b) = e^b * 2 - 2 softplus(2 e^b) - b^2 / 2,
// with f'(0) = 2 - 4 s and -f''(0) = 8 s (1 - s) + 1 - (2 - 4 s) (s = sigmoid(2); f'(0) < 0,
// the term is concave): the Newton step f'(0) / -f''(0) = -0.4529 increases f, so it is the
// item's new log easiness b. (Without the -(2 - 4 s) in the curvature the step would be -0.83.)
// Then each ability, given the new beta = e^b, with the prior mean set to 2 (the start): its
// term alpha beta / 2 - softplus(alpha beta) - (alpha - 2)^2 / 2 has gradient
// beta (1/2 - sigmoid(2 beta)) and curvature w(2 beta) beta^2 + 1 at alpha = 2, and the Newton
// step, -0.167, is below log 2 / beta, so it is taken as is (glad.h).
TEST(GladTest, TheEasinessStepUsesTheExactCurvatureWhereTheTermIsConcave) {
  ByteWriter writer;
  WriteModelHeader(writer, GladModel::kMethod, true);
  writer.WriteU32(2);  // classes
  writer.WriteU32(0);  // annotators: every one starts at the population ability
  writer.WriteU32(0);  // items
  for (double v : {0.5, 0.5, 2.0, 0.0}) writer.WriteF64(v);
  TruthModelOptions options;
  options.max_iterations = 1;
  options.glad_ability_prior_mean = 2.0;
  std::unique_ptr<GladModel> model = MakeGlad(2, options);
  ASSERT_THAT(model->Restore(writer.Finish()), IsOk());
  ASSERT_THAT(model->Fit(*AnnotationMatrix::Build(1, 2, 2, {{0, 0, 0}, {0, 1, 1}}), {}, true),
              IsOk());
  const double s = Sigmoid(2.0);
  const double gradient = 2 - 4 * s;
  const double curvature = 8 * s * (1 - s) + 1 - gradient;
  EXPECT_NEAR(std::log(model->ItemEasiness(0)), gradient / curvature, 1e-12);
  const double beta = std::exp(gradient / curvature);
  const double s_beta = Sigmoid(2 * beta);
  const double step = beta * (0.5 - s_beta) / (s_beta * (1 - s_beta) * beta * beta + 1);
  EXPECT_NEAR(step, -0.167, 1e-3);
  EXPECT_NEAR(model->AnnotatorAbility(0), 2 + step, 1e-12);
  EXPECT_NEAR(model->AnnotatorAbility(1), 2 + step, 1e-12);
}

// glad.h: an ability step delta with |delta| max_i beta_i > log 2 is replaced by up to
// kAbilityNewtonSteps (3) checked Newton steps over the annotator's labels. A warm fit (one
// iteration) from restored parameters, population ability 1 (the prior mean): annotator 0
// labels 100 gold items of class 0 with their class, so every label is correct (q = 1), and a
// log easiness prior of stddev 1e-3 holds every beta_i at 1 (to ~3e-7). The ability's term is
//   g(alpha) = 100 alpha - 100 softplus(alpha) - (alpha - 1)^2 / 2,
// g'(alpha) = 100 (1 - s) - (alpha - 1), -g''(alpha) = 100 s (1 - s) + 1 (s = sigmoid(alpha)).
// The first Newton step from 1 is 1.30 > log 2, so three steps are taken, each increasing g:
// 1 -> 2.302 -> 3.143 -> 3.544 (a single unchecked step would stop at 2.302).
TEST(GladTest, ALargeAbilityStepIsReplacedByThreeCheckedNewtonSteps) {
  ByteWriter writer;
  WriteModelHeader(writer, GladModel::kMethod, true);
  writer.WriteU32(2);  // classes
  writer.WriteU32(0);  // annotators: annotator 0 starts at the population ability
  writer.WriteU32(0);  // items
  for (double v : {0.5, 0.5, 1.0, 0.0}) writer.WriteF64(v);
  TruthModelOptions options;
  options.max_iterations = 1;
  options.glad_log_easiness_prior_stddev = 1e-3;
  std::unique_ptr<GladModel> model = MakeGlad(2, options);
  ASSERT_THAT(model->Restore(writer.Finish()), IsOk());
  std::vector<Annotation> labels;
  for (int32_t i = 0; i < 100; ++i) labels.push_back({i, 0, 0});
  const std::vector<int32_t> gold(100, 0);
  ASSERT_THAT(model->Fit(*AnnotationMatrix::Build(100, 1, 2, labels), gold, true), IsOk());
  double alpha = 1.0;
  for (int step = 0; step < 3; ++step) {
    const double s = Sigmoid(alpha);
    alpha += (100 * (1 - s) - (alpha - 1)) / (100 * s * (1 - s) + 1);
  }
  EXPECT_NEAR(alpha, 3.544, 1e-3);
  EXPECT_NEAR(model->AnnotatorAbility(0), alpha, 1e-4);
}

// Promise (glad.h): b_i ~ N(glad_log_easiness_prior_mean, glad_log_easiness_prior_stddev^2);
// as in ATightEasinessPriorHoldsEveryLogEasinessAtItsMean, a stddev of 1e-3 holds every fitted
// b_i within ~4e-5 (beta_i ~ e^0.5) of the mean, here 0.5: the prior pulls towards its mean.
TEST(GladTest, ATightEasinessPriorHoldsEveryLogEasinessAtANonZeroMean) {
  const GladCrowd crowd = GenerateGladCrowd(600, 3, 5, Abilities(), 1.0, 31);
  TruthModelOptions tight;
  tight.glad_log_easiness_prior_mean = 0.5;
  tight.glad_log_easiness_prior_stddev = 1e-3;
  std::unique_ptr<GladModel> model = MakeGlad(3, tight);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());
  for (int32_t i = 0; i < 600; ++i) {
    EXPECT_NEAR(std::log(model->ItemEasiness(i)), 0.5, 1e-4) << i;
  }
}

// glad.h: EM stops when the *relative* change of the marginal log-likelihood falls below
// options.tolerance (1e-3 here). Gold items without labels each add the constant log p(gold) =
// log(1/2) to the log-likelihood (truth_model.h) and change nothing else (uniform class prior):
// 100,000 of them make |log-likelihood| > 69,000, so any change of the 40 labelled items' part
// between iterations 1 and 2 (a few nats at most) is below 1e-3 of it, and the fit stops at
// iteration 2 (the first never converges). Without them the same labels need more iterations.
TEST(GladTest, ConvergenceIsJudgedOnTheRelativeChangeOfTheLogLikelihood) {
  std::vector<Annotation> annotations;
  for (int32_t i = 0; i < 40; ++i) {
    for (int32_t a = 0; a < 5; ++a) {
      annotations.push_back({i, a, (i + (a == 4 && i % 3 == 0 ? 1 : 0)) % 2});
    }
  }
  TruthModelOptions options;
  options.tolerance = 1e-3;
  std::unique_ptr<GladModel> alone = MakeGlad(2, options);
  absl::StatusOr<FitReport> control =
      alone->Fit(*AnnotationMatrix::Build(40, 5, 2, annotations), {}, false);
  ASSERT_THAT(control, IsOk());
  EXPECT_GT(control->iterations, 2);
  constexpr int32_t kGoldItems = 100000;
  std::vector<int32_t> gold(40 + kGoldItems, 0);
  std::fill(gold.begin(), gold.begin() + 40, -1);
  std::unique_ptr<GladModel> with_gold = MakeGlad(2, options);
  absl::StatusOr<FitReport> report =
      with_gold->Fit(*AnnotationMatrix::Build(40 + kGoldItems, 5, 2, annotations), gold, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_LT(report->log_likelihood, kGoldItems * std::log(0.5));
  EXPECT_TRUE(report->converged);
  EXPECT_EQ(report->iterations, 2);
}

// glad.h: abilities may lie anywhere within +-kMaxAbsAbility (1000), and a large ability step
// is taken by checked Newton steps. A warm fit (one iteration) from restored parameters,
// population ability 29.5, with the ability prior N(31, 1): annotator 0 labels 4 gold items
// with their class (q = 1). At alpha ~ 30 every sigmoid(alpha beta) is 1 to within 1e-13, so the
// item terms do not move b from 0 (beta = 1) and the ability's term is, to that accuracy, the
// prior's -(alpha - 31)^2 / 2: the Newton step 1.5 (> log 2, so checked) lands on 31.
TEST(GladTest, AnAbilityStepMayCrossThirty) {
  ByteWriter writer;
  WriteModelHeader(writer, GladModel::kMethod, true);
  writer.WriteU32(2);  // classes
  writer.WriteU32(0);  // annotators: annotator 0 starts at the population ability
  writer.WriteU32(0);  // items
  for (double v : {0.5, 0.5, 29.5, 0.0}) writer.WriteF64(v);
  TruthModelOptions options;
  options.glad_ability_prior_mean = 31.0;
  options.max_iterations = 1;
  std::unique_ptr<GladModel> model = MakeGlad(2, options);
  ASSERT_THAT(model->Restore(writer.Finish()), IsOk());
  const AnnotationMatrix m =
      *AnnotationMatrix::Build(4, 1, 2, {{0, 0, 0}, {1, 0, 0}, {2, 0, 0}, {3, 0, 0}});
  ASSERT_THAT(model->Fit(m, std::vector<int32_t>(4, 0), true), IsOk());
  EXPECT_NEAR(model->AnnotatorAbility(0), 31.0, 1e-9);
}

}  // namespace
}  // namespace verity::models

// Synthetic checks of the claims of the papers behind the neural models, with fixed seeds.
// Each case builds a crowd where the paper's modelling assumption holds and compares the
// method with the baseline the paper compares against; the measured numbers are in
// docs/EVALUATION.md ("Synthetic checks of the papers' claims").
//
// Three claims hold here and are asserted: trace_reg, cmm, and lia when items carry features
// (without features it does not). conal's does not hold, with or without features: those cases
// are DISABLED_ measurements, run with --gtest_also_run_disabled_tests, that assert only that
// the fits run; they are kept so that the comparison can be re-run when the models change.
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "models/annotation_matrix.h"
#include "models/testing/synthetic_crowd.h"
#include "models/truth_model.h"
#include "models/truth_model_factory.h"

namespace verity::models {
namespace {

struct Crowd {
  AnnotationMatrix matrix;
  std::vector<int32_t> truth;
  std::vector<std::vector<double>> confusions;  // per annotator, K x K (when item-independent)
};

// `confusion(item, annotator)` gives the K x K matrix the label is drawn from; each item gets
// `per_item` distinct random annotators.
template <typename ConfusionFn>
Crowd Generate(int32_t items, int32_t annotators, int32_t k, int32_t per_item, uint64_t seed,
               ConfusionFn confusion) {
  std::mt19937_64 rng(seed);
  Crowd crowd;
  std::vector<Annotation> labels;
  std::vector<int32_t> pool(annotators);
  for (int32_t a = 0; a < annotators; ++a) pool[a] = a;
  for (int32_t i = 0; i < items; ++i) {
    const int32_t truth = static_cast<int32_t>(rng() % k);
    crowd.truth.push_back(truth);
    for (int32_t j = 0; j < per_item; ++j) {
      std::swap(pool[j], pool[j + rng() % (annotators - j)]);
      const std::vector<double> c = confusion(i, pool[j]);
      double u = std::uniform_real_distribution<double>(0, 1)(rng);
      int32_t y = 0;
      for (; y < k - 1; ++y) {
        u -= c[truth * k + y];
        if (u < 0) break;
      }
      labels.push_back({i, pool[j], y});
    }
  }
  crowd.matrix = *AnnotationMatrix::Build(items, annotators, k, labels);
  return crowd;
}

double AccuracyOf(const std::string& method, const Crowd& crowd, TruthModelOptions options = {},
                  int32_t feature_dim = 0, const std::vector<float>& features = {}) {
  options.neural.device = "cpu";
  auto model = CreateTruthModel(method, crowd.matrix.num_classes(), options);
  EXPECT_TRUE(model.ok()) << model.status();
  if (feature_dim > 0) EXPECT_TRUE((*model)->SetItemFeatures(feature_dim, features).ok());
  EXPECT_TRUE((*model)->Fit(crowd.matrix, {}, false).ok());
  return testing::Accuracy(AllPosteriors(**model, crowd.matrix, {}), crowd.matrix, crowd.truth);
}

std::vector<double> Mix(const std::vector<double>& a, const std::vector<double>& b, double w) {
  std::vector<double> out(a.size());
  for (size_t c = 0; c < a.size(); ++c) out[c] = w * a[c] + (1 - w) * b[c];
  return out;
}

// CoNAL: annotators share a common confusion (here: class 0 read as 1, 2 read as 3) on top of
// their own, and each has few labels.
TEST(PaperClaimsTest, DISABLED_ConalWithACommonConfusionSharedByTheCrowd) {
  const int32_t k = 4;
  std::vector<double> common = testing::SymmetricConfusion(k, 0.9);
  common[0 * k + 0] = 0.45; common[0 * k + 1] = 0.5;
  common[2 * k + 2] = 0.45; common[2 * k + 3] = 0.5;
  std::mt19937_64 rng(3);
  std::vector<std::vector<double>> own;
  for (int a = 0; a < 200; ++a) {
    own.push_back(testing::SymmetricConfusion(k, 0.55 + 0.4 * std::uniform_real_distribution<double>(0, 1)(rng)));
  }
  Crowd crowd = Generate(1500, 200, k, 3, 5, [&](int32_t, int32_t a) { return Mix(common, own[a], 0.5); });
  const double ds = AccuracyOf("ds", crowd), conal = AccuracyOf("conal", crowd);
  std::printf("common confusion: ds %.4f conal %.4f\n", ds, conal);
  EXPECT_GT(conal, 0.5);  // a measurement: see the file comment
}

// Trace regularisation: one label per item; the trace term should recover the annotators'
// confusion matrices better than the same model without it.
TEST(PaperClaimsTest, TraceRegularisationRecoversConfusionsWithOneLabelPerItem) {
  const int32_t k = 3;
  std::vector<std::vector<double>> truth_confusions;
  std::mt19937_64 rng(9);
  for (int a = 0; a < 6; ++a) {
    std::vector<double> c = testing::SymmetricConfusion(k, 0.6 + 0.06 * a);
    truth_confusions.push_back(c);
  }
  Crowd crowd = Generate(6000, 6, k, 1, 11, [&](int32_t, int32_t a) { return truth_confusions[a]; });
  auto error = [&](double lambda) {
    TruthModelOptions options;
    options.neural.device = "cpu";
    options.neural.trace_lambda = lambda;
    auto model = CreateTruthModel("trace_reg", k, options);
    EXPECT_TRUE((*model)->Fit(crowd.matrix, {}, false).ok());
    double e = 0;
    for (int a = 0; a < 6; ++a) {
      std::vector<double> c = (*model)->AnnotatorConfusion(a);
      for (int x = 0; x < k * k; ++x) e += std::abs(c[x] - truth_confusions[a][x]) / (6 * k * k);
    }
    return e;
  };
  const double with = error(0.01), without = error(0.0);
  std::printf("trace: with %.4f without %.4f\n", with, without);
  // Measured 0.1441 against 0.1457 (mean absolute error per cell): a small but consistent gain.
  EXPECT_LT(with, without);
}

// CMM: more annotators at a fixed number of labels (sparser annotators), from 3 groups.
TEST(PaperClaimsTest, CmmAsAnnotatorsGetSparse) {
  const int32_t k = 3;
  const std::vector<double> groups[3] = {testing::SymmetricConfusion(k, 0.85),
                                         testing::SymmetricConfusion(k, 0.6),
                                         testing::SymmetricConfusion(k, 1.0 / k)};
  double ds[2], cmm[2];
  int run = 0;
  for (int32_t annotators : {10, 1000}) {
    Crowd crowd = Generate(1500, annotators, k, 3, 13, [&](int32_t, int32_t a) { return groups[a % 3]; });
    ds[run] = AccuracyOf("ds", crowd);
    cmm[run] = AccuracyOf("cmm", crowd);
    std::printf("sparse %d: ds %.4f cmm %.4f mv %.4f\n", annotators, ds[run], cmm[run],
                AccuracyOf("mv", crowd));
    ++run;
  }
  // Measured: ds 0.815 -> 0.702, cmm 0.737 -> 0.699. cmm loses less as annotators get sparse
  // (the paper's claim), though it stays below ds here (it is near majority vote throughout).
  EXPECT_GT(ds[0] - ds[1], (cmm[0] - cmm[1]) + 0.03);
}

// LIA: competence depends on the item: each annotator is an expert on half of the items
// (those whose index has the annotator's parity) and guesses on the rest.
TEST(PaperClaimsTest, DISABLED_LiaWhenCompetenceDependsOnTheItem) {
  const int32_t k = 2;
  const std::vector<double> expert = testing::SymmetricConfusion(k, 0.95);
  const std::vector<double> guess = testing::SymmetricConfusion(k, 0.55);
  Crowd crowd = Generate(800, 20, k, 7, 17, [&](int32_t i, int32_t a) {
    return (i % 2) == (a % 2) ? expert : guess;
  });
  const double lia = AccuracyOf("lia", crowd);
  std::printf("item competence: ds %.4f lia %.4f mv %.4f\n", AccuracyOf("ds", crowd), lia,
              AccuracyOf("mv", crowd));
  EXPECT_GT(lia, 0.5);  // a measurement: see the file comment
}

// LIA's claim in its own setting: items carry features (here, which half of the items they
// belong to), from which the difficulty network d(x) learns where each annotator is an expert.
// Measured: ds 0.934, lia 0.978.
TEST(PaperClaimsTest, LiaWithItemFeaturesWhenCompetenceDependsOnTheItem) {
  const int32_t k = 2;
  const std::vector<double> expert = testing::SymmetricConfusion(k, 0.95);
  const std::vector<double> guess = testing::SymmetricConfusion(k, 0.55);
  Crowd crowd = Generate(800, 20, k, 7, 17, [&](int32_t i, int32_t a) {
    return (i % 2) == (a % 2) ? expert : guess;
  });
  std::vector<float> features;
  for (int32_t i = 0; i < 800; ++i) {
    features.push_back(static_cast<float>(i % 2));  // the item's half
    features.push_back(static_cast<float>((i * 7) % 11));  // noise
  }
  const double ds = AccuracyOf("ds", crowd);
  const double lia = AccuracyOf("lia", crowd, {}, 2, features);
  std::printf("item competence with features: ds %.4f lia %.4f\n", ds, lia);
  EXPECT_GT(lia, ds + 0.02);
}

// CoNAL with features marking the items on which annotators fall into the common confusion.
// Measured: ds 0.793, conal 0.765 — the claim does not hold here either (a measurement).
TEST(PaperClaimsTest, DISABLED_ConalWithItemFeaturesMarkingConfusingItems) {
  const int32_t k = 4;
  std::vector<double> common = testing::SymmetricConfusion(k, 0.9);
  common[0 * k + 0] = 0.3; common[0 * k + 1] = 0.65;
  common[2 * k + 2] = 0.3; common[2 * k + 3] = 0.65;
  std::mt19937_64 rng(3);
  std::vector<std::vector<double>> own;
  for (int a = 0; a < 200; ++a) {
    own.push_back(testing::SymmetricConfusion(k, 0.6 + 0.35 * std::uniform_real_distribution<double>(0, 1)(rng)));
  }
  Crowd crowd = Generate(1500, 200, k, 3, 5, [&](int32_t i, int32_t a) { return i % 3 == 0 ? common : own[a]; });
  std::vector<float> features;
  for (int32_t i = 0; i < 1500; ++i) {
    features.push_back(i % 3 == 0 ? 1.0f : 0.0f);  // a confusing item or not
    features.push_back(static_cast<float>((i * 5) % 7));
  }
  const double conal = AccuracyOf("conal", crowd, {}, 2, features);
  std::printf("common confusion with features: ds %.4f conal %.4f\n", AccuracyOf("ds", crowd), conal);
  EXPECT_GT(conal, 0.5);  // a measurement: see the file comment
}

}  // namespace
}  // namespace verity::models

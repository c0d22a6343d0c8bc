// Synthetic checks of the claims of the papers behind the neural models, with fixed seeds.
// Each case builds a crowd where the paper's modelling assumption holds and compares the
// method with the baseline the paper compares against; the measured numbers are in
// docs/EVALUATION.md ("Synthetic checks of the papers' claims"), and above each test (for
// trace_reg and cmm the document still has the earlier single-seed measurements).
//
// Four claims hold here and are asserted: trace_reg, cmm (against ds and majority vote, when
// the annotators' groups share a bias, and against ds when each annotator gives one label),
// lia when items carry features (without features it does not), and conal (against ds and
// crowdlayer) when the crowd shares a confusion on some items.
// The cases where a claim does not hold, or that are not the paper's setting, are five DISABLED_
// measurements, run with --gtest_also_run_disabled_tests, that assert only that the fits run;
// they are kept so that the comparison can be re-run when the models change, and issue #17
// (neural models made faithful to the papers) will enable them. The line above each says why
// it is disabled.
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
  if (feature_dim > 0) {
    EXPECT_TRUE((*model)->SetItemFeatures(feature_dim, features).ok());
  }
  EXPECT_TRUE((*model)->Fit(crowd.matrix, {}, false).ok());
  return testing::Accuracy(AllPosteriors(**model, crowd.matrix, {}), crowd.matrix, crowd.truth);
}

std::vector<double> Mix(const std::vector<double>& a, const std::vector<double>& b, double w) {
  std::vector<double> out(a.size());
  for (size_t c = 0; c < a.size(); ++c) out[c] = w * a[c] + (1 - w) * b[c];
  return out;
}

// CoNAL's setting (Chu et al. 2021): the crowd shares a confusion on some items. A third
// of the items, drawn at random, are confusing: on them every annotator labels through the same
// common confusion (class 0 read as 1 and class 2 as 3 with probability 0.65, kept with 0.3);
// on the others each annotator labels through their own symmetric confusion (accuracy uniform
// in 0.6-0.95). ds has one confusion per annotator, in effect the average of the two, and
// cannot say "everyone errs the same way on these items". The items carry no features, so
// conal must find the confusing items from their labels alone (v_i is a free embedding): with
// 20 labels per item it can; with 3 there is next to nothing to find (docs/EVALUATION.md).
struct ConalAndDs {
  double ds = 0, conal = 0;
  double crowdlayer = -1;  // -1: not fitted
};

ConalAndDs ConalAgainstDsOnItemsWithACommonConfusion(uint64_t seed, double conal_lambda,
                                                      bool with_crowdlayer = false) {
  const int32_t k = 4, items = 1000, annotators = 50;
  std::vector<double> common(k * k, 0.025);
  for (int32_t c = 0; c < k; ++c) common[c * k + c] = 0.925;
  for (int32_t c : {0, 2}) {
    common[c * k + c] = 0.3;
    common[c * k + c + 1] = 0.65;
  }
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(0, 1);
  std::vector<std::vector<double>> own;
  for (int32_t a = 0; a < annotators; ++a) own.push_back(testing::SymmetricConfusion(k, 0.6 + 0.35 * uniform(rng)));
  std::vector<bool> confusing(items);
  for (int32_t i = 0; i < items; ++i) confusing[i] = uniform(rng) < 1.0 / 3;
  Crowd crowd = Generate(items, annotators, k, 20, seed + 1000,
                         [&](int32_t i, int32_t a) { return confusing[i] ? common : own[a]; });
  TruthModelOptions options;
  options.neural.seed = seed;
  options.neural.conal_lambda = conal_lambda;
  options.neural.featureless_conal_lambda = conal_lambda;  // these items carry no features
  // The papers' training without features, at which the claim was measured. At today's
  // featureless defaults (rate 1e-2, crowdlayer by EM: truth_model.h) the claim does not hold
  // on these crowds: mean of seeds 1-3, ds 0.8493, conal 0.8463, crowdlayer 0.8490.
  options.neural.featureless_learning_rate = 1e-3;
  options.neural.featureless_em = false;
  return {AccuracyOf("ds", crowd), AccuracyOf("conal", crowd, options),
          with_crowdlayer ? AccuracyOf("crowdlayer", crowd, options) : -1.0};
}

// λ = 0.05 on the mean distance (conal.h), which over these 50 annotators is λ = 1e-3 on the
// paper's sum, rather than the default 5.9e-4 (the paper's 1e-5 on LabelMe's 59 annotators):
// at the default the reward for W_g ≠ W_r is too weak to break the symmetry of their identical
// initialisation within the default budget, and conal then gains under a point over ds
// (ConalAgainstDsAcrossSeeds). Asserted on the mean of three seeds, against ds and against
// crowdlayer (about 50 s on two CPU cores).
TEST(PaperClaimsTest, ConalBeatsDsAndCrowdLayerWhenTheCrowdSharesAConfusionOnSomeItems) {
  double ds = 0, conal = 0, crowdlayer = 0;
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    const ConalAndDs result =
        ConalAgainstDsOnItemsWithACommonConfusion(seed, 0.05, /*with_crowdlayer=*/true);
    std::printf("common confusion on a third of the items, seed %d: ds %.4f conal %.4f "
                "crowdlayer %.4f\n",
                static_cast<int>(seed), result.ds, result.conal, result.crowdlayer);
    ds += result.ds / 3;
    conal += result.conal / 3;
    crowdlayer += result.crowdlayer / 3;
  }
  std::printf("mean of seeds 1-3: ds %.4f conal %.4f crowdlayer %.4f\n", ds, conal, crowdlayer);
  // Measured (the mean reward, λ = 0.05, the Dawid-Skene start): ds 0.8493, conal 0.8707 (+1.5,
  // +2.5 and +2.4 points on seeds 1, 2, 3).
  EXPECT_GT(conal, ds + 0.015);
  // The paper's comparison: conal against crowdlayer, which has no common confusion. Measured:
  // crowdlayer 0.8580 / 0.8640 / 0.8470, mean 0.8563; conal ahead by 1.1, 2.0 and 1.2 points.
  EXPECT_GT(conal, crowdlayer + 0.01);
}

// The same comparison over seeds 1-5, with λ = 0.05 and the default (a measurement:
// about two minutes on two CPU cores; the numbers are in docs/EVALUATION.md).
// Disabled: a 2-minute measurement, and conal gains under a point at the default λ;
// issue #17 (neural models made faithful to the papers) will enable it.
TEST(PaperClaimsTest, DISABLED_ConalAgainstDsAcrossSeeds) {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    const ConalAndDs strong = ConalAgainstDsOnItemsWithACommonConfusion(seed, 0.05);
    const ConalAndDs paper =
        ConalAgainstDsOnItemsWithACommonConfusion(seed, TruthModelOptions().neural.conal_lambda);
    std::printf("seed %d: ds %.4f conal(0.05) %.4f conal(default) %.4f\n", static_cast<int>(seed), strong.ds,
                strong.conal, paper.conal);
    EXPECT_GT(strong.conal, 0.5);
  }
}

// Not CoNAL's setting, kept as a measurement: each annotator's confusion is half a shared one
// (class 0 read as 1, 2 as 3) and half their own on every item, so it does not depend on the
// item: that is exactly ds's model (one confusion per annotator), which conal can only match.
// Disabled: not CoNAL's setting, so there is no claim to assert (conal can only match ds);
// issue #17 (neural models made faithful to the papers) will enable it.
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
  std::printf("item-independent common confusion: ds %.4f conal %.4f\n", ds, conal);
  EXPECT_GT(conal, 0.5);  // a measurement: see the comment above
}

// Trace regularisation: one label per item; the trace term should recover the annotators'
// confusion matrices better than the same model without it.
// Trace regularisation (Tanno et al. 2019): one label per item; the trace term should recover
// the annotators' confusion matrices better than the same model without it. Without it, a free
// item embedding absorbs the label noise into the classifier and the confusions stay at the
// identity they start from (error 0.1665-0.1667, the identity's); the term pushes their
// diagonals down. Over three seeds (crowd and model), each fit about 2 s on two CPU cores,
// with each annotator's trace weighted by its share of the labels (trace_reg.h; here 1/6, so
// λ = 0.06 and 0.18 are the paper's per-item weights 0.01 and 0.03):
//  - at λ = 0.06 the gain is small but the same on every seed (mean absolute error per cell
//    0.1667 -> 0.1655, 0.1665 -> 0.1659, 0.1665 -> 0.1630), so it is asserted per seed;
//  - at λ = 0.18 it is large enough for a margin (0.1355, 0.1207, 0.1199).
TEST(PaperClaimsTest, TraceRegularisationRecoversConfusionsWithOneLabelPerItem) {
  const int32_t k = 3;
  std::vector<std::vector<double>> truth_confusions;
  for (int a = 0; a < 6; ++a) {
    truth_confusions.push_back(testing::SymmetricConfusion(k, 0.6 + 0.06 * a));
  }
  double mean_without = 0, mean_strong = 0;
  for (uint64_t seed : {11, 12, 13}) {
    Crowd crowd =
        Generate(6000, 6, k, 1, seed, [&](int32_t, int32_t a) { return truth_confusions[a]; });
    auto error = [&](double lambda) {
      TruthModelOptions options;
      options.neural.device = "cpu";
      options.neural.seed = seed;
      options.neural.trace_lambda = lambda;
      // The paper's loss at the rate the claim was measured at. At the featureless default
      // rate (1e-2) λ = 0.18 overshoots: mean error 0.457 against 0.152 without (seeds 11-13).
      // Under generalised EM (featureless_em, the default without features since trace_reg
      // trains by it: trace_reg.h) the confusions are recovered without the term, as
      // Dawid-Skene recovers them, and the term only pulls them off: mean error 0.0856 at
      // λ = 0 against 0.2526 at λ = 0.18 (seeds 11-13, rate 1e-3).
      options.neural.featureless_learning_rate = 1e-3;
      options.neural.featureless_em = false;
      auto model = CreateTruthModel("trace_reg", k, options);
      EXPECT_TRUE((*model)->Fit(crowd.matrix, {}, false).ok());
      double e = 0;
      for (int a = 0; a < 6; ++a) {
        std::vector<double> c = (*model)->AnnotatorConfusion(a);
        for (int x = 0; x < k * k; ++x) e += std::abs(c[x] - truth_confusions[a][x]) / (6 * k * k);
      }
      return e;
    };
    // λ n_r / L weights each annotator's trace by its share of the labels (trace_reg.h): with
    // 6 annotators sharing one label per item, λ = 0.06 and 0.18 are the paper's per-item
    // weights 0.01 and 0.03 (λ N / L per annotator, N = L).
    const double without = error(0.0), with = error(0.06), strong = error(0.18);
    std::printf("trace, seed %d: without %.4f, lambda 0.06 %.4f, lambda 0.18 %.4f\n",
                static_cast<int>(seed), without, with, strong);
    EXPECT_LT(with, without) << "seed " << seed;
    mean_without += without / 3;
    mean_strong += strong / 3;
  }
  EXPECT_LT(mean_strong, mean_without - 0.015);
}

// Trace regularisation against the crowd layer (Tanno et al. 2019 compare with Rodrigues &
// Pereira): annotators who are mostly wrong (accuracy 0.40 to 0.55 over 3 classes, errors
// spread evenly), one label per item (6,000 items) or 3 (2,000 items). The error is the mean
// absolute difference per cell between the served and the true confusions over the 6
// annotators; seeds 21-23 for the crowd and the models, default options otherwise.
// Disabled: the claim does not hold here. With learned item embeddings (no features) the
// classifier can give each item the empirical distribution of its labels, so confusions at the
// identity are a maximum of the likelihood, and trace_reg, started at the identity as in the
// paper, stays within a point of it at the paper's λ = 0.01 (error 0.349, the identity's 0.350)
// while crowdlayer, which starts from the same point but whose layer is not tied to the
// simplex, moves (0.285 with one label per item, 0.067 with 3). A larger λ moves trace_reg's
// confusions (0.294 at λ = 0.03, one label) but collapses them soon after (λ = 0.1).
// Measured on seed 21: trace_reg 0.3490 / 0.3496 (1 / 3 labels per item), crowdlayer 0.2856 /
// 0.0671, ds 0.2474 / 0.0565. About 15 s on two CPU cores.
TEST(PaperClaimsTest, DISABLED_TraceRegRecoversConfusionsBetterThanCrowdLayerWhenAnnotatorsAreMostlyWrong) {
  const int32_t k = 3, annotators = 6;
  std::vector<std::vector<double>> truth_confusions;
  for (int a = 0; a < annotators; ++a) {
    truth_confusions.push_back(testing::SymmetricConfusion(k, 0.40 + 0.03 * a));
  }
  for (int32_t per_item : {1, 3}) {
    for (uint64_t seed : {21, 22, 23}) {
      Crowd crowd = Generate(per_item == 1 ? 6000 : 2000, annotators, k, per_item, seed,
                             [&](int32_t, int32_t a) { return truth_confusions[a]; });
      auto error = [&](const std::string& method) {
        TruthModelOptions options;
        options.neural.device = "cpu";
        options.neural.seed = seed;
        auto model = CreateTruthModel(method, k, options);
        EXPECT_TRUE((*model)->Fit(crowd.matrix, {}, false).ok());
        double e = 0;
        for (int a = 0; a < annotators; ++a) {
          std::vector<double> c = (*model)->AnnotatorConfusion(a);
          for (int x = 0; x < k * k; ++x) e += std::abs(c[x] - truth_confusions[a][x]) / (annotators * k * k);
        }
        return e;
      };
      const double trace_reg = error("trace_reg"), crowdlayer = error("crowdlayer");
      std::printf("mostly wrong annotators, %d per item, seed %d: trace_reg %.4f crowdlayer %.4f\n",
                  per_item, static_cast<int>(seed), trace_reg, crowdlayer);
      EXPECT_GT(trace_reg, 0.0);  // a measurement: see the comment above
    }
  }
}

// CMM (Mena & Ñanculef, Global setting): more annotators at a fixed number of labels (sparser
// annotators), from 3 groups: two thirds of the annotators read class 0 as 1 with probability
// 0.6 (and are right 0.8 of the time on the other classes), the rest are right 0.6 of the time;
// 1,500 items x 5 labels, 12 or 1,200 annotators (about 6 labels each). ds needs each
// annotator's confusion and collapses as they get sparse; cmm's Global setting learns one
// effective confusion of the crowd, B = Σ_m α_m β^(m) (cmm.h), not the annotators', so it keeps
// its accuracy, and it must beat majority vote with it (the shared bias is what a vote cannot
// undo). Asserted on the mean of seeds 13-15.
// Measured with per-label groups (12 -> 1,200 annotators, mean of seeds 13-15): ds 0.768 ->
// 0.631, cmm 0.763 -> 0.766, mv 0.733 -> 0.740. The Individual setting (memberships per
// annotator, not asserted here) gives 0.778 -> 0.737: with about 6 labels an annotator's
// membership is noisy. (With one group per item, before issue #17: cmm 0.762 -> 0.760.)
TEST(PaperClaimsTest, CmmAsAnnotatorsGetSparse) {
  const int32_t k = 3;
  std::vector<double> biased = testing::SymmetricConfusion(k, 0.8);
  biased[0 * k + 0] = 0.2;
  biased[0 * k + 1] = 0.6;
  biased[0 * k + 2] = 0.2;
  const std::vector<double> groups[3] = {biased, biased, testing::SymmetricConfusion(k, 0.6)};
  double ds[2] = {0, 0}, cmm[2] = {0, 0}, mv[2] = {0, 0};
  for (uint64_t seed : {13, 14, 15}) {
    int run = 0;
    for (int32_t annotators : {12, 1200}) {
      Crowd crowd =
          Generate(1500, annotators, k, 5, seed, [&](int32_t, int32_t a) { return groups[a % 3]; });
      TruthModelOptions options;
      options.neural.seed = seed;
      options.neural.cmm_setting = "global";
      const double ds_accuracy = AccuracyOf("ds", crowd);
      const double cmm_accuracy = AccuracyOf("cmm", crowd, options);
      const double mv_accuracy = AccuracyOf("mv", crowd);
      std::printf("seed %d, %d annotators: ds %.4f cmm %.4f mv %.4f\n", static_cast<int>(seed),
                  annotators, ds_accuracy, cmm_accuracy, mv_accuracy);
      ds[run] += ds_accuracy / 3;
      cmm[run] += cmm_accuracy / 3;
      mv[run] += mv_accuracy / 3;
      ++run;
    }
  }
  EXPECT_GT(ds[0] - ds[1], (cmm[0] - cmm[1]) + 0.05);
  EXPECT_GT(cmm[1], mv[1] + 0.01);
}

// CMM's Global setting (Mena & Ñanculef): every annotator gives one label, so ds has one label
// per confusion to learn from, while cmm's groups are learnt from the whole crowd. 2,000 items x
// 5 labels from 10,000 annotators, two thirds of them read class 0 as 1 with probability 0.6
// (the groups of CmmAsAnnotatorsGetSparse); seeds 21-23, mean accuracy. About 6 s.
// Measured: ds 0.6245 / 0.6120 / 0.6290, cmm 0.7785 / 0.7605 / 0.7895, mv 0.7465 / 0.7180 / 0.7435
// (means ds 0.622, cmm 0.776, mv 0.736).
TEST(PaperClaimsTest, CmmGlobalBeatsDsWhenAnnotatorsGiveOneLabelEach) {
  const int32_t k = 3, items = 2000, per_item = 5;
  std::vector<double> biased = testing::SymmetricConfusion(k, 0.8);
  biased[0 * k + 0] = 0.2;
  biased[0 * k + 1] = 0.6;
  biased[0 * k + 2] = 0.2;
  const std::vector<double> groups[3] = {biased, biased, testing::SymmetricConfusion(k, 0.6)};
  double ds = 0, cmm = 0;
  for (uint64_t seed : {21, 22, 23}) {
    // Annotator i * per_item + j gives item i its j-th label, and nothing else.
    Crowd crowd = Generate(items, items * per_item, k, per_item, seed,
                           [&](int32_t, int32_t a) { return groups[a % 3]; });
    std::mt19937_64 rng(seed);
    std::vector<Annotation> labels;
    for (int32_t i = 0; i < items; ++i) {
      for (int32_t j = 0; j < per_item; ++j) {
        const int32_t a = i * per_item + j;
        const std::vector<double>& c = groups[a % 3];
        double u = std::uniform_real_distribution<double>(0, 1)(rng);
        int32_t y = 0;
        for (; y < k - 1; ++y) {
          u -= c[crowd.truth[i] * k + y];
          if (u < 0) break;
        }
        labels.push_back({i, a, y});
      }
    }
    crowd.matrix = *AnnotationMatrix::Build(items, items * per_item, k, labels);
    TruthModelOptions options;
    options.neural.seed = seed;
    options.neural.cmm_setting = "global";
    const double ds_accuracy = AccuracyOf("ds", crowd), cmm_accuracy = AccuracyOf("cmm", crowd, options);
    std::printf("one label per annotator, seed %d: ds %.4f cmm(global) %.4f mv %.4f\n",
                static_cast<int>(seed), ds_accuracy, cmm_accuracy, AccuracyOf("mv", crowd));
    ds += ds_accuracy / 3;
    cmm += cmm_accuracy / 3;
  }
  EXPECT_GT(cmm, ds + 0.01);
}

// LIA: competence depends on the item: each annotator is an expert on half of the items
// (those whose index has the annotator's parity) and guesses on the rest.
// Disabled: without item features lia does not beat ds (measured lia 0.906, ds 0.934);
// issue #17 (neural models made faithful to the papers) will enable it.
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

// CoNAL with features marking the items on which annotators fall into the common confusion, kept
// as a measurement of an ill-posed case: the features say nothing about the class, and with
// features the truth network sees only them (no per-item embedding). In training f(x) is then
// the same for every item of a feature value (14 values here), so the labels cannot be
// explained by items having different truths, and what an end-to-end model learns as
// confusions is close to the labels' marginal distribution: too flat, and the posteriors that
// use it lose to ds. crowdlayer, fitted the same way, loses too.
// Disabled: ill-posed (with features h sees only them) and conal loses to ds here;
// issue #17 (neural models made faithful to the papers) will enable it.
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
  std::printf("common confusion with features: ds %.4f conal %.4f crowdlayer %.4f\n", AccuracyOf("ds", crowd),
              conal, AccuracyOf("crowdlayer", crowd, {}, 2, features));
  EXPECT_GT(conal, 0.5);  // a measurement: see the comment above
}

}  // namespace
}  // namespace verity::models

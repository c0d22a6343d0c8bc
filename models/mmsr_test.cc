#include "models/mmsr.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
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
using ::verity::models::testing::WithTrailingBytes;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;
using Entry = AnnotationMatrix::Entry;

// 12 items, 6 annotators, 3 classes, 4 labels per item. Expected labels and
// weights from crowd-kit's MMSR (defaults: n_iter 10000, tol 1e-10,
// random_state 0), crowd-kit 35f0661:
//   PYTHONPATH=../shared/peers/crowd-kit /usr/bin/python3
//     tools/crowdkit_reference.py --methods=MMSR --triples='0,0,1 0,1,1
//     0,2,1 0,5,1 1,0,1 1,1,1 1,2,0 1,4,0 2,1,1 2,2,0 2,3,1 2,5,1 3,0,0
//     3,1,1 3,2,0 3,3,0 4,0,2 4,1,2 4,3,2 4,4,0 5,0,0 5,2,0 5,3,0 5,5,0
//     6,2,0 6,3,2 6,4,2 6,5,1 7,1,2 7,2,1 7,3,0 7,4,1 8,0,2 8,1,2 8,2,0
//     8,4,2 9,0,1 9,1,1 9,2,0 9,4,1 10,0,1 10,1,1 10,3,1 10,5,1 11,1,2
//     11,2,2 11,3,2 11,5,2'
// prints labels 1 1 1 0 2 0 2 0 2 1 1 2 and skills 2.12731519615078,
// 1.7774468910944696, 0.8173228973773325, 2.12731519615078,
// 0.6828009276087763, 2.12731519615078. The majority vote differs on items
// 1 (a 2-2 tie) and 7 (annotator 3's 0 against the 1 of annotators 2 and 4).
TEST(MmsrTest, MatchesCrowdKitOnAFixedCase) {
  const std::vector<Annotation> triples = {
      {0, 0, 1}, {0, 1, 1}, {0, 2, 1}, {0, 5, 1}, {1, 0, 1}, {1, 1, 1}, {1, 2, 0},
      {1, 4, 0}, {2, 1, 1}, {2, 2, 0}, {2, 3, 1}, {2, 5, 1}, {3, 0, 0}, {3, 1, 1},
      {3, 2, 0}, {3, 3, 0}, {4, 0, 2}, {4, 1, 2}, {4, 3, 2}, {4, 4, 0}, {5, 0, 0},
      {5, 2, 0}, {5, 3, 0}, {5, 5, 0}, {6, 2, 0}, {6, 3, 2}, {6, 4, 2}, {6, 5, 1},
      {7, 1, 2}, {7, 2, 1}, {7, 3, 0}, {7, 4, 1}, {8, 0, 2}, {8, 1, 2}, {8, 2, 0},
      {8, 4, 2}, {9, 0, 1}, {9, 1, 1}, {9, 2, 0}, {9, 4, 1}, {10, 0, 1}, {10, 1, 1},
      {10, 3, 1}, {10, 5, 1}, {11, 1, 2}, {11, 2, 2}, {11, 3, 2}, {11, 5, 2}};
  const AnnotationMatrix m = *AnnotationMatrix::Build(12, 6, 3, triples);
  std::unique_ptr<MmsrModel> model = CreateOrFail<MmsrModel>(3);
  absl::StatusOr<FitReport> report = model->Fit(m, {}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_TRUE(report->converged);
  const std::vector<int32_t> expected = {1, 1, 1, 0, 2, 0, 2, 0, 2, 1, 1, 2};
  EXPECT_EQ(ArgMax(AllPosteriors(*model, m, {}), 3), expected);
  const std::vector<double> skills = {2.12731519615078,   1.7774468910944696,
                                      0.8173228973773325, 2.12731519615078,
                                      0.6828009276087763, 2.12731519615078};
  for (int a = 0; a < 6; ++a) EXPECT_NEAR(*model->AnnotatorWeight(a), skills[a], 1e-9) << a;
}

// 3 classes, 2000 items, 5 labels each from 10 annotators of accuracy 0.45
// to 0.9.
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

TEST(MmsrTest, RecoversTheSkillsAndBeatsMajorityVote) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(MixedCrowdSpec());
  std::unique_ptr<MmsrModel> model = CreateOrFail<MmsrModel>(3);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());
  auto mv = MajorityVoteModel::Create(3, {});
  const double mv_accuracy =
      Accuracy(AllPosteriors(**mv, crowd.matrix, {}), crowd.matrix, crowd.truth);
  const double accuracy =
      Accuracy(AllPosteriors(*model, crowd.matrix, {}), crowd.matrix, crowd.truth);
  EXPECT_GT(accuracy, mv_accuracy + 0.01);
  // The one-coin confusion's diagonal is the skill p: near each annotator's
  // accuracy.
  for (int a = 0; a < 10; ++a) {
    EXPECT_NEAR(model->AnnotatorConfusion(a)[0], 0.45 + 0.05 * a, 0.06) << a;
  }
}

// mmsr.h: an id not in the fit gets the skill x that is the label-weighted mean of the fitted
// annotators' x, and its weight. Each fitted x is recovered from its weight by inverting
// w = ln((K - 1) p / (1 - p)), p = x (K - 1) / K + 1 / K: p = e^w / (K - 1 + e^w).
TEST(MmsrTest, AnIdOutsideTheFitGetsTheWeightOfTheLabelWeightedMeanSkill) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(MixedCrowdSpec());
  constexpr int kClasses = 3;
  std::unique_ptr<MmsrModel> model = CreateOrFail<MmsrModel>(kClasses);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());
  double pooled_x = 0;
  for (int32_t a = 0; a < crowd.matrix.num_annotators(); ++a) {
    const std::optional<double> w = model->AnnotatorWeight(a);
    ASSERT_TRUE(w.has_value()) << a;
    const double p = std::exp(*w) / (kClasses - 1 + std::exp(*w));
    const double x = (p - 1.0 / kClasses) * kClasses / (kClasses - 1);
    pooled_x += x * static_cast<double>(crowd.matrix.LabelsOfAnnotator(a).size()) /
                static_cast<double>(crowd.matrix.num_labels());
  }
  const double p = pooled_x * (kClasses - 1) / kClasses + 1.0 / kClasses;
  const double expected = std::log((kClasses - 1) * p / (1 - p));
  const std::optional<double> unseen = model->AnnotatorWeight(crowd.matrix.num_annotators() + 7);
  ASSERT_TRUE(unseen.has_value());
  EXPECT_NEAR(*unseen, expected, 1e-9);
}

struct ReferenceFit {
  std::vector<double> weights;  // per annotator
  int iterations = 0;
};

// crowd-kit's M-MSR (m_msr.py) written as literally as C++ allows: the dense
// agreement matrix, each row's values sorted and trimmed by
// _remove_largest_and_smallest_F_value, the loss from the dense u v^T; with
// Verity's departures (signs >= 0, partners at 0 left out). The reference for
// mmsr.cc, which selects the kept ranks instead of sorting and computes the
// loss without the matrix. Every annotator must have labels.
ReferenceFit SortingReferenceFit(const AnnotationMatrix& m) {
  const int32_t na = m.num_annotators();
  const double k = m.num_classes();
  std::vector<double> common(na * na, 0.0), agree(na * na, 0.0);
  int64_t num_tasks = 0;
  for (int32_t i = 0; i < m.num_items(); ++i) {
    num_tasks += !m.LabelsOfItem(i).empty();
    for (const Entry& e : m.LabelsOfItem(i)) {
      for (const Entry& g : m.LabelsOfItem(i)) {
        if (e.other == g.other) continue;
        common[e.other * na + g.other] += 1;
        agree[e.other * na + g.other] += e.label == g.label;
      }
    }
  }
  std::vector<double> x(na * na, 0.0);
  int64_t sparsity = INT64_MAX;
  for (int32_t i = 0; i < na; ++i) {
    int64_t observed = 0;
    for (int32_t j = 0; j < na; ++j) {
      if (common[i * na + j] == 0) continue;
      ++observed;
      x[i * na + j] = std::abs(agree[i * na + j] / common[i * na + j] * k / (k - 1) - 1 / (k - 1));
    }
    sparsity = std::min(sparsity, observed);
  }
  const int64_t f = sparsity / 2 - 1;
  // Python's y[start:stop].
  auto slice = [](const std::vector<double>& y, int64_t start, int64_t stop) {
    const int64_t n = y.size();
    auto index = [n](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
    start = index(start);
    stop = std::max(start, index(stop));
    return std::vector<double>(y.begin() + start, y.begin() + stop);
  };
  auto trimmed_update = [&](std::vector<double>& target, const std::vector<double>& other) {
    for (int32_t j = 0; j < na; ++j) {
      const double a = target[j];
      std::vector<double> y;
      for (int32_t i = 0; i < na; ++i) {
        if (common[i * na + j] > 0 && other[i] > 0.0) y.push_back(x[i * na + j] / other[i]);
      }
      std::sort(y.begin(), y.end());
      auto count = [&y](auto predicate) { return std::count_if(y.begin(), y.end(), predicate); };
      auto keep = [&y](auto predicate) {
        std::vector<double> kept;
        for (double v : y) {
          if (predicate(v)) kept.push_back(v);
        }
        return kept;
      };
      y = count([a](double v) { return v < a; }) < f ? keep([a](double v) { return v >= a; })
                                                      : slice(y, f, y.size());
      const int64_t size = y.size();
      y = count([a](double v) { return v > a; }) < f ? keep([a](double v) { return v <= a; })
                                                      : slice(y, 0, size - f);
      if (y.size() == 1 && y[0] == 0) y[0] = 1 / std::sqrt(static_cast<double>(num_tasks));
      if (y.empty()) continue;
      double sum = 0.0;
      for (double v : y) sum += v;
      target[j] = sum / y.size();
    }
  };
  std::vector<double> u(na);
  std::mt19937 generator(0);
  for (double& value : u) {
    const double high = static_cast<double>(generator() >> 5);
    const double low = static_cast<double>(generator() >> 6);
    value = (high * 67108864.0 + low) / 9007199254740992.0;
  }
  std::vector<double> v = u;
  ReferenceFit fit;
  while (fit.iterations < MmsrModel::kMaxIterations) {
    const std::vector<double> u_previous = u, v_previous = v;
    trimmed_update(v, u);
    trimmed_update(u, v);
    ++fit.iterations;
    double loss2 = 0.0;
    for (int32_t i = 0; i < na; ++i) {
      for (int32_t j = 0; j < na; ++j) {
        const double d = u[i] * v[j] - u_previous[i] * v_previous[j];
        loss2 += d * d;
      }
    }
    if (std::sqrt(loss2) < MmsrModel::kTolerance) break;
  }
  double uu = 0.0, vv = 0.0;
  for (int32_t i = 0; i < na; ++i) {
    uu += u[i] * u[i];
    vv += v[i] * v[i];
  }
  const double scale = std::sqrt(std::sqrt(uu) / std::sqrt(vv));
  const double root_n = std::sqrt(static_cast<double>(num_tasks));
  for (int32_t i = 0; i < na; ++i) {
    const double skill = std::max(std::min(std::abs(u[i] / scale), 1 - 1 / root_n),
                                  -1 / (k - 1) + 1 / root_n);
    const double p = skill * (k - 1) / k + 1 / k;
    fit.weights.push_back(std::log(p * (k - 1) / (1 - p)));
  }
  return fit;
}

// 60 annotators (accuracy 0.2 to 0.9 at K = 4, so some below chance) on 3000
// items with 6 labels each: rows of about 59 partners, trimmed to their middle
// few, where the fit takes both the windowed and the full selection.
TEST(MmsrTest, MatchesTheSortingReferenceOnAWideCrowd) {
  SyntheticCrowdSpec spec;
  spec.num_items = 3000;
  spec.num_classes = 4;
  spec.labels_per_item = 6;
  for (int a = 0; a < 60; ++a) {
    spec.confusions.push_back(SymmetricConfusion(4, 0.2 + 0.7 * a / 59));
  }
  spec.seed = 5;
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  const ReferenceFit reference = SortingReferenceFit(crowd.matrix);
  std::unique_ptr<MmsrModel> model = CreateOrFail<MmsrModel>(4);
  absl::StatusOr<FitReport> report = model->Fit(crowd.matrix, {}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_TRUE(report->converged);
  EXPECT_EQ(report->iterations, reference.iterations);
  for (int a = 0; a < 60; ++a) {
    EXPECT_NEAR(*model->AnnotatorWeight(a), reference.weights[a], 1e-12) << a;
  }
}

// 600 annotators on 6,000 items with 10 labels each (about 280,000 observed
// pairs): enough for the fit to split its rows over threads, which must not
// change a bit of the estimates.
TEST(MmsrTest, TheFitIsTheSameForAnyNumberOfThreads) {
  SyntheticCrowdSpec spec;
  spec.num_items = 6000;
  spec.num_classes = 3;
  spec.labels_per_item = 10;
  for (int a = 0; a < 600; ++a) {
    spec.confusions.push_back(SymmetricConfusion(3, 0.4 + 0.5 * (a % 50) / 49));
  }
  spec.seed = 7;
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  std::unique_ptr<MmsrModel> one = CreateOrFail<MmsrModel>(3);
  TruthModelOptions options;
  options.num_threads = 4;
  std::unique_ptr<MmsrModel> four = CreateOrFail<MmsrModel>(3, options);
  absl::StatusOr<FitReport> one_report = one->Fit(crowd.matrix, {}, false);
  absl::StatusOr<FitReport> four_report = four->Fit(crowd.matrix, {}, false);
  ASSERT_THAT(one_report, IsOk());
  ASSERT_THAT(four_report, IsOk());
  EXPECT_TRUE(one_report->converged);
  EXPECT_EQ(four_report->iterations, one_report->iterations);
  EXPECT_EQ(four->Serialize(), one->Serialize());
}

TEST(MmsrTest, PosteriorIsTheOneCoinPosteriorAndGoldIsClamped) {
  // Hand-set skill estimates, K = 2: pooled x = 0.2, annotator 0 x = 0.6
  // (p = 0.8, weight ln 4), annotator 1 x = 0.2 (p = 0.6, weight ln 1.5).
  ByteWriter writer;
  WriteModelHeader(writer, MmsrModel::kMethod, true);
  writer.WriteU32(2);
  writer.WriteU32(2);
  for (double v : {0.2, 0.6, 0.2}) writer.WriteF64(v);
  std::unique_ptr<MmsrModel> model = CreateOrFail<MmsrModel>(2);
  ASSERT_THAT(model->Restore(writer.Finish()), IsOk());
  std::vector<double> out(2);
  // Labels 0 (annotator 0) and 1 (annotator 1): p(0) ∝ 4, p(1) ∝ 1.5.
  model->ItemPosterior({{0, 0}, {1, 1}}, -1, absl::MakeSpan(out));
  EXPECT_NEAR(out[0], 4 / 5.5, 1e-12);
  // An unseen annotator gets the pooled weight: one label 1 gives 0.6.
  model->ItemPosterior({{9, 1}}, -1, absl::MakeSpan(out));
  EXPECT_NEAR(out[1], 0.6, 1e-12);
  model->ItemPosterior({{0, 0}}, 1, absl::MakeSpan(out));
  EXPECT_EQ(out, std::vector<double>({0.0, 1.0}));
  EXPECT_EQ(model->AnnotatorConfusion(0)[0], 0.8);
  // Gold in a fit is clamped in the posteriors.
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(MixedCrowdSpec());
  std::vector<int32_t> gold(crowd.matrix.num_items(), -1);
  for (int32_t i = 0; i < 100; ++i) gold[i] = (crowd.truth[i] + 1) % 3;
  std::unique_ptr<MmsrModel> fitted = CreateOrFail<MmsrModel>(3);
  ASSERT_THAT(fitted->Fit(crowd.matrix, gold, false), IsOk());
  const std::vector<double> p = AllPosteriors(*fitted, crowd.matrix, gold);
  for (int32_t i = 0; i < 100; ++i) EXPECT_EQ(p[3 * i + gold[i]], 1.0) << i;
}

// Three annotators whose every pair agrees on exactly half of its common
// items (K = 2: agreement at chance, C = 0): the estimates fall to 0, which
// crowd-kit divides by (inf, NaN). Verity leaves such partners out: every
// weight stays finite and every posterior a distribution.
TEST(MmsrTest, AgreementAtChanceKeepsTheWeightsFinite) {
  const std::vector<Annotation> triples = {
      {0, 0, 0}, {0, 1, 0}, {0, 2, 0}, {1, 0, 0}, {1, 1, 1}, {1, 2, 1},
      {2, 0, 1}, {2, 1, 1}, {2, 2, 0}, {3, 0, 1}, {3, 1, 0}, {3, 2, 1}};
  const AnnotationMatrix m = *AnnotationMatrix::Build(4, 3, 2, triples);
  std::unique_ptr<MmsrModel> model = CreateOrFail<MmsrModel>(2);
  ASSERT_THAT(model->Fit(m, {}, false), IsOk());
  for (int a = -1; a < 3; ++a) EXPECT_TRUE(std::isfinite(*model->AnnotatorWeight(a))) << a;
  for (double p : AllPosteriors(*model, m, {})) {
    EXPECT_TRUE(p >= 0.0 && p <= 1.0) << p;
  }
}

// mmsr.h: x is clipped into [.., 1 - 1 / sqrt(n)] with n = the items with labels. Three
// annotators who agree on each of 4 items (K = 2: C = 1 for every pair, so the rank-one
// completion gives x = 1) in a matrix of 9 items, 5 of them without labels: n = 4, x is
// clipped to 1 - 1/2, p = x / 2 + 1/2 = 3/4 and w = ln(p / (1 - p)) = ln 3 (n = 9 would give
// x = 2/3, w = ln 5).
TEST(MmsrTest, TheSkillIsClippedByTheItemsWithLabels) {
  const std::vector<Annotation> triples = {
      {0, 0, 0}, {0, 1, 0}, {0, 2, 0}, {1, 0, 1}, {1, 1, 1}, {1, 2, 1},
      {2, 0, 0}, {2, 1, 0}, {2, 2, 0}, {3, 0, 1}, {3, 1, 1}, {3, 2, 1}};
  const AnnotationMatrix m = *AnnotationMatrix::Build(9, 3, 2, triples);
  std::unique_ptr<MmsrModel> model = CreateOrFail<MmsrModel>(2);
  ASSERT_THAT(model->Fit(m, {}, false), IsOk());
  for (int a = 0; a < 3; ++a) {
    EXPECT_NEAR(*model->AnnotatorWeight(a), std::log(3.0), 1e-9) << a;
    EXPECT_NEAR(model->AnnotatorConfusion(a)[0], 0.75, 1e-9) << a;
  }
}

// mmsr.h: the trimmed mean reproduces crowd-kit's _remove_largest_and_smallest_F_value with
// its edge cases. Two annotators share 2 items and agree on one (K = 2: C = 0), and annotator
// 0 alone labels 7 more items (n = 9 items with labels). Each annotator has one partner, so
// s = 1 and F = floor(1 / 2) - 1 = -1, and crowd-kit keeps y[-1:], the single value
// 0 / (other) = 0, which its edge case replaces by 1 / sqrt(n_tasks) = 1/3. Then u = v = 1/3,
// x = u = 1/3 (inside the clip [-1 + 1/3, 1 - 1/3]), p = x / 2 + 1/2 = 2/3 and
// w = ln(p / (1 - p)) = ln 2 for both.
TEST(MmsrTest, ASingleZeroValueIsReplacedAsInCrowdKit) {
  std::vector<Annotation> triples = {{0, 0, 0}, {0, 1, 0}, {1, 0, 0}, {1, 1, 1}};
  for (int32_t i = 2; i < 9; ++i) triples.push_back({i, 0, i % 2});
  const AnnotationMatrix m = *AnnotationMatrix::Build(9, 2, 2, triples);
  std::unique_ptr<MmsrModel> model = CreateOrFail<MmsrModel>(2);
  ASSERT_THAT(model->Fit(m, {}, false), IsOk());
  for (int a = 0; a < 2; ++a) {
    EXPECT_NEAR(*model->AnnotatorWeight(a), std::log(2.0), 1e-9) << a;
  }
}

// mmsr.h: AnnotatorConfusion is one-coin, p_j = x_j (K - 1) / K + 1 / K on the diagonal and
// (1 - p_j) / (K - 1) elsewhere. K = 3, x = 0.4: p = 0.6, every other cell 0.2.
TEST(MmsrTest, AnnotatorConfusionSpreadsTheErrorsOverTheOtherClasses) {
  ByteWriter writer;
  WriteModelHeader(writer, MmsrModel::kMethod, true);
  writer.WriteU32(3);
  writer.WriteU32(1);
  for (double v : {0.1, 0.4}) writer.WriteF64(v);
  std::unique_ptr<MmsrModel> model = CreateOrFail<MmsrModel>(3);
  ASSERT_THAT(model->Restore(writer.Finish()), IsOk());
  const std::vector<double> c = model->AnnotatorConfusion(0);
  ASSERT_EQ(c.size(), 9u);
  for (int t = 0; t < 3; ++t) {
    for (int y = 0; y < 3; ++y) {
      EXPECT_NEAR(c[3 * t + y], t == y ? 0.6 : 0.2, 1e-12) << t << "," << y;
    }
  }
}

TEST(MmsrTest, RefusesMoreAnnotatorsThanItsMatrixAllows) {
  std::vector<Annotation> triples;
  const int32_t n = MmsrModel::kMaxAnnotators + 1;
  for (int32_t a = 0; a < n; ++a) triples.push_back({a / 2, a, a % 2});
  const AnnotationMatrix m = *AnnotationMatrix::Build((n + 1) / 2, n, 2, triples);
  std::unique_ptr<MmsrModel> model = CreateOrFail<MmsrModel>(2);
  EXPECT_THAT(model->Fit(m, {}, false),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("5001 annotators")));
  EXPECT_FALSE(model->has_parameters());
}

TEST(MmsrTest, WarmStartFromAConvergedFitConvergesQuickly) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(MixedCrowdSpec());
  std::unique_ptr<MmsrModel> model = CreateOrFail<MmsrModel>(3);
  absl::StatusOr<FitReport> cold = model->Fit(crowd.matrix, {}, false);
  ASSERT_THAT(cold, IsOk());
  ASSERT_TRUE(cold->converged);
  const std::vector<int32_t> before = ArgMax(AllPosteriors(*model, crowd.matrix, {}), 3);
  absl::StatusOr<FitReport> warm = model->Fit(crowd.matrix, {}, true);
  ASSERT_THAT(warm, IsOk());
  EXPECT_TRUE(warm->converged);
  EXPECT_LT(warm->iterations, cold->iterations);
  EXPECT_EQ(ArgMax(AllPosteriors(*model, crowd.matrix, {}), 3), before);
}

TEST(MmsrTest, SerializeRestoreRoundTripsAndRejectsCorruptInput) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(MixedCrowdSpec());
  std::unique_ptr<MmsrModel> model = CreateOrFail<MmsrModel>(3);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());
  std::unique_ptr<MmsrModel> restored = CreateOrFail<MmsrModel>(3);
  ExpectSerializeRestoreContract(*model, *restored, *CreateOrFail<MmsrModel>(2), crowd.matrix, 11);
  // A skill estimate of 1 (p = 1, infinite weight) is refused.
  ByteWriter bad;
  WriteModelHeader(bad, MmsrModel::kMethod, true);
  bad.WriteU32(3);
  bad.WriteU32(0);
  bad.WriteF64(1.0);
  EXPECT_THAT(restored->Restore(bad.Finish()), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(AllPosteriors(*restored, crowd.matrix, {}),
            AllPosteriors(*model, crowd.matrix, {}));
  ASSERT_THAT(restored->Restore(CreateOrFail<MmsrModel>(3)->Serialize()), IsOk());
  EXPECT_FALSE(restored->has_parameters());
}

// mmsr.h: a skill estimate x maps to p = x (K - 1) / K + 1 / K; at the lower end of its range,
// x = -1 / (K - 1), p = 0 and the weight log(p (K - 1) / (1 - p)) is -infinity, so Restore
// refuses it as it refuses x = 1 (K = 3: x = -1/2), and the model keeps what it had. Just above
// it (x = -0.49, p = 0.0067) the weight is finite and the blob is accepted.
TEST(MmsrTest, RestoreRefusesTheSkillAtWhichTheWeightIsMinusInfinity) {
  const auto blob = [](double x) {
    ByteWriter writer;
    WriteModelHeader(writer, MmsrModel::kMethod, true);
    writer.WriteU32(3);
    writer.WriteU32(0);
    writer.WriteF64(x);
    return writer.Finish();
  };
  std::unique_ptr<MmsrModel> model = CreateOrFail<MmsrModel>(3);
  EXPECT_THAT(model->Restore(blob(-0.5)), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(model->has_parameters());
  ASSERT_THAT(model->Restore(blob(-0.49)), IsOk());
  ASSERT_TRUE(model->AnnotatorWeight(0).has_value());
  EXPECT_TRUE(std::isfinite(*model->AnnotatorWeight(0)));
}

// mmsr.h: x is clipped into [-1 / (K - 1) + 1 / sqrt(n), ..], a lower bound above 0 when n <
// (K - 1)^2. K = 10, two annotators who disagree on all of n = 4 items: |C| = 1/9, so the
// rank-one completion has x_0 x_1 = 1/9 and at least one x below the bound -1/9 + 1/2 = 7/18;
// clipped, no annotator's p = x 9/10 + 1/10 is below 7/20 + 1/10 = 0.45.
TEST(MmsrTest, TheSkillIsClippedFromBelowWhenThereAreFewItems) {
  std::vector<Annotation> triples;
  for (int32_t i = 0; i < 4; ++i) {
    triples.push_back({i, 0, i});
    triples.push_back({i, 1, i + 5});
  }
  const AnnotationMatrix m = *AnnotationMatrix::Build(4, 2, 10, triples);
  std::unique_ptr<MmsrModel> model = CreateOrFail<MmsrModel>(10);
  ASSERT_THAT(model->Fit(m, {}, false), IsOk());
  for (int a = 0; a < 2; ++a) EXPECT_GE(model->AnnotatorConfusion(a)[0], 0.45 - 1e-12) << a;
}

// mmsr.h: an annotator without labels, and the first id past the fitted ones, get the pooled
// weight (that of the label-weighted mean skill), the same as any other id outside the fit.
TEST(MmsrTest, AnAnnotatorWithoutLabelsAndTheNextIdGetThePooledWeight) {
  const std::vector<Annotation> triples = {{0, 0, 0}, {0, 1, 0}, {0, 2, 0}, {1, 0, 1},
                                           {1, 1, 1}, {1, 2, 0}, {2, 0, 0}, {2, 1, 1},
                                           {2, 2, 0}, {3, 0, 1}, {3, 1, 1}, {3, 2, 1}};
  const AnnotationMatrix m = *AnnotationMatrix::Build(4, 4, 2, triples);
  std::unique_ptr<MmsrModel> model = CreateOrFail<MmsrModel>(2);
  ASSERT_THAT(model->Fit(m, {}, false), IsOk());
  const double pooled = *model->AnnotatorWeight(-1);
  EXPECT_GT(pooled, 0.0);
  EXPECT_EQ(*model->AnnotatorWeight(3), pooled);  // in the matrix, without labels
  EXPECT_EQ(*model->AnnotatorWeight(4), pooled);  // the first id past the fit
}

// truth_model.h: a gold label clamps the posterior to one-hot, before a fit too (mmsr.h: the soft
// majority vote before a fit, which is one-hot on gold).
TEST(MmsrTest, BeforeAFitAGoldLabelClampsThePosterior) {
  std::unique_ptr<MmsrModel> model = CreateOrFail<MmsrModel>(2);
  std::vector<double> out(2);
  model->ItemPosterior({{3, 0}, {4, 0}}, 1, absl::MakeSpan(out));
  EXPECT_EQ(out, std::vector<double>({0.0, 1.0}));
}

// mmsr.h: Create is INVALID_ARGUMENT if num_classes < 2.
TEST(MmsrTest, CreateRefusesFewerThanTwoClasses) {
  EXPECT_THAT(MmsrModel::Create(1, {}).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(MmsrModel::Create(2, {}).status(), IsOk());
}

// truth_model.h / mmsr.h: ItemPosterior does not depend on the order of the labels, bit for bit
// (the labels are put in (annotator, label) order before the sums). Every item of the crowd,
// its labels given in reverse.
TEST(MmsrTest, PosteriorIsTheSameBitForBitForAnyOrderOfTheLabels) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(MixedCrowdSpec());
  std::unique_ptr<MmsrModel> model = CreateOrFail<MmsrModel>(3);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());
  EXPECT_EQ(ItemsWhosePosteriorDependsOnLabelOrder(*model, crowd.matrix), 0);
}

// mmsr.h: before a fit every annotator's confusion is uniform, 1 / K in every cell (K = 3).
TEST(MmsrTest, BeforeAFitTheConfusionIsUniformOverThreeClasses) {
  std::unique_ptr<MmsrModel> model = CreateOrFail<MmsrModel>(3);
  ExpectUniformConfusionBeforeAFit(*model);
}

// truth_model.h: ItemPosterior writes a probability distribution whatever the labels. 400 labels
// of class 1 from annotators outside the fit (pooled skill x = 0.8, p = 0.9: each adds ln 9 = 2.2
// to class 1, beyond exp's range in all) give class 1 probability 1, not an overflow.
TEST(MmsrTest, ManyAgreeingLabelsGiveAFinitePosterior) {
  ByteWriter writer;
  WriteModelHeader(writer, MmsrModel::kMethod, true);
  writer.WriteU32(2);    // classes
  writer.WriteU32(0);    // annotators: every id gets the pooled skill
  writer.WriteF64(0.8);  // pooled x
  std::unique_ptr<MmsrModel> model = CreateOrFail<MmsrModel>(2);
  ASSERT_THAT(model->Restore(writer.Finish()), IsOk());
  std::vector<Entry> labels;
  for (int32_t a = 0; a < 400; ++a) labels.push_back({a, 1});
  std::vector<double> out(2);
  model->ItemPosterior(labels, -1, absl::MakeSpan(out));
  EXPECT_EQ(out[0], 0.0);
  EXPECT_EQ(out[1], 1.0);
}

// truth_model.h: Fit is INVALID_ARGUMENT if data.num_classes() != num_classes() or if gold is
// neither empty nor of size data.num_items(), and a refused fit keeps the model as it was (MMSR
// does not read gold in its fit, yet it checks it like every method). The data of 3 classes
// holds only labels 0 and 1, and the gold vector has one entry too many.
TEST(MmsrTest, FitRefusesMismatchedInputAndKeepsTheModel) {
  const AnnotationMatrix m =
      *AnnotationMatrix::Build(2, 2, 2, {{0, 0, 0}, {0, 1, 0}, {1, 0, 1}, {1, 1, 0}});
  std::unique_ptr<MmsrModel> model = CreateOrFail<MmsrModel>(2);
  ASSERT_THAT(model->Fit(m, {}, false), IsOk());
  const std::string before = model->Serialize();
  const AnnotationMatrix three_classes =
      *AnnotationMatrix::Build(2, 2, 3, {{0, 0, 0}, {0, 1, 0}, {1, 0, 1}, {1, 1, 0}});
  EXPECT_THAT(model->Fit(three_classes, {}, false), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(model->Fit(m, std::vector<int32_t>{0, 1, -1}, false),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("gold")));
  EXPECT_EQ(model->Serialize(), before);
}

// mmsr.h: a cold fit starts u and v from the draw of std::mt19937(0); only a warm start (model
// with parameters) starts from the previous |x|. So a cold fit on a model fitted to another
// crowd gives, bit for bit, the parameters of a fresh model's fit.
TEST(MmsrTest, AColdFitIgnoresTheParametersOfAnEarlierFit) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(MixedCrowdSpec());
  std::vector<Annotation> half;
  for (const Annotation& a : crowd.annotations) {
    if (a.item < 400) half.push_back(a);
  }
  const AnnotationMatrix small = *AnnotationMatrix::Build(400, crowd.matrix.num_annotators(),
                                                          crowd.matrix.num_classes(), half);
  std::unique_ptr<MmsrModel> fresh = CreateOrFail<MmsrModel>(3);
  ASSERT_THAT(fresh->Fit(small, {}, false), IsOk());
  std::unique_ptr<MmsrModel> refitted = CreateOrFail<MmsrModel>(3);
  ASSERT_THAT(refitted->Fit(crowd.matrix, {}, false), IsOk());
  ASSERT_THAT(refitted->Fit(small, {}, /*warm_start=*/false), IsOk());
  EXPECT_EQ(refitted->Serialize(), fresh->Serialize());
}

// mmsr.h: Fit refuses more than kMaxAnnotators annotators with labels, so exactly
// kMaxAnnotators are fitted. Pairs of annotators (2i, 2i + 1) label item i, and disagree.
TEST(MmsrTest, FitsExactlyAsManyAnnotatorsAsItsMatrixAllows) {
  std::vector<Annotation> triples;
  const int32_t n = MmsrModel::kMaxAnnotators;
  for (int32_t a = 0; a < n; ++a) triples.push_back({a / 2, a, a % 2});
  const AnnotationMatrix m = *AnnotationMatrix::Build(n / 2, n, 2, triples);
  std::unique_ptr<MmsrModel> model = CreateOrFail<MmsrModel>(2);
  ASSERT_THAT(model->Fit(m, {}, false), IsOk());
  EXPECT_TRUE(model->has_parameters());
}

// mmsr.h: each entry is the mean of the values kept by crowd-kit's
// _remove_largest_and_smallest_F_value, with its edge cases; the start is numpy's
// RandomState(0).random_sample, whose first three numbers are r0 = 0.5488135039273248,
// r1 = 0.7151893663724195 and r2 = 0.6027633760716439. K = 2; annotator 0 shares two items with
// annotator 1 and two with annotator 2 and agrees on all (C = 1), and labels 996 more items
// alone (n = 1000). Annotators 1 and 2 have one partner each, so s = 1 and F = -1: crowd-kit
// keeps y[-1:] (the largest value) and then y[:len + 1], so every row keeps one value, which is
// not 0 and so is not replaced. The first half-step gives v0 = max(1 / r1, 1 / r2) = 1 / r2,
// v1 = v2 = 1 / r0, the second u = (r0, r2, r2), and nothing moves after that. Then
// |u| / |v| = r0 r2, so x0 = sqrt(r0 / r2) = 0.9542 and x1 = x2 = sqrt(r2 / r0) = 1.048,
// clipped to 1 - 1 / sqrt(1000); the weight is ln(p / (1 - p)) = ln((1 + x) / (1 - x)).
// (Keeping both of row 0's values would give x0 = 0.9159.)
TEST(MmsrTest, WithFMinusOneEachRowKeepsItsLargestValueAsInCrowdKit) {
  std::vector<Annotation> triples = {{0, 0, 0}, {0, 1, 0}, {1, 0, 0}, {1, 1, 0},
                                     {2, 0, 1}, {2, 2, 1}, {3, 0, 1}, {3, 2, 1}};
  for (int32_t i = 4; i < 1000; ++i) triples.push_back({i, 0, i % 2});
  const AnnotationMatrix m = *AnnotationMatrix::Build(1000, 3, 2, triples);
  std::unique_ptr<MmsrModel> model = CreateOrFail<MmsrModel>(2);
  ASSERT_THAT(model->Fit(m, {}, false), IsOk());
  const double r0 = 0.5488135039273248, r2 = 0.6027633760716439;
  const double x0 = std::sqrt(r0 / r2);
  const double x1 = 1 - 1 / std::sqrt(1000.0);
  EXPECT_NEAR(*model->AnnotatorWeight(0), std::log((1 + x0) / (1 - x0)), 1e-9);
  EXPECT_NEAR(*model->AnnotatorWeight(1), std::log((1 + x1) / (1 - x1)), 1e-9);
  EXPECT_NEAR(*model->AnnotatorWeight(2), std::log((1 + x1) / (1 - x1)), 1e-9);
}

// mmsr.h: a partner whose current estimate is 0 (every agreement of it at chance) is left out
// of the trimmed means, where crowd-kit divides by it. K = 2, 6 annotators; each listed pair
// shares its own items: pairs 0-2, 1-2, 2-3, 2-4, 3-4, 3-5 and 4-5 agree on one item (C = 1),
// pairs of 0 or 1 with 3, 4 or 5 agree on one of two (C = 0). Every annotator has 4 or 5
// partners, so F = 1. Row 0 holds {1 / (partner 2), 0, 0, 0}; with its estimate between 0 and
// the nonzero value, crowd-kit drops the smallest and the largest value and keeps {0, 0}, so
// the estimates of annotators 0 and 1 fall to 0 (and stay there). Then row 2 holds 1 / 0 twice,
// and a trim of one leaves one infinity, which would spread to the other estimates. Left out,
// the fit converges; annotators 0 and 1 get x = 0: p = 1/2, weight ln 1 = 0; annotators 2 to 5,
// whose observed pairs all have C = x_i x_j = 1, get x near 1 (0.90 to 1.11), above the clip
// 1 - 1 / sqrt(19) (19 items), so the weight ln((1 + x) / (1 - x)) of the clipped x.
TEST(MmsrTest, APartnerWhoseEstimateIsZeroIsLeftOutOfTheMeans) {
  std::vector<Annotation> triples;
  int32_t item = 0;
  for (const auto& [a, b] : std::vector<std::pair<int32_t, int32_t>>{
           {0, 2}, {1, 2}, {2, 3}, {2, 4}, {3, 4}, {3, 5}, {4, 5}}) {
    triples.push_back({item, a, 0});
    triples.push_back({item++, b, 0});
  }
  for (int32_t a : {0, 1}) {
    for (int32_t b : {3, 4, 5}) {
      triples.push_back({item, a, 0});
      triples.push_back({item++, b, 0});
      triples.push_back({item, a, 0});
      triples.push_back({item++, b, 1});
    }
  }
  const AnnotationMatrix m = *AnnotationMatrix::Build(item, 6, 2, triples);
  std::unique_ptr<MmsrModel> model = CreateOrFail<MmsrModel>(2);
  absl::StatusOr<FitReport> report = model->Fit(m, {}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_TRUE(report->converged);
  for (int32_t a = -1; a < 6; ++a) {
    ASSERT_TRUE(model->AnnotatorWeight(a).has_value()) << a;
    EXPECT_TRUE(std::isfinite(*model->AnnotatorWeight(a))) << a;
  }
  EXPECT_NEAR(*model->AnnotatorWeight(0), 0.0, 1e-12);
  EXPECT_NEAR(*model->AnnotatorWeight(1), 0.0, 1e-12);
  const double clipped = 1 - 1 / std::sqrt(19.0);
  for (int32_t a = 2; a < 6; ++a) {
    EXPECT_NEAR(*model->AnnotatorWeight(a), std::log((1 + clipped) / (1 - clipped)), 1e-9) << a;
  }
  for (double p : AllPosteriors(*model, m, {})) EXPECT_TRUE(p >= 0.0 && p <= 1.0) << p;
}

// truth_model.h: Restore refuses a blob with bytes after the model (under a valid checksum)
// and keeps what the model had: no parameters for a fresh model, the fitted ones otherwise.
TEST(MmsrTest, RestoreRefusesTrailingBytesAndKeepsTheModel) {
  const AnnotationMatrix m =
      *AnnotationMatrix::Build(2, 2, 2, {{0, 0, 0}, {0, 1, 0}, {1, 0, 1}, {1, 1, 0}});
  std::unique_ptr<MmsrModel> model = CreateOrFail<MmsrModel>(2);
  ASSERT_THAT(model->Fit(m, {}, false), IsOk());
  const std::string blob = model->Serialize();
  std::unique_ptr<MmsrModel> fresh = CreateOrFail<MmsrModel>(2);
  EXPECT_THAT(fresh->Restore(WithTrailingBytes(blob)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(fresh->has_parameters());
  ByteWriter other;
  WriteModelHeader(other, MmsrModel::kMethod, true);
  other.WriteU32(2);    // classes
  other.WriteU32(0);    // annotators
  other.WriteF64(0.5);  // pooled x
  EXPECT_THAT(model->Restore(WithTrailingBytes(other.Finish())),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(model->Serialize(), blob);
}

// mmsr.h: the fit stops when ||u v^T - u' v'^T||_F < 1e-10 (crowd-kit's tol), the Frobenius norm
// of the whole change, cross terms included. On this crowd (5 annotators, 7 items, K = 2), in the
// last iterations u and v move the same way, so du v^T and u' dv^T add up (2 (du . u') (v . dv)
// > 0): the norm first falls below 1e-10 at iteration 66 (it is >= 1.16e-10 before), while the
// squares |du|^2 |v|^2 + |u'|^2 |dv|^2 alone would put it under (0.84e-10) at iteration 65. The
// sorting reference computes the norm from the dense matrices.
TEST(MmsrTest, StopsOnTheNormOfTheWholeChangeOfTheRankOneMatrix) {
  const std::vector<Annotation> triples = {{0, 3, 0}, {0, 0, 0}, {1, 3, 1}, {1, 1, 1}, {2, 1, 0},
                                           {2, 3, 1}, {3, 4, 1}, {3, 3, 0}, {3, 1, 1}, {4, 4, 1},
                                           {4, 1, 1}, {4, 2, 1}, {5, 1, 1}, {5, 0, 0}, {5, 3, 0},
                                           {6, 1, 1}, {6, 2, 0}, {6, 0, 0}};
  const AnnotationMatrix m = *AnnotationMatrix::Build(7, 5, 2, triples);
  const ReferenceFit reference = SortingReferenceFit(m);
  EXPECT_EQ(reference.iterations, 66);
  std::unique_ptr<MmsrModel> model = CreateOrFail<MmsrModel>(2);
  absl::StatusOr<FitReport> report = model->Fit(m, {}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_TRUE(report->converged);
  EXPECT_EQ(report->iterations, reference.iterations);
  for (int a = 0; a < 5; ++a) {
    EXPECT_NEAR(*model->AnnotatorWeight(a), reference.weights[a], 1e-12) << a;
  }
}

// mmsr.h: AnnotatorWeight is nullopt before a fit, and again after restoring a model without
// parameters.
TEST(MmsrTest, TheWeightIsNulloptBeforeAFit) {
  std::unique_ptr<MmsrModel> model = CreateOrFail<MmsrModel>(2);
  EXPECT_FALSE(model->AnnotatorWeight(0).has_value());
  EXPECT_FALSE(model->AnnotatorWeight(-1).has_value());
  const std::string empty = model->Serialize();
  ASSERT_THAT(model->Fit(*AnnotationMatrix::Build(1, 2, 2, {{0, 0, 0}, {0, 1, 0}}), {}, false),
              IsOk());
  ASSERT_TRUE(model->AnnotatorWeight(0).has_value());
  ASSERT_THAT(model->Restore(empty), IsOk());
  EXPECT_FALSE(model->AnnotatorWeight(0).has_value());
}

}  // namespace
}  // namespace verity::models

#include "models/mmsr.h"

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

}  // namespace
}  // namespace verity::models

#include "models/confusion_parameters.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/binary_codec.h"
#include "common/status_matchers.h"

namespace verity::models {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;
using Entry = AnnotationMatrix::Entry;

TEST(ConfusionParametersTest, EstimateFollowsTheDocumentedFormula) {
  // Two annotators, K = 2. Annotator 0 labels two items of certain class 0
  // as 0 and 1; annotator 1 has no labels.
  ConfusionCounts counts(2, 2);
  const double class0[] = {1.0, 0.0};
  const std::vector<Entry> item_a = {{0, 0}};
  const std::vector<Entry> item_b = {{0, 1}};
  counts.AddItem(item_a, class0);
  counts.AddItem(item_b, class0);

  TruthModelOptions options;
  options.confusion_smoothing = 0.5;
  options.population_smoothing = 1.0;
  options.prior_smoothing = 1.0;
  const ConfusionParameters p = EstimateParameters(counts, options);

  // Prior: (2 + 1) / (2 + 2), (0 + 1) / (2 + 2).
  EXPECT_THAT(p.ClassPrior(), ElementsAre(0.75, 0.25));
  // Population = pooled counts + 0.5: row 0 = (1.5, 1.5) / 3, row 1 uniform.
  EXPECT_THAT(p.Confusion(-1), ElementsAre(0.5, 0.5, 0.5, 0.5));
  // Annotator 0 row 0: (1 + 0.5 + 1 * 0.5) / (2 + 1 + 1) = 0.5 each; row 1:
  // (0 + 0.5 + 0.5) / (0 + 1 + 1) = 0.5 each.
  EXPECT_THAT(p.Confusion(0), ElementsAre(0.5, 0.5, 0.5, 0.5));
  // Annotator 1, without labels, has exactly the population confusion.
  EXPECT_EQ(p.Confusion(1), p.Confusion(-1));
}

TEST(ConfusionParametersTest, AsymmetricCountsAndPosterior) {
  ConfusionCounts counts(2, 1);
  const double class1[] = {0.0, 1.0};
  const std::vector<Entry> says1 = {{0, 1}};
  for (int i = 0; i < 8; ++i) counts.AddItem(says1, class1);
  TruthModelOptions options;
  options.confusion_smoothing = 1.0;
  options.population_smoothing = 0.0;
  const ConfusionParameters p = EstimateParameters(counts, options);
  // Row 1: (0 + 1, 8 + 1) / 10; row 0 has no mass: uniform.
  EXPECT_THAT(p.Confusion(0), ElementsAre(0.5, 0.5, DoubleNear(0.1, 1e-15),
                                          DoubleNear(0.9, 1e-15)));
  // Prior (0 + 1, 8 + 1) / 10. Posterior of one label 1 from annotator 0:
  // p1 ∝ 0.9 * 0.9, p0 ∝ 0.1 * 0.5.
  std::vector<double> out(2);
  const double ll = p.Posterior(says1, -1, absl::MakeSpan(out));
  EXPECT_NEAR(out[1], 0.81 / (0.81 + 0.05), 1e-12);
  EXPECT_NEAR(ll, std::log(0.81 + 0.05), 1e-12);
  // With gold: one-hot, and the joint log-probability.
  const double gold_ll = p.Posterior(says1, 0, absl::MakeSpan(out));
  EXPECT_THAT(out, ElementsAre(1.0, 0.0));
  EXPECT_NEAR(gold_ll, std::log(0.05), 1e-12);
}

TEST(ConfusionParametersTest, ResizeGivesNewAnnotatorsThePopulation) {
  ConfusionCounts counts(3, 1);
  const double post[] = {0.2, 0.3, 0.5};
  const std::vector<Entry> labels = {{0, 2}};
  counts.AddItem(labels, post);
  ConfusionParameters p = EstimateParameters(counts, TruthModelOptions());
  const std::vector<double> own = p.Confusion(0);
  p.ResizeAnnotators(3);
  EXPECT_EQ(p.num_annotators(), 3);
  EXPECT_EQ(p.Confusion(0), own);
  EXPECT_EQ(p.Confusion(2), p.Confusion(-1));
  EXPECT_EQ(p.LogColumn(2, 1)[0], p.LogColumn(-1, 1)[0]);
}

TEST(ConfusionParametersTest, ParseRejectsNonDistributions) {
  ConfusionParameters p(2);
  ByteWriter w;
  p.Serialize(w);
  std::string blob = w.Finish();
  {
    absl::StatusOr<ByteReader> r = ByteReader::Open(blob);
    ASSERT_THAT(r, IsOk());
    EXPECT_THAT(ConfusionParameters::Parse(*r, 2), IsOk());
  }
  // Same layout, but the prior is (0.7, 0.7).
  ByteWriter bad;
  bad.WriteU32(2);
  bad.WriteU32(0);
  bad.WriteF64(0.7);
  bad.WriteF64(0.7);
  for (int i = 0; i < 4; ++i) bad.WriteF64(0.5);
  blob = bad.Finish();
  absl::StatusOr<ByteReader> r = ByteReader::Open(blob);
  ASSERT_THAT(r, IsOk());
  EXPECT_THAT(ConfusionParameters::Parse(*r, 2),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ConfusionParametersTest, ParseRejectsHugeAnnotatorCountsWithoutAllocating) {
  ByteWriter w;
  w.WriteU32(2);
  w.WriteU32(0x7ffffff0);  // claims 2^31 annotators, holds none
  w.WriteF64(0.5);
  w.WriteF64(0.5);
  const std::string blob = w.Finish();
  absl::StatusOr<ByteReader> r = ByteReader::Open(blob);
  ASSERT_THAT(r, IsOk());
  EXPECT_THAT(ConfusionParameters::Parse(*r, 2),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ConfusionParametersTest, CanonicalLabelsSortsOnlyWhenNeeded) {
  std::vector<Entry> scratch;
  const std::vector<Entry> sorted = {{1, 0}, {2, 1}, {2, 2}};
  EXPECT_EQ(CanonicalLabels(sorted, scratch).data(), sorted.data());
  const std::vector<Entry> unsorted = {{2, 1}, {1, 0}};
  absl::Span<const Entry> c = CanonicalLabels(unsorted, scratch);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].other, 1);
  EXPECT_EQ(c[1].other, 2);
}

}  // namespace
}  // namespace verity::models

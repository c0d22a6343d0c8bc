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

TEST(ConfusionParametersTest, PopulationDiagonalIsOnThePopulationOnly) {
  ConfusionCounts counts(2, 2);
  const double class0[] = {1.0, 0.0};
  const std::vector<Entry> says0 = {{0, 0}};
  counts.AddItem(says0, class0);
  TruthModelOptions options;
  options.confusion_smoothing = 0.5;
  options.population_smoothing = 1.0;
  const ConfusionParameters p = EstimateParameters(counts, options, 2.0);
  // Population row 0: (1 + 0.5 + 2, 0 + 0.5) / (1 + 1 + 2); row 1 without
  // counts: (0.5, 0.5 + 2) / 3.
  EXPECT_THAT(p.Confusion(-1),
              ElementsAre(DoubleNear(3.5 / 4, 1e-15),
                          DoubleNear(0.5 / 4, 1e-15),
                          DoubleNear(0.5 / 3, 1e-15),
                          DoubleNear(2.5 / 3, 1e-15)));
  // Annotator 0 is shrunk toward it and gets no pseudo-count of its own:
  // row 0 = (1 + 0.5 + 3.5 / 4, 0 + 0.5 + 0.5 / 4) / (1 + 1 + 1).
  const std::vector<double> c = p.Confusion(0);
  EXPECT_NEAR(c[0], (1.5 + 3.5 / 4) / 3, 1e-15);
  EXPECT_NEAR(c[1], (0.5 + 0.5 / 4) / 3, 1e-15);
  // An annotator without labels has the population confusion, and without
  // the argument the M-step is the one mv uses.
  EXPECT_EQ(p.Confusion(1), p.Confusion(-1));
  EXPECT_THAT(EstimateParameters(counts, options).Confusion(-1),
              ElementsAre(DoubleNear(1.5 / 2, 1e-15),
                          DoubleNear(0.5 / 2, 1e-15), 0.5, 0.5));
}

TEST(ConfusionParametersTest, RemoveItemUndoesAddItem) {
  ConfusionCounts counts(3, 2);
  const double a[] = {0.2, 0.3, 0.5};
  const double b[] = {0.6, 0.1, 0.3};
  const std::vector<Entry> first = {{0, 2}, {1, 0}};
  const std::vector<Entry> second = {{1, 1}};
  counts.AddItem(first, a);
  ConfusionCounts only_first = counts;
  counts.AddItem(second, b);
  counts.RemoveItem(second, b);
  const TruthModelOptions options;
  EXPECT_EQ(EstimateParameters(counts, options).Confusion(1),
            EstimateParameters(only_first, options).Confusion(1));
  counts.RemoveItem(first, a);
  // Nothing left: both annotators fall back to the population, which is
  // uniform without counts.
  const ConfusionParameters empty = EstimateParameters(counts, options);
  EXPECT_EQ(empty.Confusion(0), empty.Confusion(-1));
  for (double p : empty.Confusion(-1)) EXPECT_NEAR(p, 1.0 / 3, 1e-15);
  EXPECT_THAT(empty.ClassPrior(), ElementsAre(1.0 / 3, 1.0 / 3, 1.0 / 3));
}

TEST(ConfusionParametersTest, CountsResizeAndSerializeRoundTrip) {
  ConfusionCounts counts(2, 1);
  const double post[] = {0.25, 0.75};
  const std::vector<Entry> labels = {{0, 1}};
  counts.AddItem(labels, post);
  counts.ResizeAnnotators(3);
  EXPECT_EQ(counts.num_annotators(), 3);
  const std::vector<Entry> new_annotator = {{2, 0}};
  counts.AddItem(new_annotator, post);

  ByteWriter w;
  counts.Serialize(w);
  const std::string blob = w.Finish();
  absl::StatusOr<ByteReader> r = ByteReader::Open(blob);
  ASSERT_THAT(r, IsOk());
  absl::StatusOr<ConfusionCounts> parsed = ConfusionCounts::Parse(*r, 2);
  ASSERT_THAT(parsed, IsOk());
  EXPECT_THAT(r->ExpectEnd(), IsOk());
  const TruthModelOptions options;
  const ConfusionParameters before = EstimateParameters(counts, options);
  const ConfusionParameters after = EstimateParameters(*parsed, options);
  for (int32_t a = -1; a < 3; ++a) {
    EXPECT_EQ(after.Confusion(a), before.Confusion(a)) << a;
  }
  EXPECT_EQ(after.ClassPrior(), before.ClassPrior());

  absl::StatusOr<ByteReader> r3 = ByteReader::Open(blob);
  ASSERT_THAT(r3, IsOk());
  EXPECT_THAT(ConfusionCounts::Parse(*r3, 3),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ConfusionParametersTest, ModelBlobWithAMethodSection) {
  const ConfusionParameters params(2);
  const std::string plain = SerializeConfusionModel("ds", params);
  const std::string extended = SerializeConfusionModel(
      "ds", params, [](ByteWriter& w) { w.WriteU32(42); });
  // Without a reader for it, a section is trailing garbage.
  EXPECT_THAT(ParseConfusionModel(extended, "ds", 2),
              StatusIs(absl::StatusCode::kInvalidArgument));
  uint32_t seen = 0;
  int calls = 0;
  auto read = [&](ByteReader& r) -> absl::Status {
    ++calls;
    absl::StatusOr<uint32_t> v = r.ReadU32();
    if (!v.ok()) return v.status();
    seen = *v;
    return absl::OkStatus();
  };
  ASSERT_THAT(ParseConfusionModel(extended, "ds", 2, read), IsOk());
  EXPECT_EQ(seen, 42u);
  EXPECT_EQ(calls, 1);
  // A blob without a section does not call the reader.
  ASSERT_THAT(ParseConfusionModel(plain, "ds", 2, read), IsOk());
  EXPECT_EQ(calls, 1);
  // The reader's error is returned, and an unread rest is rejected.
  EXPECT_THAT(ParseConfusionModel(extended, "ds", 2,
                                  [](ByteReader&) {
                                    return absl::InvalidArgumentError("no");
                                  }),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(
      ParseConfusionModel(extended, "ds", 2,
                          [](ByteReader&) { return absl::OkStatus(); }),
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

#include "models/confusion_parameters.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
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
  EXPECT_EQ(p.LogCell(2, 1, 0), p.LogCell(-1, 1, 0));
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

// The sparse representation (issue 23, point 1): an annotator keeps the columns of the labels
// it gave; the others follow from the smoothing prior. Checked against the formula of
// TruthModelOptions computed here densely, cell by cell.
TEST(ConfusionParametersTest, ColumnsNotKeptFollowTheDocumentedFormula) {
  constexpr int32_t kClasses = 4;
  ConfusionCounts counts(kClasses, 3);
  const double post_a[] = {0.7, 0.1, 0.1, 0.1};
  const double post_b[] = {0.0, 0.2, 0.8, 0.0};
  counts.AddItem(std::vector<Entry>{{0, 0}, {1, 0}}, post_a);
  counts.AddItem(std::vector<Entry>{{0, 2}, {1, 3}}, post_b);
  // Annotator 2 gives no label. Annotators 0 and 1 gave two labels each.
  EXPECT_EQ(counts.num_columns(), 4);
  TruthModelOptions options;
  options.confusion_smoothing = 0.3;
  options.population_smoothing = 1.5;
  const ConfusionParameters p = EstimateParameters(counts, options, 0.7);
  EXPECT_EQ(p.num_own_annotators(), 2);
  EXPECT_EQ(p.num_own_columns(), 4);

  // n[a][k][l]: the expected counts, dense, from the two items.
  double n[3][kClasses][kClasses] = {};
  for (int k = 0; k < kClasses; ++k) {
    n[0][k][0] += post_a[k];
    n[1][k][0] += post_a[k];
    n[0][k][2] += post_b[k];
    n[1][k][3] += post_b[k];
  }
  const std::vector<double> pop = p.Confusion(-1);
  for (int k = 0; k < kClasses; ++k) {
    double pooled_row = 0;
    for (int l = 0; l < kClasses; ++l) pooled_row += n[0][k][l] + n[1][k][l];
    for (int l = 0; l < kClasses; ++l) {
      const double expected = (n[0][k][l] + n[1][k][l] + 0.3 + (k == l ? 0.7 : 0.0)) /
                              (pooled_row + kClasses * 0.3 + 0.7);
      EXPECT_NEAR(pop[k * kClasses + l], expected, 1e-15) << k << " " << l;
    }
  }
  for (int a = 0; a < 2; ++a) {
    const std::vector<double> c = p.Confusion(a);
    const std::vector<double> diagonal = p.ConfusionDiagonal(a);
    for (int k = 0; k < kClasses; ++k) {
      double row = 0;
      for (int l = 0; l < kClasses; ++l) row += n[a][k][l];
      double row_sum = 0;
      for (int l = 0; l < kClasses; ++l) {
        const double expected =
            (n[a][k][l] + 0.3 + 1.5 * pop[k * kClasses + l]) / (row + kClasses * 0.3 + 1.5);
        EXPECT_NEAR(c[k * kClasses + l], expected, 1e-15) << a << " " << k << " " << l;
        EXPECT_NEAR(p.LogCell(a, l, k), std::log(expected), 1e-13);
        row_sum += c[k * kClasses + l];
      }
      EXPECT_NEAR(row_sum, 1.0, 1e-14);
      EXPECT_EQ(diagonal[k], c[k * kClasses + k]);
    }
  }
  EXPECT_EQ(p.Confusion(2), pop);

  // The posterior of an item whose labels include a column annotator 1 does not keep (it
  // never gave label 1): prior times the confusion cells, normalised.
  const std::vector<Entry> labels = {{0, 1}, {1, 1}, {2, 3}};
  std::vector<double> posterior(kClasses);
  const double ll = p.Posterior(labels, -1, absl::MakeSpan(posterior));
  std::vector<double> joint(kClasses);
  double evidence = 0;
  const std::vector<double> prior = p.ClassPrior();
  for (int k = 0; k < kClasses; ++k) {
    joint[k] = prior[k];
    for (const Entry& e : labels) joint[k] *= p.Confusion(e.other)[k * kClasses + e.label];
    evidence += joint[k];
  }
  for (int k = 0; k < kClasses; ++k) EXPECT_NEAR(posterior[k], joint[k] / evidence, 1e-14);
  EXPECT_NEAR(ll, std::log(evidence), 1e-13);
}

// Size: at 256 classes, 2,000 annotators with one label each keep one column each, not a
// 256 x 256 matrix; serialized, the parameters take O((labels + annotators) x K) bytes.
TEST(ConfusionParametersTest, ManyClassesAndAnnotatorsKeepOnlyTheColumnsTheirLabelsTouched) {
  constexpr int32_t kClasses = 256;
  constexpr int32_t kAnnotators = 2000;
  ConfusionCounts counts(kClasses, kAnnotators);
  std::vector<double> posterior(kClasses, 0.0);
  for (int32_t item = 0; item < kAnnotators / 4; ++item) {
    std::fill(posterior.begin(), posterior.end(), 0.0);
    posterior[item % kClasses] = 1.0;
    std::vector<Entry> labels;
    for (int32_t j = 0; j < 4; ++j) labels.push_back({4 * item + j, item % kClasses});
    counts.AddItem(labels, posterior.data());
  }
  EXPECT_EQ(counts.num_columns(), kAnnotators);
  const ConfusionParameters p = EstimateParameters(counts, TruthModelOptions(), 1.0);
  EXPECT_EQ(p.num_own_annotators(), kAnnotators);
  EXPECT_EQ(p.num_own_columns(), kAnnotators);
  ByteWriter params_writer;
  p.Serialize(params_writer);
  ByteWriter counts_writer;
  counts.Serialize(counts_writer);
  // Per annotator: K denominators and one column of K doubles (parameters), one column of K
  // doubles (counts); dense, each would be 256 x 256 doubles (1 GB in all).
  const size_t per_annotator = 8 * kClasses;
  EXPECT_LT(params_writer.Finish().size(), 3 * per_annotator * kAnnotators);
  EXPECT_LT(counts_writer.Finish().size(), 2 * per_annotator * kAnnotators);
}

// The sparse layout round-trips bit for bit, and the dense layout of earlier builds still
// parses to the same confusions.
TEST(ConfusionParametersTest, SparseAndEarlierDenseLayoutsParse) {
  constexpr int32_t kClasses = 3;
  ConfusionCounts counts(kClasses, 3);
  const double post[] = {0.6, 0.3, 0.1};
  counts.AddItem(std::vector<Entry>{{0, 0}, {1, 2}}, post);
  const ConfusionParameters p = EstimateParameters(counts, TruthModelOptions(), 1.0);

  ByteWriter w;
  p.Serialize(w);
  const std::string blob = w.Finish();
  absl::StatusOr<ByteReader> r = ByteReader::Open(blob);
  ASSERT_THAT(r, IsOk());
  absl::StatusOr<ConfusionParameters> parsed = ConfusionParameters::Parse(*r, kClasses);
  ASSERT_THAT(parsed, IsOk());
  EXPECT_THAT(r->ExpectEnd(), IsOk());
  const std::vector<Entry> labels = {{0, 1}, {1, 2}, {2, 0}};
  std::vector<double> before(kClasses), after(kClasses);
  EXPECT_EQ(p.Posterior(labels, -1, absl::MakeSpan(before)),
            parsed->Posterior(labels, -1, absl::MakeSpan(after)));
  EXPECT_EQ(before, after);
  for (int32_t a = -1; a < 3; ++a) EXPECT_EQ(parsed->Confusion(a), p.Confusion(a)) << a;

  // Dense: K, A, the prior, then for the population and each annotator K rows of K
  // (row = true class).
  ByteWriter dense;
  dense.WriteU32(kClasses);
  dense.WriteU32(3);
  for (double q : p.ClassPrior()) dense.WriteF64(q);
  for (int32_t a = -1; a < 3; ++a) {
    for (double q : p.Confusion(a)) dense.WriteF64(q);
  }
  const std::string dense_blob = dense.Finish();
  absl::StatusOr<ByteReader> dr = ByteReader::Open(dense_blob);
  ASSERT_THAT(dr, IsOk());
  absl::StatusOr<ConfusionParameters> from_dense = ConfusionParameters::Parse(*dr, kClasses);
  ASSERT_THAT(from_dense, IsOk());
  for (int32_t a = -1; a < 3; ++a) {
    EXPECT_EQ(from_dense->Confusion(a), p.Confusion(a)) << a;
  }

  // A sparse blob whose annotator row does not sum to one is refused.
  std::string corrupt = blob;
  // The last 8 bytes before the checksum are the last probability of the last column.
  const size_t last = corrupt.size() - 8 - 8;
  const double wrong = 0.999;
  std::memcpy(&corrupt[last], &wrong, 8);
  // Recompute the checksum (FNV-1a of the payload, little-endian) over the altered payload.
  const uint64_t checksum = Fnv1a64(std::string_view(corrupt).substr(0, corrupt.size() - 8));
  for (int i = 0; i < 8; ++i) {
    corrupt[corrupt.size() - 8 + i] = static_cast<char>((checksum >> (8 * i)) & 0xff);
  }
  absl::StatusOr<ByteReader> cr = ByteReader::Open(corrupt);
  ASSERT_THAT(cr, IsOk());
  EXPECT_THAT(ConfusionParameters::Parse(*cr, kClasses),
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

// SoftMajorityVote (confusion_parameters.h): (count_k + smoothing) / (n + K * smoothing), and
// one-hot with gold. Three labels 0, 0, 1 over K = 3 classes with smoothing 0.5:
// (2.5, 1.5, 0.5) / (3 + 1.5) = (5/9, 3/9, 1/9), a distribution.
TEST(ConfusionParametersTest, SoftMajorityVoteFollowsTheDocumentedFormula) {
  const std::vector<Entry> labels = {{0, 0}, {1, 0}, {2, 1}};
  std::vector<double> out(3, -1.0);
  SoftMajorityVote(labels, -1, 0.5, absl::MakeSpan(out));
  EXPECT_THAT(out, ElementsAre(DoubleNear(5.0 / 9, 1e-15), DoubleNear(3.0 / 9, 1e-15),
                               DoubleNear(1.0 / 9, 1e-15)));
  SoftMajorityVote(labels, 2, 0.5, absl::MakeSpan(out));
  EXPECT_THAT(out, ElementsAre(0.0, 0.0, 1.0));
  // Gold class 0 is gold too.
  SoftMajorityVote(labels, 0, 0.5, absl::MakeSpan(out));
  EXPECT_THAT(out, ElementsAre(1.0, 0.0, 0.0));
}

// The E-step must stay finite when the classes' scores differ by more than exp can represent.
// Annotator 0: 9 items of certain class 0 labelled 0, 9 of certain class 1 labelled 1;
// confusion_smoothing 1, population_smoothing 0, prior_smoothing 1: theta row 0 =
// (10/11, 1/11), row 1 = (1/11, 10/11), prior (1/2, 1/2). An item with 400 labels 1 from it:
// log joint of class 0 = log(1/2) + 400 log(1/11) (about -960), of class 1 = log(1/2) +
// 400 log(10/11) (about -39): the posterior of class 1 is 1 / (1 + 10^-400) = 1 in doubles,
// and log p(labels) = log(1/2) + 400 log(10/11) + log(1 + 10^-400) = log(1/2) + 400 log(10/11).
TEST(ConfusionParametersTest, PosteriorIsStableWhenScoresDifferByHundredsOfNats) {
  ConfusionCounts counts(2, 1);
  const double class0[] = {1.0, 0.0};
  const double class1[] = {0.0, 1.0};
  for (int i = 0; i < 9; ++i) {
    counts.AddItem(std::vector<Entry>{{0, 0}}, class0);
    counts.AddItem(std::vector<Entry>{{0, 1}}, class1);
  }
  TruthModelOptions options;
  options.confusion_smoothing = 1.0;
  options.population_smoothing = 0.0;
  options.prior_smoothing = 1.0;
  const ConfusionParameters p = EstimateParameters(counts, options);
  EXPECT_THAT(p.Confusion(0), ElementsAre(DoubleNear(10.0 / 11, 1e-15), DoubleNear(1.0 / 11, 1e-15),
                                          DoubleNear(1.0 / 11, 1e-15), DoubleNear(10.0 / 11, 1e-15)));
  const std::vector<Entry> many(400, Entry{0, 1});
  std::vector<double> out(2);
  const double ll = p.Posterior(many, -1, absl::MakeSpan(out));
  EXPECT_TRUE(std::isfinite(out[0]) && std::isfinite(out[1]));
  EXPECT_NEAR(out[1], 1.0, 1e-15);
  EXPECT_NEAR(out[0], 0.0, 1e-15);
  EXPECT_NEAR(ll, std::log(0.5) + 400 * std::log(10.0 / 11), 1e-9);
  // And the other way round (the largest score is not the first).
  const std::vector<Entry> many0(400, Entry{0, 0});
  const double ll0 = p.Posterior(many0, -1, absl::MakeSpan(out));
  EXPECT_NEAR(out[0], 1.0, 1e-15);
  EXPECT_NEAR(ll0, std::log(0.5) + 400 * std::log(10.0 / 11), 1e-9);
}

// Merge adds counts and class masses: merging the counts of two halves gives the M-step of
// the whole. Item A (posterior (0.2, 0.8), annotator 0 says 1) in one half, item B (posterior
// (0.6, 0.4), annotator 1 says 0) in the other. prior_smoothing 1: class mass (0.8, 1.2), prior
// (1.8, 2.2) / 4. confusion_smoothing 1, population_smoothing 0: annotator 1 row 0 =
// (0.6 + 1, 0 + 1) / (0.6 + 2), row 1 = (0.4 + 1, 1) / (0.4 + 2); annotator 0 row 0 =
// (1, 0.2 + 1) / 2.2, row 1 = (1, 1.8) / 2.8.
TEST(ConfusionParametersTest, MergeAddsCountsAndClassMass) {
  const double a[] = {0.2, 0.8};
  const double b[] = {0.6, 0.4};
  ConfusionCounts first(2, 2), second(2, 2);
  first.AddItem(std::vector<Entry>{{0, 1}}, a);
  second.AddItem(std::vector<Entry>{{1, 0}}, b);
  first.Merge(second);
  TruthModelOptions options;
  options.confusion_smoothing = 1.0;
  options.population_smoothing = 0.0;
  options.prior_smoothing = 1.0;
  const ConfusionParameters p = EstimateParameters(first, options);
  EXPECT_THAT(p.ClassPrior(), ElementsAre(DoubleNear(0.45, 1e-15), DoubleNear(0.55, 1e-15)));
  EXPECT_THAT(p.Confusion(1), ElementsAre(DoubleNear(1.6 / 2.6, 1e-15), DoubleNear(1 / 2.6, 1e-15),
                                          DoubleNear(1.4 / 2.4, 1e-15), DoubleNear(1 / 2.4, 1e-15)));
  EXPECT_THAT(p.Confusion(0), ElementsAre(DoubleNear(1 / 2.2, 1e-15), DoubleNear(1.2 / 2.2, 1e-15),
                                          DoubleNear(1 / 2.8, 1e-15), DoubleNear(1.8 / 2.8, 1e-15)));
}

// An annotator whose every label was taken out again (RemoveItem) has no labels, and so, as
// documented on EstimateParameters, exactly the population confusion, not its own row of
// smoothing alone. Annotator 0 labels 0 two items of class 0; annotator 1 one item of class 1,
// which is then removed. confusion_smoothing 1, population_smoothing 1: population row 0 =
// (2 + 1, 1) / 4, row 1 uniform. A row of annotator 1 of smoothing alone would be
// (1 + 0.75, 1 + 0.25) / 3 = (0.583, 0.417), not (0.75, 0.25).
TEST(ConfusionParametersTest, AnAnnotatorWithAllLabelsRemovedGetsThePopulation) {
  ConfusionCounts counts(2, 2);
  const double class0[] = {1.0, 0.0};
  const double class1[] = {0.0, 1.0};
  counts.AddItem(std::vector<Entry>{{0, 0}}, class0);
  counts.AddItem(std::vector<Entry>{{0, 0}}, class0);
  counts.AddItem(std::vector<Entry>{{1, 1}}, class1);
  counts.RemoveItem(std::vector<Entry>{{1, 1}}, class1);
  TruthModelOptions options;
  options.confusion_smoothing = 1.0;
  options.population_smoothing = 1.0;
  const ConfusionParameters p = EstimateParameters(counts, options);
  EXPECT_THAT(p.Confusion(-1), ElementsAre(DoubleNear(0.75, 1e-15), DoubleNear(0.25, 1e-15),
                                           0.5, 0.5));
  EXPECT_EQ(p.num_own_annotators(), 1);
  EXPECT_EQ(p.Confusion(1), p.Confusion(-1));
}

// The gold branch of the E-step reads single cells (LogCell); for an annotator without a
// confusion of its own (no labels, or out of range) they are the population's, p(label | true
// class), not its transpose. Population as in PopulationDiagonalIsOnThePopulationOnly: row 0 =
// (3.5, 0.5) / 4, row 1 = (0.5, 2.5) / 3. prior_smoothing 1 and class mass (1, 0): prior
// (2/3, 1/3). Annotator 1 (no labels) says 1 on an item of gold class 0:
// log p(gold, labels) = log(2/3) + log(0.5 / 4).
TEST(ConfusionParametersTest, GoldLogLikelihoodOfAnnotatorsWithoutLabelsUsesThePopulationRow) {
  ConfusionCounts counts(2, 2);
  const double class0[] = {1.0, 0.0};
  counts.AddItem(std::vector<Entry>{{0, 0}}, class0);
  TruthModelOptions options;
  options.confusion_smoothing = 0.5;
  options.population_smoothing = 1.0;
  options.prior_smoothing = 1.0;
  const ConfusionParameters p = EstimateParameters(counts, options, 2.0);
  EXPECT_NEAR(p.LogCell(1, 1, 0), std::log(0.5 / 4), 1e-14);
  EXPECT_NEAR(p.LogCell(-1, 1, 0), std::log(0.5 / 4), 1e-14);
  EXPECT_NEAR(p.LogCell(7, 0, 1), std::log(0.5 / 3), 1e-14);
  std::vector<double> out(2);
  const double ll = p.Posterior(std::vector<Entry>{{1, 1}}, 0, absl::MakeSpan(out));
  EXPECT_THAT(out, ElementsAre(1.0, 0.0));
  EXPECT_NEAR(ll, std::log(2.0 / 3) + std::log(0.5 / 4), 1e-14);
  // Gold class 1 and an annotator out of range saying 0: log(1/3) + log(0.5 / 3).
  EXPECT_NEAR(p.Posterior(std::vector<Entry>{{9, 0}}, 1, absl::MakeSpan(out)),
              std::log(1.0 / 3) + std::log(0.5 / 3), 1e-14);
}

// The sparse layout of ConfusionParameters::Serialize, written field by field so that a test
// can corrupt one field: K, the layout marker, A, the prior, the population and the smoothing
// numerators u (row-major, row = true class), one flag byte per annotator, then for each
// flagged annotator its K row denominators and its kept columns as (label, K probabilities).
// The defaults are a valid K = 2 model: annotator 0 keeps column 0 with d = (2, 2) and
// u = 0.5 everywhere, so column 0 must be 0.75 for each row to sum to one
// ((0.5 + 0.75 * 2) / 2 = 1).
struct SparseParametersBlob {
  std::vector<double> prior = {0.5, 0.5};
  std::vector<double> numerators = {0.5, 0.5, 0.5, 0.5};
  std::string flags = std::string(1, '\1');
  std::vector<double> denominators = {2.0, 2.0};
  std::vector<std::pair<uint32_t, std::vector<double>>> columns = {{0, {0.75, 0.75}}};

  std::string Write() const {
    ByteWriter w;
    w.WriteU32(2);
    w.WriteU32(0xFFFFFFFFu);
    w.WriteU32(1);
    for (double q : prior) w.WriteF64(q);
    for (int i = 0; i < 4; ++i) w.WriteF64(0.5);
    for (double u : numerators) w.WriteF64(u);
    w.WriteString(flags);
    for (double d : denominators) w.WriteF64(d);
    w.WriteU32(static_cast<uint32_t>(columns.size()));
    for (const auto& [label, column] : columns) {
      w.WriteU32(label);
      for (double q : column) w.WriteF64(q);
    }
    return w.Finish();
  }
};

absl::Status ParseParameters(const std::string& blob) {
  absl::StatusOr<ByteReader> r = ByteReader::Open(blob);
  if (!r.ok()) return r.status();
  return ConfusionParameters::Parse(*r, 2).status();
}

// Parse's contract: INVALID_ARGUMENT for data that are "not probability distributions"; the
// prior is a distribution over classes (each probability > 0, summing to one), u and d are
// positive pseudo-counts, the flags say which annotators keep their own confusion (one byte
// each, 0 or 1), and an annotator's columns come in increasing label order, once each.
TEST(ConfusionParametersTest, ParseRefusesEachCorruptFieldOfTheSparseLayout) {
  const SparseParametersBlob valid;
  ASSERT_THAT(ParseParameters(valid.Write()), IsOk());
  {
    const std::string blob = valid.Write();  // The reader views it.
    absl::StatusOr<ByteReader> r = ByteReader::Open(blob);
    ASSERT_THAT(r, IsOk());
    absl::StatusOr<ConfusionParameters> p = ConfusionParameters::Parse(*r, 2);
    ASSERT_THAT(p, IsOk());
    // Row-major: p(label 0 | class c) = 0.75 kept, p(label 1 | class c) = u / d = 0.25.
    EXPECT_THAT(p->Confusion(0), ElementsAre(0.75, 0.25, 0.75, 0.25));
  }
  auto refused = [](const SparseParametersBlob& blob, const char* what) {
    EXPECT_THAT(ParseParameters(blob.Write()), StatusIs(absl::StatusCode::kInvalidArgument))
        << what;
  };
  SparseParametersBlob b = valid;
  b.prior = {0.0, 1.0};
  refused(b, "a class prior of exactly 0");
  b = valid;
  b.prior = {0.5, 0.500001};
  refused(b, "a class prior summing to 1.000001");
  b = valid;
  b.numerators = {0.0, 0.5, 0.5, 0.5};
  b.columns = {{0, {0.75, 0.75}}};
  refused(b, "a smoothing numerator of 0");
  b = valid;
  b.numerators = {-0.5, 0.5, 0.5, 0.5};
  refused(b, "a negative smoothing numerator");
  b = valid;
  b.flags = std::string(2, '\1');
  refused(b, "two annotator flags for one annotator");
  b = valid;
  b.flags = std::string(1, '\2');
  refused(b, "an annotator flag of 2");

  // Both columns kept: each row's two cells must sum to one.
  SparseParametersBlob two = valid;
  two.columns = {{0, {0.6, 0.4}}, {1, {0.4, 0.6}}};
  ASSERT_THAT(ParseParameters(two.Write()), IsOk());
  b = two;
  b.columns = {{1, {0.4, 0.6}}, {0, {0.6, 0.4}}};
  refused(b, "columns in decreasing label order");
  b = two;
  b.columns = {{0, {0.5, 0.5}}, {0, {0.5, 0.5}}};
  refused(b, "the same column twice");
}

// ConfusionCounts' sparse layout: K, the layout marker, A, the class mass, the labels of each
// annotator, the number of columns, then each column as (annotator, label, K counts) in
// (annotator, label) order.
std::string CountsBlob(const std::vector<double>& class_mass,
                       const std::vector<std::tuple<uint32_t, uint32_t, double, double>>& columns) {
  ByteWriter w;
  w.WriteU32(2);
  w.WriteU32(0xFFFFFFFFu);
  w.WriteU32(1);
  for (double m : class_mass) w.WriteF64(m);
  w.WriteU64(2);
  w.WriteU64(columns.size());
  for (const auto& [annotator, label, n0, n1] : columns) {
    w.WriteU32(annotator);
    w.WriteU32(label);
    w.WriteF64(n0);
    w.WriteF64(n1);
  }
  return w.Finish();
}

absl::Status ParseCounts(const std::string& blob) {
  absl::StatusOr<ByteReader> r = ByteReader::Open(blob);
  if (!r.ok()) return r.status();
  return ConfusionCounts::Parse(*r, 2).status();
}

// ConfusionCounts::Parse: INVALID_ARGUMENT if the data "hold a negative or non-finite count";
// columns are written in (annotator, label) order, once each.
TEST(ConfusionParametersTest, CountsParseRefusesNegativeCountsAndColumnsOutOfOrder) {
  ASSERT_THAT(ParseCounts(CountsBlob({1.0, 1.0}, {{0, 0, 0.7, 0.3}, {0, 1, 0.3, 0.7}})), IsOk());
  EXPECT_THAT(ParseCounts(CountsBlob({1.0, 1.0}, {{0, 0, -0.1, 0.3}, {0, 1, 0.3, 0.7}})),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseCounts(CountsBlob({-1.0, 1.0}, {{0, 0, 0.7, 0.3}})),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseCounts(CountsBlob({1.0, 1.0}, {{0, 1, 0.3, 0.7}, {0, 0, 0.7, 0.3}})),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseCounts(CountsBlob({1.0, 1.0}, {{0, 0, 0.7, 0.3}, {0, 0, 0.7, 0.3}})),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// RemoveItem: "Cells are clamped at 0, so rounding can never leave a negative count" (and the
// class mass likewise). Taking out (0.5, 0.5) where (0.2, 0.8) was added leaves (0, 0.3).
TEST(ConfusionParametersTest, RemovingMoreThanWasAddedLeavesZeroNotNegativeCounts) {
  ConfusionCounts counts(2, 1);
  const std::vector<Entry> says1 = {{0, 1}};
  const double added[] = {0.2, 0.8};
  const double removed[] = {0.5, 0.5};
  counts.AddItem(says1, added);
  counts.RemoveItem(says1, removed);
  TruthModelOptions options;
  options.prior_smoothing = 1.0;
  options.confusion_smoothing = 1.0;
  options.population_smoothing = 0.0;
  const ConfusionParameters p = EstimateParameters(counts, options);
  // Prior: (0 + 1, 0.3 + 1) / (0.3 + 2).
  EXPECT_THAT(p.ClassPrior(),
              ElementsAre(DoubleNear(1.0 / 2.3, 1e-12), DoubleNear(1.3 / 2.3, 1e-12)));
  // The annotator has no labels left: the population, row 0 from no counts (uniform), row 1
  // from n[1][1] = 0.3: (0 + 1, 0.3 + 1) / (0.3 + 2).
  EXPECT_THAT(p.Confusion(-1),
              ElementsAre(0.5, 0.5, DoubleNear(1.0 / 2.3, 1e-12), DoubleNear(1.3 / 2.3, 1e-12)));
  // And the counts still serialize to something Parse accepts (it refuses negatives).
  ByteWriter w;
  counts.Serialize(w);
  EXPECT_THAT(ParseCounts(w.Finish()), IsOk());
}

// ConfusionCounts::ResizeAnnotators keeps the first annotators' counts; the class mass is
// the items' and does not belong to the annotators cut off.
TEST(ConfusionParametersTest, ShrinkingTheCountsKeepsTheClassMass) {
  ConfusionCounts counts(2, 2);
  const double post_a[] = {0.9, 0.1};
  const double post_b[] = {0.3, 0.7};
  counts.AddItem(std::vector<Entry>{{1, 0}}, post_a);
  counts.AddItem(std::vector<Entry>{{0, 1}}, post_b);
  counts.ResizeAnnotators(1);
  EXPECT_EQ(counts.num_annotators(), 1);
  EXPECT_EQ(counts.num_columns(), 1);
  TruthModelOptions options;
  options.prior_smoothing = 1.0;
  // (1.2 + 1, 0.8 + 1) / (2 + 2).
  EXPECT_THAT(EstimateParameters(counts, options).ClassPrior(),
              ElementsAre(DoubleNear(0.55, 1e-12), DoubleNear(0.45, 1e-12)));
}

// ConfusionParameters::ResizeAnnotators keeps the first num_annotators annotators: cut to
// none, no annotator keeps a confusion of its own, and the parameters round-trip.
TEST(ConfusionParametersTest, ShrinkingToNoAnnotatorsDropsEveryOwnConfusion) {
  ConfusionCounts counts(2, 1);
  const double post[] = {0.9, 0.1};
  counts.AddItem(std::vector<Entry>{{0, 0}}, post);
  ConfusionParameters p = EstimateParameters(counts, TruthModelOptions());
  ASSERT_EQ(p.num_own_annotators(), 1);
  p.ResizeAnnotators(0);
  EXPECT_EQ(p.num_annotators(), 0);
  EXPECT_EQ(p.num_own_annotators(), 0);
  EXPECT_EQ(p.num_own_columns(), 0);
  ByteWriter w;
  p.Serialize(w);
  EXPECT_THAT(ParseParameters(w.Finish()), IsOk());
}

// RemoveUninformedItem: "Takes out what AddUninformedItem() added (clamped at 0)" (a state
// restored from a blob written before the share existed takes out what was never added).
// Mass (1, 0) less a share of 1/2 per class is (1/2, 0), not (1/2, -1/2): with
// prior_smoothing 1 the prior is (1/2 + 1, 0 + 1) / (1/2 + 2) = (0.6, 0.4).
TEST(ConfusionParametersTest, RemovingAnUninformedShareNeverAddedLeavesZeroMass) {
  ConfusionCounts counts(2, 1);
  const double class0[] = {1.0, 0.0};
  counts.AddItem(std::vector<Entry>{{0, 0}}, class0);
  counts.RemoveUninformedItem();
  TruthModelOptions options;
  options.prior_smoothing = 1.0;
  EXPECT_THAT(EstimateParameters(counts, options).ClassPrior(),
              ElementsAre(DoubleNear(0.6, 1e-12), DoubleNear(0.4, 1e-12)));
  ByteWriter w;
  counts.Serialize(w);
  EXPECT_THAT(ParseCounts(w.Finish()), IsOk());
}

// ConfusionCounts::ResizeAnnotators keeps the first annotators' counts, and so their own
// confusions. Annotator 0 says 0 on an item of class 0, annotator 1 says 0 on an item of
// class 1, annotator 2 (cut off) says 1. With confusion_smoothing 1 and no shrinkage, row c
// of annotator a is (n_a[c][l] + 1) / (n_a[c] + 2): annotator 0 (2/3, 1/3 | 1/2, 1/2),
// annotator 1 (1/2, 1/2 | 2/3, 1/3), both unlike the pooled population (2/3, 1/3 | 2/3, 1/3).
TEST(ConfusionParametersTest, ShrinkingTheCountsKeepsTheKeptAnnotatorsConfusions) {
  ConfusionCounts counts(2, 3);
  const double class0[] = {1.0, 0.0};
  const double class1[] = {0.0, 1.0};
  counts.AddItem(std::vector<Entry>{{0, 0}}, class0);
  counts.AddItem(std::vector<Entry>{{1, 0}}, class1);
  counts.AddItem(std::vector<Entry>{{2, 1}}, class1);
  counts.ResizeAnnotators(2);
  TruthModelOptions options;
  options.confusion_smoothing = 1.0;
  options.population_smoothing = 0.0;
  const ConfusionParameters p = EstimateParameters(counts, options);
  EXPECT_THAT(p.Confusion(0), ElementsAre(DoubleNear(2.0 / 3, 1e-12), DoubleNear(1.0 / 3, 1e-12),
                                          DoubleNear(0.5, 1e-12), DoubleNear(0.5, 1e-12)));
  EXPECT_THAT(p.Confusion(1), ElementsAre(DoubleNear(0.5, 1e-12), DoubleNear(0.5, 1e-12),
                                          DoubleNear(2.0 / 3, 1e-12), DoubleNear(1.0 / 3, 1e-12)));
  EXPECT_THAT(p.Confusion(-1), ElementsAre(DoubleNear(2.0 / 3, 1e-12), DoubleNear(1.0 / 3, 1e-12),
                                           DoubleNear(2.0 / 3, 1e-12), DoubleNear(1.0 / 3, 1e-12)));
}

}  // namespace
}  // namespace verity::models

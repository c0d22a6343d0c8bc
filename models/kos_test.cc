#include "models/kos.h"

#include <cmath>
#include <cstdint>
#include <limits>
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
#include "models/testing/serialization_checks.h"
#include "models/testing/posterior_checks.h"
#include "models/testing/synthetic_crowd.h"
#include "models/truth_model.h"

namespace verity::models {
namespace {

using ::testing::HasSubstr;
using ::verity::models::testing::Accuracy;
using ::verity::models::testing::GenerateSyntheticCrowd;
using ::verity::models::testing::SymmetricConfusion;
using ::verity::models::testing::SyntheticCrowd;
using ::verity::models::testing::SyntheticCrowdSpec;
using ::verity::models::testing::WithTrailingBytes;
using ::verity::models::testing::ItemsWhosePosteriorDependsOnLabelOrder;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;
using Entry = AnnotationMatrix::Entry;

std::unique_ptr<KosModel> MakeKos(const TruthModelOptions& options = {}) {
  absl::StatusOr<std::unique_ptr<KosModel>> model =
      KosModel::Create(2, options);
  EXPECT_THAT(model, IsOk());
  return model.ok() ? *std::move(model) : nullptr;
}

std::vector<int32_t> ArgMax(const std::vector<double>& posteriors) {
  std::vector<int32_t> labels;
  for (size_t i = 0; 2 * i < posteriors.size(); ++i) {
    labels.push_back(posteriors[2 * i + 1] > posteriors[2 * i] ? 1 : 0);
  }
  return labels;
}

TEST(KosTest, RefusesMoreThanTwoClassesNamingTheMethod) {
  absl::StatusOr<std::unique_ptr<KosModel>> model = KosModel::Create(3, {});
  EXPECT_THAT(model, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(model.status().message(), HasSubstr("kos"));
  EXPECT_THAT(model.status().message(), HasSubstr("binary"));
}

// 10 items, 6 annotators (4 good, 2 mostly wrong), 4 labels per item; KOS
// resolves the majority ties of items 1 and 3 and overrules the majority of
// items 8 and 9 by trusting the reliable annotators. Expected labels from
//   PYTHONPATH=../shared/peers/crowd-kit /usr/bin/python3
//     tools/crowdkit_reference.py --methods=KOS --triples='0,1,1 0,3,0
//     0,0,1 0,2,1 1,3,0 1,1,1 1,0,1 1,5,0 2,0,0 2,1,0 2,4,1 2,5,0 3,5,1
//     3,1,0 3,4,0 3,2,1 4,3,0 4,1,0 4,4,1 4,5,0 5,5,0 5,2,0 5,0,0 5,1,0
//     6,3,1 6,1,0 6,0,0 6,4,1 7,0,0 7,4,1 7,3,1 7,1,0 8,4,0 8,1,0 8,0,1
//     8,3,0 9,4,0 9,2,1 9,3,0 9,0,1'
// (crowd-kit 35f0661; the same labels for random_state 0 to 4), against
// majority vote 1,0,0,0,0,0,0,0,0,0.
TEST(KosTest, MatchesCrowdKitOnAFixedCase) {
  const std::vector<Annotation> triples = {
      {0, 1, 1}, {0, 3, 0}, {0, 0, 1}, {0, 2, 1}, {1, 3, 0}, {1, 1, 1},
      {1, 0, 1}, {1, 5, 0}, {2, 0, 0}, {2, 1, 0}, {2, 4, 1}, {2, 5, 0},
      {3, 5, 1}, {3, 1, 0}, {3, 4, 0}, {3, 2, 1}, {4, 3, 0}, {4, 1, 0},
      {4, 4, 1}, {4, 5, 0}, {5, 5, 0}, {5, 2, 0}, {5, 0, 0}, {5, 1, 0},
      {6, 3, 1}, {6, 1, 0}, {6, 0, 0}, {6, 4, 1}, {7, 0, 0}, {7, 4, 1},
      {7, 3, 1}, {7, 1, 0}, {8, 4, 0}, {8, 1, 0}, {8, 0, 1}, {8, 3, 0},
      {9, 4, 0}, {9, 2, 1}, {9, 3, 0}, {9, 0, 1}};
  const AnnotationMatrix m = *AnnotationMatrix::Build(10, 6, 2, triples);
  std::unique_ptr<KosModel> model = MakeKos();
  ASSERT_THAT(model->Fit(m, {}, false), IsOk());
  const std::vector<int32_t> expected = {1, 1, 0, 1, 0, 0, 0, 0, 1, 1};
  EXPECT_EQ(ArgMax(AllPosteriors(*model, m, {})), expected);
}

SyntheticCrowdSpec AdversarialCrowdSpec() {
  SyntheticCrowdSpec spec;
  spec.num_items = 2000;
  spec.num_classes = 2;
  spec.labels_per_item = 5;
  // 15 annotators: 10 of accuracy 0.6 to 0.96, 5 adversaries of 0.2.
  for (int a = 0; a < 15; ++a) {
    spec.confusions.push_back(
        SymmetricConfusion(2, a < 10 ? 0.6 + 0.04 * a : 0.2));
  }
  spec.seed = 31;
  return spec;
}

TEST(KosTest, LearnsNegativeWeightsForAdversariesAndBeatsMajorityVote) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(AdversarialCrowdSpec());
  std::unique_ptr<KosModel> model = MakeKos();
  absl::StatusOr<FitReport> report = model->Fit(crowd.matrix, {}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_TRUE(report->converged);
  // KOS's messages estimate 2 p_j - 1 up to a common scale: positive for
  // every annotator better than chance, negative for the adversaries, and
  // increasing with the accuracy.
  for (int a = 0; a < 10; ++a) EXPECT_GT(*model->AnnotatorWeight(a), 0) << a;
  for (int a = 10; a < 15; ++a) EXPECT_LT(*model->AnnotatorWeight(a), 0) << a;
  EXPECT_GT(*model->AnnotatorWeight(9), *model->AnnotatorWeight(0));
  auto mv = MajorityVoteModel::Create(2, {});
  const double mv_accuracy = Accuracy(AllPosteriors(**mv, crowd.matrix, {}),
                                      crowd.matrix, crowd.truth);
  const double accuracy = Accuracy(AllPosteriors(*model, crowd.matrix, {}),
                                   crowd.matrix, crowd.truth);
  EXPECT_GT(accuracy, mv_accuracy + 0.05);
  // The confusion is one-coin from the weight: adversaries below 1/2.
  const std::vector<double> c = model->AnnotatorConfusion(12);
  EXPECT_LT(c[0], 0.5);
  EXPECT_DOUBLE_EQ(c[0] + c[1], 1.0);
  EXPECT_DOUBLE_EQ(c[0], c[3]);
}

// kos.h: the weights are divided by the root mean square of y_j over the annotators with
// labels, so their squares average 1 over those annotators, with a 16th annotator that has no
// label in the matrix (left out of the mean, and given the pooled weight).
TEST(KosTest, WeightsHaveUnitRootMeanSquareOverAnnotatorsWithLabels) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(AdversarialCrowdSpec());
  std::vector<Annotation> labels;
  for (int32_t i = 0; i < crowd.matrix.num_items(); ++i) {
    for (const AnnotationMatrix::Entry& e : crowd.matrix.LabelsOfItem(i)) {
      labels.push_back({i, e.other, e.label});
    }
  }
  const int32_t with_labels = crowd.matrix.num_annotators();
  const AnnotationMatrix m =
      *AnnotationMatrix::Build(crowd.matrix.num_items(), with_labels + 1, 2, labels);
  std::unique_ptr<KosModel> model = MakeKos();
  ASSERT_THAT(model->Fit(m, {}, false), IsOk());
  double squares = 0;
  for (int32_t a = 0; a < with_labels; ++a) {
    ASSERT_TRUE(model->AnnotatorWeight(a).has_value()) << a;
    squares += *model->AnnotatorWeight(a) * *model->AnnotatorWeight(a);
  }
  EXPECT_NEAR(squares / with_labels, 1.0, 1e-9);
  // kos.h: annotators without labels and ids not in the fit get the label-weighted mean weight.
  double weighted = 0;
  for (int32_t a = 0; a < with_labels; ++a) {
    weighted += *model->AnnotatorWeight(a) * static_cast<double>(m.LabelsOfAnnotator(a).size());
  }
  const double pooled = weighted / static_cast<double>(m.num_labels());
  EXPECT_NEAR(*model->AnnotatorWeight(with_labels), pooled, 1e-12);
  EXPECT_NEAR(*model->AnnotatorWeight(with_labels + 10), pooled, 1e-12);
}

// kos.h: gold items are clamped in the posteriors but do not enter the messages: the weights
// fitted with a third of the items gold equal those fitted without gold, and a gold item's
// posterior is its class.
TEST(KosTest, GoldDoesNotEnterTheMessages) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(AdversarialCrowdSpec());
  std::vector<int32_t> gold(crowd.truth.size(), -1);
  for (size_t i = 0; i < gold.size(); i += 3) gold[i] = crowd.truth[i];
  std::unique_ptr<KosModel> without = MakeKos();
  ASSERT_THAT(without->Fit(crowd.matrix, {}, false), IsOk());
  std::unique_ptr<KosModel> with = MakeKos();
  ASSERT_THAT(with->Fit(crowd.matrix, gold, false), IsOk());
  for (int32_t a = 0; a < crowd.matrix.num_annotators(); ++a) {
    EXPECT_EQ(*with->AnnotatorWeight(a), *without->AnnotatorWeight(a)) << a;
  }
  std::vector<double> out(2);
  with->ItemPosteriorForItem(0, crowd.matrix.LabelsOfItem(0), gold[0], absl::MakeSpan(out));
  EXPECT_EQ(out[gold[0]], 1.0);
}

TEST(KosTest, PosteriorIsTheSigmoidOfTheWeightedVotes) {
  std::unique_ptr<KosModel> model = MakeKos();
  ASSERT_THAT(model->Fit(GenerateSyntheticCrowd(AdversarialCrowdSpec()).matrix,
                         {}, false),
              IsOk());
  const double w0 = *model->AnnotatorWeight(0);
  const double w3 = *model->AnnotatorWeight(3);
  std::vector<double> out(2);
  const std::vector<Entry> labels = {{3, 1}, {0, 0}};
  model->ItemPosterior(labels, -1, absl::MakeSpan(out));
  EXPECT_NEAR(out[0], 1.0 / (1.0 + std::exp(-(w0 - w3))), 1e-12);
  EXPECT_NEAR(out[0] + out[1], 1.0, 1e-15);
  model->ItemPosterior({}, -1, absl::MakeSpan(out));
  EXPECT_EQ(out, std::vector<double>({0.5, 0.5}));
  model->ItemPosterior(labels, 1, absl::MakeSpan(out));
  EXPECT_EQ(out, std::vector<double>({0.0, 1.0}));
  // An unseen annotator gets the pooled weight, a label-weighted mean.
  const std::vector<Entry> unseen = {{99, 0}};
  model->ItemPosterior(unseen, -1, absl::MakeSpan(out));
  EXPECT_NEAR(out[0], 1.0 / (1.0 + std::exp(-*model->AnnotatorWeight(-1))),
              1e-12);
}

// kos.h, by hand for one iteration (max_iterations 1) on 3 items labelled by all of 3
// annotators: item 0 all class 0 (A = +1), item 1 all class 1 (A = -1), item 2 class 0 from
// annotators 0 and 1 and class 1 from annotator 2. With every y = 1 at the start:
//   x_{i->j} (leave-one-out over the item):  item 0: 2, 2, 2; item 1: -2, -2, -2;
//                                            item 2: 0, 0, 2.
//   y_{j->i} (leave-one-out over the annotator's other items; the rescale to RMS 1 is a
//   common factor and drops out of the normalised weights):
//     annotator 0 and 1: item 0: 2, item 1: 2, item 2: 4; annotator 2: 0, 0, 4.
// Then the full sums of the x messages recomputed from these y:
//   x: item 0: 2, 2, 4; item 1: -2, -2, -4; item 2: 0, 0, 8,
//   y_j = sum_i A_ij x_{i->j}: 4, 4, 4 + 4 - 8 = 0,
// divided by their RMS sqrt(32 / 3): w = sqrt(3/2), sqrt(3/2), 0. Without the leave-one-out
// in y the weights would be 14 : 14 : 8, from the x messages of the iteration itself (no
// recomputation) 2 : 2 : 1; a second iteration flips their signs.
TEST(KosTest, OneIterationMatchesTheMessagePassingByHand) {
  const std::vector<Annotation> triples = {{0, 0, 0}, {0, 1, 0}, {0, 2, 0},
                                           {1, 0, 1}, {1, 1, 1}, {1, 2, 1},
                                           {2, 0, 0}, {2, 1, 0}, {2, 2, 1}};
  const AnnotationMatrix m = *AnnotationMatrix::Build(3, 3, 2, triples);
  TruthModelOptions options;
  options.max_iterations = 1;
  std::unique_ptr<KosModel> model = MakeKos(options);
  absl::StatusOr<FitReport> report = model->Fit(m, {}, false);
  ASSERT_THAT(report, IsOk());
  // kos.h: Fit stops after options.max_iterations iterations.
  EXPECT_EQ(report->iterations, 1);
  EXPECT_FALSE(report->converged);
  EXPECT_NEAR(*model->AnnotatorWeight(0), std::sqrt(1.5), 1e-12);
  EXPECT_NEAR(*model->AnnotatorWeight(1), std::sqrt(1.5), 1e-12);
  EXPECT_NEAR(*model->AnnotatorWeight(2), 0.0, 1e-12);
}

// A stored kos model as Serialize writes it: the header, the annotator count, then the pooled
// weight and one weight per annotator.
std::string KosBlob(double pooled, const std::vector<double>& weights) {
  ByteWriter writer;
  WriteModelHeader(writer, KosModel::kMethod, true);
  writer.WriteU32(static_cast<uint32_t>(weights.size()));
  writer.WriteF64(pooled);
  for (const double w : weights) writer.WriteF64(w);
  return writer.Finish();
}

// kos.h: the confusion is one-coin with accuracy sigmoid(w_j), clamped into
// [1e-6, 1 - 1e-6]. A restored model (the layout Serialize writes: header, the annotator
// count, then the pooled weight and one weight per annotator) with weights +-40, whose
// sigmoids round to 1 and ~4e-18, must still give no cell outside the clamp.
TEST(KosTest, AnnotatorConfusionIsClampedAwayFromZeroAndOne) {
  std::unique_ptr<KosModel> model = MakeKos();
  ASSERT_THAT(model->Restore(KosBlob(0.5, {40.0, -40.0})), IsOk());
  ASSERT_EQ(*model->AnnotatorWeight(0), 40.0);
  const double hi = 1.0 - KosModel::kMinConfusionAccuracy;
  const double lo = KosModel::kMinConfusionAccuracy;
  EXPECT_EQ(model->AnnotatorConfusion(0), std::vector<double>({hi, 1.0 - hi, 1.0 - hi, hi}));
  EXPECT_EQ(model->AnnotatorConfusion(1), std::vector<double>({lo, 1.0 - lo, 1.0 - lo, lo}));
}

TEST(KosTest, OneLabelPerItemFallsBackToMajorityVote) {
  const std::vector<Annotation> triples = {{0, 0, 0}, {1, 1, 1}, {2, 0, 1}};
  const AnnotationMatrix m = *AnnotationMatrix::Build(3, 2, 2, triples);
  std::unique_ptr<KosModel> model = MakeKos();
  ASSERT_THAT(model->Fit(m, {}, false), IsOk());
  EXPECT_EQ(*model->AnnotatorWeight(0), 1.0);
  EXPECT_EQ(ArgMax(AllPosteriors(*model, m, {})),
            std::vector<int32_t>({0, 1, 1}));
}

TEST(KosTest, WarmStartFromAConvergedFitConvergesAtOnce) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(AdversarialCrowdSpec());
  std::unique_ptr<KosModel> model = MakeKos();
  absl::StatusOr<FitReport> cold = model->Fit(crowd.matrix, {}, false);
  ASSERT_THAT(cold, IsOk());
  ASSERT_TRUE(cold->converged);
  const std::vector<int32_t> before =
      ArgMax(AllPosteriors(*model, crowd.matrix, {}));
  absl::StatusOr<FitReport> warm = model->Fit(crowd.matrix, {}, true);
  ASSERT_THAT(warm, IsOk());
  EXPECT_TRUE(warm->converged);
  EXPECT_LT(warm->iterations, cold->iterations);
  EXPECT_EQ(ArgMax(AllPosteriors(*model, crowd.matrix, {})), before);
}

TEST(KosTest, SerializeRestoreRoundTripsAndRejectsCorruptInput) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(AdversarialCrowdSpec());
  std::unique_ptr<KosModel> model = MakeKos();
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());
  const std::string blob = model->Serialize();
  std::unique_ptr<KosModel> restored = MakeKos();
  ASSERT_THAT(restored->Restore(blob), IsOk());
  EXPECT_EQ(AllPosteriors(*restored, crowd.matrix, {}),
            AllPosteriors(*model, crowd.matrix, {}));
  for (int32_t a = -1; a <= 16; ++a) {
    EXPECT_EQ(restored->AnnotatorConfusion(a), model->AnnotatorConfusion(a));
  }
  EXPECT_EQ(restored->Serialize(), blob);
  std::string flipped = blob;
  flipped[blob.size() / 2] ^= 0x10;
  EXPECT_THAT(restored->Restore(flipped),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(restored->Restore(blob.substr(0, blob.size() - 9)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  auto mv = MajorityVoteModel::Create(2, {});
  absl::Status s = restored->Restore((*mv)->Serialize());
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(s.message(), HasSubstr("method"));
  EXPECT_EQ(AllPosteriors(*restored, crowd.matrix, {}),
            AllPosteriors(*model, crowd.matrix, {}));
  ASSERT_THAT(restored->Restore(MakeKos()->Serialize()), IsOk());
  EXPECT_FALSE(restored->has_parameters());
}

// kos.h: the y messages are rescaled to a root mean square of 1 and the fit has converged once
// no rescaled message moved by more than the tolerance (<=, so a tolerance of 0 holds at a fixed
// point). A unanimous 2 x 2 crowd: every x and y message is 1 = its RMS after one iteration, so
// nothing moves and the fit converges at iteration 1.
TEST(KosTest, AUnanimousCrowdIsAFixedPointOfTheRescaledMessages) {
  const AnnotationMatrix m =
      *AnnotationMatrix::Build(2, 2, 2, {{0, 0, 0}, {0, 1, 0}, {1, 0, 0}, {1, 1, 0}});
  TruthModelOptions exact;
  exact.tolerance = 0.0;
  std::unique_ptr<KosModel> model = MakeKos(exact);
  absl::StatusOr<FitReport> report = model->Fit(m, {}, false);
  ASSERT_THAT(report, IsOk());
  EXPECT_TRUE(report->converged);
  EXPECT_EQ(report->iterations, 1);
  EXPECT_NEAR(*model->AnnotatorWeight(0), 1.0, 1e-15);
  EXPECT_NEAR(*model->AnnotatorWeight(1), 1.0, 1e-15);
}

// kos.h: any id not in the fit, the first one past the annotators included, gets the pooled
// weight; Restore refuses a weight that is not finite (an infinite weight would make the log-odds
// of an item labelled by two such annotators inf - inf).
TEST(KosTest, TheNextIdGetsThePooledWeightAndRestoreRefusesInfiniteWeights) {
  std::unique_ptr<KosModel> model = MakeKos();
  ASSERT_THAT(model->Restore(KosBlob(0.5, {2.0, -1.0})), IsOk());
  EXPECT_EQ(*model->AnnotatorWeight(2), 0.5);
  EXPECT_EQ(*model->AnnotatorWeight(-1), 0.5);
  for (double bad :
       {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()}) {
    ByteWriter corrupt;
    WriteModelHeader(corrupt, KosModel::kMethod, true);
    corrupt.WriteU32(1);
    corrupt.WriteF64(0.5);
    corrupt.WriteF64(bad);
    EXPECT_THAT(model->Restore(corrupt.Finish()), StatusIs(absl::StatusCode::kInvalidArgument))
        << bad;
  }
  EXPECT_EQ(*model->AnnotatorWeight(0), 2.0);
}

// kos.h: if every message is 0 (no item has two labels) every weight is 1, the majority vote; an
// annotator without labels and an unseen id get the label-weighted mean weight, so 1 as well.
TEST(KosTest, WithoutMessagesThePooledWeightIsOneToo) {
  const AnnotationMatrix m = *AnnotationMatrix::Build(2, 3, 2, {{0, 0, 0}, {1, 1, 1}});
  std::unique_ptr<KosModel> model = MakeKos();
  ASSERT_THAT(model->Fit(m, {}, false), IsOk());
  for (int32_t id : {0, 1, 2, 3, -1}) EXPECT_EQ(*model->AnnotatorWeight(id), 1.0) << id;
}

// kos.h: before a fit the confusion is uniform and a gold label clamps the posterior to one-hot
// (the soft majority vote, which is one-hot on gold).
TEST(KosTest, BeforeAFitConfusionsAreUniformAndGoldClampsThePosterior) {
  std::unique_ptr<KosModel> model = MakeKos();
  EXPECT_EQ(model->AnnotatorConfusion(0), std::vector<double>({0.5, 0.5, 0.5, 0.5}));
  std::vector<double> out(2);
  model->ItemPosterior({{3, 0}, {4, 0}}, 1, absl::MakeSpan(out));
  EXPECT_EQ(out, std::vector<double>({0.0, 1.0}));
}

// truth_model.h: Clone() is a deep copy, parameters included; Restore refuses a blob with bytes
// after the model (under a valid checksum) and keeps no parameters from it.
TEST(KosTest, CloneKeepsTheParametersAndRestoreRefusesTrailingBytes) {
  const AnnotationMatrix m =
      *AnnotationMatrix::Build(2, 2, 2, {{0, 0, 0}, {0, 1, 0}, {1, 0, 1}, {1, 1, 0}});
  std::unique_ptr<KosModel> model = MakeKos();
  ASSERT_THAT(model->Fit(m, {}, false), IsOk());
  const std::string blob = model->Serialize();
  const std::unique_ptr<TruthModel> clone = model->Clone();
  EXPECT_TRUE(clone->has_parameters());
  EXPECT_EQ(clone->Serialize(), blob);
  EXPECT_EQ(AllPosteriors(*clone, m, {}), AllPosteriors(*model, m, {}));
  std::unique_ptr<KosModel> restored = MakeKos();
  EXPECT_THAT(restored->Restore(WithTrailingBytes(blob)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(restored->has_parameters());
}

// truth_model.h / kos.h: ItemPosterior does not depend on the order of the labels, bit for bit
// (the labels are put in (annotator, label) order before the sums). Every item of the crowd,
// its labels given in reverse.
TEST(KosTest, PosteriorIsTheSameBitForBitForAnyOrderOfTheLabels) {
  const SyntheticCrowd crowd = GenerateSyntheticCrowd(AdversarialCrowdSpec());
  std::unique_ptr<KosModel> model = MakeKos();
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());
  EXPECT_EQ(ItemsWhosePosteriorDependsOnLabelOrder(*model, crowd.matrix), 0);
}

// kos.h: only a warm start initialises y_{j->i} with the previous weights; a cold fit of a
// fitted model starts every message at 1 like a new model. With one iteration the result
// depends on where the messages started: fitted first on a crowd where annotator 0 is an
// adversary (negative weight), a cold one-iteration fit of another crowd must give the same
// weights as a new model's.
TEST(KosTest, AColdFitOfAFittedModelStartsEveryMessageAtOne) {
  std::vector<Annotation> first, second;
  for (int32_t i = 0; i < 6; ++i) {
    first.push_back({i, 0, 1 - i % 2});
    for (int32_t a = 1; a < 4; ++a) first.push_back({i, a, i % 2});
    second.push_back({i, 0, i % 3 == 0 ? 1 : 0});
    second.push_back({i, 1, i % 2});
    second.push_back({i, 2, 0});
  }
  TruthModelOptions one_iteration;
  one_iteration.max_iterations = 1;
  std::unique_ptr<KosModel> model = MakeKos(one_iteration);
  ASSERT_THAT(model->Fit(*AnnotationMatrix::Build(6, 4, 2, first), {}, false), IsOk());
  ASSERT_LT(*model->AnnotatorWeight(0), 0.0);
  const AnnotationMatrix m = *AnnotationMatrix::Build(6, 3, 2, second);
  ASSERT_THAT(model->Fit(m, {}, false), IsOk());
  std::unique_ptr<KosModel> fresh = MakeKos(one_iteration);
  ASSERT_THAT(fresh->Fit(m, {}, false), IsOk());
  for (int32_t a = -1; a < 3; ++a) {
    EXPECT_EQ(*model->AnnotatorWeight(a), *fresh->AnnotatorWeight(a)) << "annotator " << a;
  }
  std::unique_ptr<KosModel> warm = MakeKos(one_iteration);
  ASSERT_THAT(warm->Fit(*AnnotationMatrix::Build(6, 4, 2, first), {}, false), IsOk());
  ASSERT_THAT(warm->Fit(m, {}, true), IsOk());
  bool differs = false;
  for (int32_t a = 0; a < 3; ++a) {
    differs |= std::abs(*warm->AnnotatorWeight(a) - *fresh->AnnotatorWeight(a)) > 1e-6;
  }
  EXPECT_TRUE(differs) << "the case does not tell a warm start from a cold one";
}

// truth_model.h: Fit checks its arguments and leaves the model unchanged on error, though KOS
// never reads gold: data of three classes, gold of the wrong size and a gold class out of
// [-1, 2) are INVALID_ARGUMENT.
TEST(KosTest, FitValidatesItsInputsAndKeepsTheModel) {
  std::unique_ptr<KosModel> model = MakeKos();
  const AnnotationMatrix three = *AnnotationMatrix::Build(2, 2, 3, {{0, 0, 2}, {0, 1, 2}});
  EXPECT_THAT(model->Fit(three, {}, false), StatusIs(absl::StatusCode::kInvalidArgument));
  const AnnotationMatrix m =
      *AnnotationMatrix::Build(2, 2, 2, {{0, 0, 0}, {0, 1, 0}, {1, 0, 1}, {1, 1, 1}});
  EXPECT_THAT(model->Fit(m, std::vector<int32_t>{0}, false),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(model->Fit(m, std::vector<int32_t>{-1, 2}, false),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(model->has_parameters());
}

// kos.h: a warm start initialises y_{j->i} with the previous weight of annotator j, a new
// annotator's with the pooled weight. Restored: pooled 3, annotator 0 1, annotator 1 2; a warm
// one-iteration fit of the matrix of OneIterationMatchesTheMessagePassingByHand (annotator 2 is
// new) starts from y = 1, 2, 3 for annotators 0, 1, 2 on every item. By hand:
//   x_{i->j}: item 0 (all +1, sum 6): 5, 4, 3; item 1 (all -1): -5, -4, -3;
//             item 2 (+1, +1, -1, sum 0): -1, -2, 3.
//   y_{j->i} (sums 9, 6, 3 over the annotator's items, less the item's own term; the rescale
//   drops out of the normalised weights): annotator 0: 4, 4, 10; 1: 2, 2, 8; 2: 0, 0, 6.
//   x recomputed from them: item 0 (sum 6): 2, 4, 6; item 1: -2, -4, -6;
//   item 2 (sum 10 + 8 - 6 = 12): 2, 4, 18.
//   y_j = sum_i A_ij x_{i->j}: 6, 12, 6 + 6 - 18 = -6; their RMS is sqrt(72) = 6 sqrt(2).
// So w = 1/sqrt(2), sqrt(2), -1/sqrt(2). (A new annotator started at 1 instead of the pooled
// weight would end at 1/sqrt(6), 4/sqrt(6), 1/sqrt(6); messages started per item instead of
// per annotator at 0, 0, 0, hence all 1.)
TEST(KosTest, AWarmStartBeginsFromThePreviousWeightsAndThePooledOneForNewAnnotators) {
  TruthModelOptions options;
  options.max_iterations = 1;
  std::unique_ptr<KosModel> model = MakeKos(options);
  // Pooled 3, annotators 0 and 1 at 1 and 2.
  ASSERT_THAT(model->Restore(KosBlob(3.0, {1.0, 2.0})), IsOk());
  const std::vector<Annotation> triples = {{0, 0, 0}, {0, 1, 0}, {0, 2, 0}, {1, 0, 1}, {1, 1, 1},
                                           {1, 2, 1}, {2, 0, 0}, {2, 1, 0}, {2, 2, 1}};
  const AnnotationMatrix m = *AnnotationMatrix::Build(3, 3, 2, triples);
  ASSERT_THAT(model->Fit(m, {}, true), IsOk());
  EXPECT_NEAR(*model->AnnotatorWeight(0), 1 / std::sqrt(2.0), 1e-12);
  EXPECT_NEAR(*model->AnnotatorWeight(1), std::sqrt(2.0), 1e-12);
  EXPECT_NEAR(*model->AnnotatorWeight(2), -1 / std::sqrt(2.0), 1e-12);
}

// kos.h: any id unseen in the fit gets the pooled (label-weighted mean) weight, negative ids
// other than -1 included. Restored: pooled 0.5, annotators 2 and -1.
TEST(KosTest, ANegativeIdGetsThePooledWeight) {
  std::unique_ptr<KosModel> model = MakeKos();
  ASSERT_THAT(model->Restore(KosBlob(0.5, {2.0, -1.0})), IsOk());
  EXPECT_EQ(*model->AnnotatorWeight(-7), 0.5);
  EXPECT_EQ(model->AnnotatorConfusion(-7), model->AnnotatorConfusion(99));
  std::vector<double> out(2);
  model->ItemPosterior(std::vector<Entry>{{-7, 0}}, -1, absl::MakeSpan(out));
  EXPECT_NEAR(out[0], 1.0 / (1.0 + std::exp(-0.5)), 1e-12);
}

// kos.h: if every message is 0 every weight is 1, the majority vote. A warm start from
// restored weights of 1e200 on an item labelled 0 by annotator 0 and 1 by annotator 1, neither
// of whom has another label: each y_{j->i} is a sum over the annotator's other labels, so every
// message of the first iteration is 0, and no weight may come out of the 1e200 the messages
// started from (their squares overflow a double).
TEST(KosTest, AWarmStartFromHugeWeightsWithoutMessagesGivesWeightOne) {
  std::unique_ptr<KosModel> model = MakeKos();
  ASSERT_THAT(model->Restore(KosBlob(1e200, {1e200, 1e200})), IsOk());
  const AnnotationMatrix m = *AnnotationMatrix::Build(1, 2, 2, {{0, 0, 0}, {0, 1, 1}});
  ASSERT_THAT(model->Fit(m, {}, true), IsOk());
  for (int32_t id : {0, 1, 2, -1}) EXPECT_EQ(*model->AnnotatorWeight(id), 1.0) << id;
}

// truth_model.h: an empty model gives the soft majority vote as ItemPosterior, each class's
// vote count plus options.vote_smoothing, normalised. Two labels of class 0 and one of class 1:
// (2 + 0.01) / (3 + 0.02) with the default smoothing, (2 + 0.5) / (3 + 1) with 0.5.
TEST(KosTest, BeforeAFitThePosteriorIsTheSoftMajorityVote) {
  const std::vector<Entry> labels = {{0, 0}, {1, 0}, {2, 1}};
  std::vector<double> out(2);
  MakeKos()->ItemPosterior(labels, -1, absl::MakeSpan(out));
  EXPECT_NEAR(out[0], 2.01 / 3.02, 1e-12);
  EXPECT_NEAR(out[1], 1.01 / 3.02, 1e-12);
  TruthModelOptions smoother;
  smoother.vote_smoothing = 0.5;
  MakeKos(smoother)->ItemPosterior(labels, -1, absl::MakeSpan(out));
  EXPECT_NEAR(out[0], 0.625, 1e-12);
  EXPECT_NEAR(out[1], 0.375, 1e-12);
}

// kos.h: "If every message is 0 (no item has two labels), every weight is 1: the majority
// vote." Every y_{j->i} sums over annotator j's labels other than item i's, so when no
// annotator has two labels every message of the first iteration is 0, whatever the items
// hold. Item 0 is labelled 0 by annotator 0 and 1 by annotator 1, item 1 0 by annotators 2 and
// 3; each annotator has that one label. With every message 0 the x messages are 0 and so is
// every y_j: every weight, the pooled one included, must be 1. (A weight computed from the
// starting messages y = 1 instead makes annotators 0 and 1, who merely disagree once, -1:
// adversaries whose labels are read inverted.)
TEST(KosTest, WhenNoAnnotatorHasTwoLabelsEveryWeightIsOne) {
  const AnnotationMatrix m =
      *AnnotationMatrix::Build(2, 4, 2, {{0, 0, 0}, {0, 1, 1}, {1, 2, 0}, {1, 3, 0}});
  std::unique_ptr<KosModel> model = MakeKos();
  ASSERT_THAT(model->Fit(m, {}, false), IsOk());
  for (int32_t id : {0, 1, 2, 3, -1}) EXPECT_EQ(*model->AnnotatorWeight(id), 1.0) << id;
  std::vector<double> out(2);
  model->ItemPosterior(std::vector<Entry>{{0, 0}}, -1, absl::MakeSpan(out));
  EXPECT_GT(out[0], 0.5);
}

}  // namespace
}  // namespace verity::models

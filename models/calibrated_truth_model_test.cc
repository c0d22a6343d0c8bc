#include "models/calibrated_truth_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/annotation_matrix.h"
#include "models/binary_codec.h"
#include "models/dawid_skene.h"
#include "models/truth_model.h"
#include "models/truth_model_factory.h"

namespace verity::models {
namespace {

using ::testing::ElementsAre;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;

// A binary crowd whose annotators err together: a share of the items are
// easy (every annotator is right with probability 0.9), the others hard
// (right with probability `hard_accuracy`). Labels of an item are thus
// correlated given its class, the situation that makes ds, which multiplies
// them as independent, overconfident. Written with its own sampling,
// independently of the model code.
struct Crowd {
  AnnotationMatrix matrix;
  std::vector<int32_t> truth;
};

Crowd CorrelatedCrowd(int32_t num_items, int32_t labels_per_item, uint64_t seed,
                      double hard_share = 0.3, double hard_accuracy = 0.4) {
  constexpr int32_t kAnnotators = 20;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<Annotation> annotations;
  std::vector<int32_t> truth(num_items);
  for (int32_t i = 0; i < num_items; ++i) {
    truth[i] = u(rng) < 0.5 ? 0 : 1;
    const double right = u(rng) < hard_share ? hard_accuracy : 0.9;
    std::vector<int32_t> annotators(kAnnotators);
    for (int32_t a = 0; a < kAnnotators; ++a) annotators[a] = a;
    for (int32_t n = 0; n < labels_per_item; ++n) {
      // Partial Fisher-Yates: distinct annotators per item.
      const int32_t pick = n + static_cast<int32_t>(u(rng) * (kAnnotators - n));
      std::swap(annotators[n], annotators[std::min(pick, kAnnotators - 1)]);
      const int32_t label = u(rng) < right ? truth[i] : 1 - truth[i];
      annotations.push_back({i, annotators[n], label});
    }
  }
  absl::StatusOr<AnnotationMatrix> matrix =
      AnnotationMatrix::Build(num_items, kAnnotators, 2, annotations);
  EXPECT_THAT(matrix.status(), IsOk());
  return {*std::move(matrix), std::move(truth)};
}

// ECE with 10 equal-width bins over the items in `scored` (the definition of
// models/evaluation.h, recomputed here).
double Ece(const std::vector<double>& posteriors, const std::vector<int32_t>& truth,
           const std::vector<bool>& scored) {
  double n[10] = {}, right[10] = {}, conf[10] = {};
  double total = 0;
  for (size_t i = 0; i < truth.size(); ++i) {
    if (!scored[i]) continue;
    const double p0 = posteriors[2 * i], p1 = posteriors[2 * i + 1];
    const int32_t pred = p1 > p0 ? 1 : 0;
    const double c = std::max(p0, p1);
    const int b = std::min(9, static_cast<int>(std::floor(10 * c)));
    n[b] += 1;
    right[b] += pred == truth[i];
    conf[b] += c;
    total += 1;
  }
  double ece = 0;
  for (int b = 0; b < 10; ++b) ece += std::abs(right[b] - conf[b]);
  return ece / total;
}

// The inner model's and the served posteriors of every item of `crowd`, and
// their ECE against its truth (recorded as test properties with the map's
// temperature).
struct CalibrationOutcome {
  std::vector<double> raw, calibrated;
  double raw_ece = 0, calibrated_ece = 0;
};

CalibrationOutcome ScoreCalibration(const CalibratedTruthModel& model, const Crowd& crowd) {
  const std::vector<bool> all(crowd.truth.size(), true);
  CalibrationOutcome outcome;
  outcome.raw = AllPosteriors(model.inner(), crowd.matrix, {});
  outcome.calibrated = AllPosteriors(model, crowd.matrix, {});
  outcome.raw_ece = Ece(outcome.raw, crowd.truth, all);
  outcome.calibrated_ece = Ece(outcome.calibrated, crowd.truth, all);
  ::testing::Test::RecordProperty("raw_ece", std::to_string(outcome.raw_ece));
  ::testing::Test::RecordProperty("calibrated_ece", std::to_string(outcome.calibrated_ece));
  ::testing::Test::RecordProperty("temperature", std::to_string(model.calibration().temperature));
  return outcome;
}

// The fields of a calibrated version's blob (calibrated_truth_model.h, Serialize): kMagic, the
// format version, the map (kind, tau), its source, the gold statistics (items, ECE before and
// after) and the inner blob; `trailing` bytes after it. The defaults are a valid version.
struct CalibratedBlobFields {
  uint32_t format_version = 1;
  uint32_t kind = static_cast<uint32_t>(CalibrationMapKind::kTemperature);
  double temperature = 0.5;
  uint32_t source = static_cast<uint32_t>(CalibrationSource::kCrowdLabels);
  bool trailing = false;
};

std::string CalibratedBlob(const CalibratedBlobFields& fields) {
  const std::string_view m = CalibratedTruthModel::kMagic;
  ByteWriter writer;
  writer.WriteU32(static_cast<uint32_t>(static_cast<unsigned char>(m[0])) |
                  static_cast<uint32_t>(static_cast<unsigned char>(m[1])) << 8 |
                  static_cast<uint32_t>(static_cast<unsigned char>(m[2])) << 16 |
                  static_cast<uint32_t>(static_cast<unsigned char>(m[3])) << 24);
  writer.WriteU32(fields.format_version);
  writer.WriteU32(fields.kind);
  writer.WriteF64(fields.temperature);
  writer.WriteU32(fields.source);
  writer.WriteU64(0);
  writer.WriteF64(0.0);
  writer.WriteF64(0.0);
  writer.WriteString("inner");
  if (fields.trailing) writer.WriteU32(0);
  return writer.Finish();
}

std::unique_ptr<CalibratedTruthModel> CalibratedDs() {
  absl::StatusOr<std::unique_ptr<DawidSkeneModel>> ds = DawidSkeneModel::Create(2, {});
  EXPECT_THAT(ds.status(), IsOk());
  return std::make_unique<CalibratedTruthModel>(*std::move(ds));
}

TEST(CalibratedTruthModelTest, TemperatureOneIsTheExactIdentity) {
  std::vector<double> row = {0.123456789, 0.876543211};
  std::vector<double> top = row;
  ApplyTopLabelTemperature(1.0, absl::MakeSpan(top));
  EXPECT_EQ(top, row);
  const std::vector<double> before = row;
  ApplyTemperature(1.0, absl::MakeSpan(row));
  EXPECT_EQ(row, before);

  // An unfitted wrapper serves the inner posteriors bit for bit.
  const Crowd crowd = CorrelatedCrowd(300, 5, 7);
  auto inner = DawidSkeneModel::Create(2, {});
  ASSERT_THAT(inner.status(), IsOk());
  ASSERT_THAT((*inner)->Fit(crowd.matrix, {}, false).status(), IsOk());
  const std::vector<double> raw = AllPosteriors(**inner, crowd.matrix, {});
  CalibratedTruthModel wrapped((*inner)->Clone());
  EXPECT_EQ(wrapped.calibration().temperature, 1.0);
  EXPECT_EQ(wrapped.calibration().source, CalibrationSource::kNone);
  EXPECT_EQ(AllPosteriors(wrapped, crowd.matrix, {}), raw);
}

TEST(CalibratedTruthModelTest, TemperatureSoftensAndKeepsTheOrder) {
  std::vector<double> row = {0.1, 0.9};
  ApplyTemperature(0.5, absl::MakeSpan(row));
  // 0.9^0.5 / (0.1^0.5 + 0.9^0.5) = 0.948683 / 1.264911 = 0.75.
  EXPECT_NEAR(row[1], 0.75, 1e-12);
  EXPECT_NEAR(row[0], 0.25, 1e-12);
}

TEST(CalibratedTruthModelTest, LowersTheEceOfDsOnACorrelatedCrowd) {
  // Half of the items are near coin flips for every annotator (0.55).
  const Crowd crowd = CorrelatedCrowd(4000, 7, 11, 0.5, 0.55);
  auto model = CalibratedDs();
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false).status(), IsOk());
  EXPECT_EQ(model->calibration().source, CalibrationSource::kCrowdLabels);
  EXPECT_LT(model->calibration().temperature, 1.0);

  const CalibrationOutcome outcome = ScoreCalibration(*model, crowd);
  const std::vector<double>& raw = outcome.raw;
  const std::vector<double>& calibrated = outcome.calibrated;
  const double raw_ece = outcome.raw_ece;
  const double calibrated_ece = outcome.calibrated_ece;
  // ds is overconfident here: it takes every annotator to be right with
  // probability 0.5 x 0.9 + 0.5 x 0.55 = 0.725, so a 5-2 vote gives odds
  // (0.725 / 0.275)^3 = 18 (0.95), while on a hard item a 5-2 majority is
  // right with probability 0.55^3 / (0.55^3 + 0.45^3) = 0.65.
  EXPECT_GT(raw_ece, 0.05);
  EXPECT_LT(calibrated_ece, 0.6 * raw_ece);
  EXPECT_LT(calibrated_ece, 0.08);

  // The map keeps every MAP label: accuracy unchanged.
  for (size_t i = 0; i < crowd.truth.size(); ++i) {
    EXPECT_EQ(raw[2 * i + 1] > raw[2 * i], calibrated[2 * i + 1] > calibrated[2 * i]) << i;
  }
}

// calibrated_truth_model.h: "For K = 2 the two maps are the same", so a binary project's map is
// reported as the plain temperature: whichever of two equal losses rounded lower must not decide
// what GetModelStatus calls it. On correlated binary crowds of several seeds, with and without
// gold, every map that softens is of kind kTemperature.
TEST(CalibratedTruthModelTest, ABinaryProjectsMapIsThePlainTemperature) {
  int softened = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    const Crowd crowd = CorrelatedCrowd(1500, 5, seed, 0.5, 0.55);
    std::vector<int32_t> gold(crowd.truth.size(), -1);
    if (seed % 2 == 0) {
      for (size_t i = 0; i < gold.size(); i += 10) gold[i] = crowd.truth[i];
    }
    auto model = CalibratedDs();
    ASSERT_THAT(model->Fit(crowd.matrix, gold, false).status(), IsOk());
    EXPECT_EQ(model->calibration().kind, CalibrationMapKind::kTemperature) << "seed " << seed;
    softened += model->calibration().temperature < 1.0 ? 1 : 0;
  }
  EXPECT_GT(softened, 0);  // The map was fitted, not left the identity.
}

TEST(CalibratedTruthModelTest, FitsTheLabelMapForConfusionsThatDependOnTheItem) {
  // glad's confusion of annotator j on item i depends on i's easiness, so its
  // posterior is the prior times ItemAnnotatorConfusion(i, j), not
  // AnnotatorConfusion(j): the map must take each label's own confusion (it
  // kept the identity when it took the annotator's).
  const Crowd crowd = CorrelatedCrowd(3000, 7, 23, 0.5, 0.55);
  absl::StatusOr<std::unique_ptr<TruthModel>> glad = CreateTruthModel("glad", 2, {});
  ASSERT_THAT(glad.status(), IsOk());
  auto* model = dynamic_cast<CalibratedTruthModel*>(glad->get());
  ASSERT_NE(model, nullptr);
  EXPECT_TRUE(model->inner().ConfusionsDependOnItem());
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false).status(), IsOk());
  EXPECT_EQ(model->calibration().source, CalibrationSource::kCrowdLabels);
  EXPECT_LT(model->calibration().temperature, 1.0);

  const CalibrationOutcome outcome = ScoreCalibration(*model, crowd);
  EXPECT_LT(outcome.calibrated_ece, 0.8 * outcome.raw_ece);
}

// A binary model with a uniform prior whose posterior is the prior times its item confusions,
// each `item_accuracy` right; its annotators' confusion, on an item it has not seen, is
// `annotator_accuracy` right. Equal accuracies: ds's product form. A sharper item confusion:
// as when per-item parameters (glad's easiness, lia's difficulty) were fitted with the item's
// own labels.
class SymmetricBinaryModel final : public TruthModel {
 public:
  SymmetricBinaryModel(double item_accuracy, double annotator_accuracy)
      : item_accuracy_(item_accuracy), annotator_accuracy_(annotator_accuracy) {}

  std::string_view method() const override { return "symmetric_binary"; }
  int32_t num_classes() const override { return 2; }
  bool has_parameters() const override { return true; }
  std::unique_ptr<TruthModel> Clone() const override {
    return std::make_unique<SymmetricBinaryModel>(item_accuracy_, annotator_accuracy_);
  }
  absl::StatusOr<FitReport> Fit(const AnnotationMatrix&, absl::Span<const int32_t>,
                                bool) override {
    return FitReport{};
  }
  void ItemPosterior(absl::Span<const AnnotationMatrix::Entry> labels, int32_t gold_label,
                     absl::Span<double> out) const override {
    out[0] = out[1] = 0.5;
    if (gold_label >= 0) {
      out[gold_label] = 1.0;
      out[1 - gold_label] = 0.0;
      return;
    }
    for (const AnnotationMatrix::Entry& e : labels) {
      out[0] *= e.label == 0 ? item_accuracy_ : 1 - item_accuracy_;
      out[1] *= e.label == 1 ? item_accuracy_ : 1 - item_accuracy_;
    }
    const double sum = out[0] + out[1];
    out[0] /= sum;
    out[1] /= sum;
  }
  std::vector<double> AnnotatorConfusion(int32_t) const override {
    return {annotator_accuracy_, 1 - annotator_accuracy_, 1 - annotator_accuracy_,
            annotator_accuracy_};
  }
  std::vector<double> ItemAnnotatorConfusion(int32_t, int32_t) const override {
    return {item_accuracy_, 1 - item_accuracy_, 1 - item_accuracy_, item_accuracy_};
  }
  bool ConfusionsDependOnItem() const override { return item_accuracy_ != annotator_accuracy_; }
  std::string Serialize() const override { return "inner"; }
  absl::Status Restore(std::string_view) override { return absl::OkStatus(); }

 private:
  const double item_accuracy_;
  const double annotator_accuracy_;
};

// SymmetricBinaryModel(0.8, 0.8) whose has_parameters() stays false after Fit.
class ParameterlessModel final : public TruthModel {
 public:
  std::string_view method() const override { return "parameterless"; }
  int32_t num_classes() const override { return 2; }
  bool has_parameters() const override { return false; }
  std::unique_ptr<TruthModel> Clone() const override {
    return std::make_unique<ParameterlessModel>();
  }
  absl::StatusOr<FitReport> Fit(const AnnotationMatrix&, absl::Span<const int32_t>,
                                bool) override {
    return FitReport{};
  }
  void ItemPosterior(absl::Span<const AnnotationMatrix::Entry> labels, int32_t gold_label,
                     absl::Span<double> out) const override {
    model_.ItemPosterior(labels, gold_label, out);
  }
  std::vector<double> AnnotatorConfusion(int32_t a) const override {
    return model_.AnnotatorConfusion(a);
  }
  std::string Serialize() const override { return "inner"; }
  absl::Status Restore(std::string_view) override { return absl::OkStatus(); }

 private:
  SymmetricBinaryModel model_{0.8, 0.8};
};

// calibrated_truth_model.h (kNone): when the inner model has no parameters after Fit, no map
// is fitted, neither on crowd labels (items 0 and 1 have two labels each) nor on gold: the
// source is none and the map the identity.
TEST(CalibratedTruthModelTest, AnInnerModelWithoutParametersKeepsTheIdentity) {
  absl::StatusOr<AnnotationMatrix> data = AnnotationMatrix::Build(
      3, 3, 2, {{0, 0, 0}, {0, 1, 0}, {1, 0, 0}, {1, 1, 1}, {2, 2, 1}});
  ASSERT_THAT(data.status(), IsOk());
  CalibratedTruthModel model(std::make_unique<ParameterlessModel>());
  ASSERT_THAT(model.Fit(*data, {}, false).status(), IsOk());
  EXPECT_EQ(model.calibration().source, CalibrationSource::kNone);
  EXPECT_EQ(model.calibration().temperature, 1.0);
}

TEST(CalibratedTruthModelTest, AHeldOutLabelIsPredictedWithoutTheItemsOwnParameters) {
  // One item, labelled 0 by annotators 0 and 1 (each has no other label, so
  // the correction of the annotator's share leaves its confusion as it is).
  // Holding out either label leaves the other: q_-j = (0.9, 0.1) at tau = 1,
  // q ∝ (0.9^tau, 0.1^tau). The held-out label is predicted with the
  // annotator's confusion on an item not fitted with it, 0.8 right:
  // p = 0.8 q_0 + 0.2 q_1, largest at tau = 1, loss = -2 ln(0.8 x 0.9 +
  // 0.2 x 0.1) = -2 ln 0.74 = 0.602175. With the item's fitted confusion the
  // label would predict itself from parameters it helped fit: -2 ln 0.82.
  absl::StatusOr<AnnotationMatrix> data = AnnotationMatrix::Build(1, 2, 2, {{0, 0, 0}, {0, 1, 0}});
  ASSERT_THAT(data.status(), IsOk());
  const SymmetricBinaryModel model(/*item_accuracy=*/0.9, /*annotator_accuracy=*/0.8);
  std::vector<double> posterior(2);
  model.ItemPosterior(data->LabelsOfItem(0), -1, absl::MakeSpan(posterior));
  const FittedMap map = FitLabelMap(model, *data, posterior);
  EXPECT_NEAR(map.temperature, 1.0, 1e-3);
  EXPECT_NEAR(map.loss, -2 * std::log(0.74), 1e-6);
}

TEST(CalibratedTruthModelTest, UsesTheGoldMapWithEnoughGoldItems) {
  const Crowd crowd = CorrelatedCrowd(3000, 7, 13);
  // Every 10th item is gold (300 gold items); the others are scored.
  std::vector<int32_t> gold(crowd.truth.size(), -1);
  std::vector<bool> scored(crowd.truth.size(), true);
  for (size_t i = 0; i < gold.size(); i += 10) {
    gold[i] = crowd.truth[i];
    scored[i] = false;
  }
  auto model = CalibratedDs();
  ASSERT_THAT(model->Fit(crowd.matrix, gold, false).status(), IsOk());
  EXPECT_EQ(model->calibration().source, CalibrationSource::kGold);
  EXPECT_EQ(model->calibration().gold_items, 300);
  EXPECT_LT(model->calibration().temperature, 1.0);
  EXPECT_LT(model->calibration().gold_ece, model->calibration().gold_ece_raw);

  const std::vector<double> raw = AllPosteriors(model->inner(), crowd.matrix, gold);
  const std::vector<double> calibrated = AllPosteriors(*model, crowd.matrix, gold);
  EXPECT_LT(Ece(calibrated, crowd.truth, scored), 0.5 * Ece(raw, crowd.truth, scored));
  // Gold items stay clamped one-hot.
  for (size_t i = 0; i < gold.size(); i += 10) {
    EXPECT_EQ(calibrated[2 * i + gold[i]], 1.0) << i;
    EXPECT_EQ(calibrated[2 * i + 1 - gold[i]], 0.0) << i;
  }
}

TEST(CalibratedTruthModelTest, FallsBackToCrowdLabelsWithTooFewGoldItems) {
  const Crowd crowd = CorrelatedCrowd(1000, 5, 17);
  std::vector<int32_t> gold(crowd.truth.size(), -1);
  for (int32_t i = 0; i < CalibratedTruthModel::kMinGoldItems - 1; ++i) gold[i] = crowd.truth[i];
  auto model = CalibratedDs();
  ASSERT_THAT(model->Fit(crowd.matrix, gold, false).status(), IsOk());
  EXPECT_EQ(model->calibration().source, CalibrationSource::kCrowdLabels);
  EXPECT_EQ(model->calibration().gold_items, 0);
}

TEST(CalibratedTruthModelTest, SerializeRestoreGivesIdenticalPosteriors) {
  const Crowd crowd = CorrelatedCrowd(1000, 5, 19);
  auto model = CalibratedDs();
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false).status(), IsOk());
  ASSERT_NE(model->calibration().temperature, 1.0);
  auto restored = CalibratedDs();
  ASSERT_THAT(restored->Restore(model->Serialize()), IsOk());
  EXPECT_EQ(restored->calibration().temperature, model->calibration().temperature);
  EXPECT_EQ(restored->calibration().source, CalibrationSource::kCrowdLabels);
  EXPECT_EQ(AllPosteriors(*restored, crowd.matrix, {}), AllPosteriors(*model, crowd.matrix, {}));
  EXPECT_EQ(restored->Serialize(), model->Serialize());
}

TEST(CalibratedTruthModelTest, RestoresAVersionStoredBeforeCalibration) {
  const Crowd crowd = CorrelatedCrowd(1000, 5, 23);
  auto inner = DawidSkeneModel::Create(2, {});
  ASSERT_THAT(inner.status(), IsOk());
  ASSERT_THAT((*inner)->Fit(crowd.matrix, {}, false).status(), IsOk());
  auto model = CalibratedDs();
  ASSERT_THAT(model->Restore((*inner)->Serialize()), IsOk());
  EXPECT_TRUE(model->has_parameters());
  EXPECT_EQ(model->calibration().temperature, 1.0);
  EXPECT_EQ(model->calibration().source, CalibrationSource::kNone);
  EXPECT_EQ(AllPosteriors(*model, crowd.matrix, {}), AllPosteriors(**inner, crowd.matrix, {}));
}

TEST(CalibratedTruthModelTest, RefusesACorruptBlobAndStaysUnchanged) {
  const Crowd crowd = CorrelatedCrowd(500, 5, 29);
  auto model = CalibratedDs();
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false).status(), IsOk());
  std::string blob = model->Serialize();
  blob[blob.size() / 2] ^= 0x5a;
  auto other = CalibratedDs();
  EXPECT_THAT(other->Restore(blob), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(other->has_parameters());
  EXPECT_EQ(other->calibration().source, CalibrationSource::kNone);
}

TEST(CalibratedTruthModelTest, FactoryWrapsByDefaultAndNoneServesTheInnerPosteriors) {
  TruthModelOptions options;
  auto wrapped = CreateTruthModel("ds", 2, options);
  ASSERT_THAT(wrapped.status(), IsOk());
  const auto* calibrated = dynamic_cast<CalibratedTruthModel*>(wrapped->get());
  ASSERT_NE(calibrated, nullptr);
  EXPECT_TRUE(calibrated->fits_map());
  EXPECT_EQ((*wrapped)->method(), "ds");

  const Crowd crowd = CorrelatedCrowd(1000, 5, 37);
  ASSERT_THAT((*wrapped)->Fit(crowd.matrix, {}, false).status(), IsOk());
  ASSERT_NE(calibrated->calibration().temperature, 1.0);
  options.calibration = "none";
  auto none = CreateTruthModel("ds", 2, options);
  ASSERT_THAT(none.status(), IsOk());
  const auto* uncalibrated = dynamic_cast<CalibratedTruthModel*>(none->get());
  ASSERT_NE(uncalibrated, nullptr);
  EXPECT_FALSE(uncalibrated->fits_map());
  // "none" reads the calibrated version and serves its inner posteriors.
  ASSERT_THAT((*none)->Restore((*wrapped)->Serialize()), IsOk());
  EXPECT_EQ(uncalibrated->calibration().temperature, 1.0);
  EXPECT_EQ(AllPosteriors(**none, crowd.matrix, {}),
            AllPosteriors(calibrated->inner(), crowd.matrix, {}));
  // And fits no map.
  ASSERT_THAT((*none)->Fit(crowd.matrix, {}, false).status(), IsOk());
  EXPECT_EQ(uncalibrated->calibration().source, CalibrationSource::kNone);
  options.calibration = "platt";
  EXPECT_THAT(CreateTruthModel("ds", 3, options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(CalibratedTruthModelTest, CloneKeepsTheMap) {
  const Crowd crowd = CorrelatedCrowd(800, 5, 31);
  auto model = CalibratedDs();
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false).status(), IsOk());
  std::unique_ptr<TruthModel> copy = model->Clone();
  EXPECT_EQ(AllPosteriors(*copy, crowd.matrix, {}), AllPosteriors(*model, crowd.matrix, {}));
}

// calibrated_truth_model.h: the top-label map replaces the top class's probability by
// sigmoid(tau logit(p_top)) and shares the rest in proportion to the other classes; a tie for the
// top goes to the lowest index. Computed here at tau = 0.5: logit(0.6) = log 1.5, and
// sigmoid(0.5 log 1.5) = sqrt(1.5) / (1 + sqrt(1.5)).
TEST(CalibrationMapTest, TopLabelTemperatureOnThreeClasses) {
  const double top = std::sqrt(1.5) / (1 + std::sqrt(1.5));  // 0.5505103
  std::vector<double> row = {0.6, 0.3, 0.1};
  ApplyTopLabelTemperature(0.5, absl::MakeSpan(row));
  EXPECT_NEAR(row[0], top, 1e-9);
  EXPECT_NEAR(row[1], (1 - top) * 0.75, 1e-9);
  EXPECT_NEAR(row[2], (1 - top) * 0.25, 1e-9);
  // A tie: class 0 is the top; logit(0.4) = log(2/3).
  const double tied = std::sqrt(2.0 / 3.0) / (1 + std::sqrt(2.0 / 3.0));  // 0.4494897
  row = {0.4, 0.4, 0.2};
  ApplyTopLabelTemperature(0.5, absl::MakeSpan(row));
  EXPECT_NEAR(row[0], tied, 1e-9);
  EXPECT_NEAR(row[1], (1 - tied) * 2.0 / 3.0, 1e-9);
  EXPECT_NEAR(row[2], (1 - tied) / 3.0, 1e-9);
}

// A row whose top class holds all the mass has no log-odds to scale (the others' share is 0):
// the top-label map leaves it as it is, at any temperature.
TEST(CalibrationMapTest, TopLabelTemperatureLeavesAOneHotRowAlone) {
  for (const double tau : {0.05, 0.5}) {
    std::vector<double> row = {0.0, 1.0, 0.0};
    ApplyTopLabelTemperature(tau, absl::MakeSpan(row));
    EXPECT_EQ(row, std::vector<double>({0.0, 1.0, 0.0})) << tau;
  }
}

// The gold map's tau stays in [kMinTemperature, 1]: gold always agreeing with an underconfident
// posterior would want tau > 1 (sharpening without bound) and gets 1; gold always against a
// confident one wants tau -> 0 and gets the floor.
TEST(CalibrationMapTest, TheGoldMapsTemperatureStaysWithinItsBounds) {
  std::vector<double> under, wrong;
  for (int i = 0; i < 10; ++i) {
    under.insert(under.end(), {0.7, 0.3});
    wrong.insert(wrong.end(), {0.9, 0.1});
  }
  const std::vector<int32_t> zeros(10, 0), ones(10, 1);
  EXPECT_DOUBLE_EQ(FitGoldMap(under, 2, zeros).temperature, 1.0);
  const FittedMap floor = FitGoldMap(wrong, 2, ones);
  EXPECT_NEAR(floor.temperature, CalibratedTruthModel::kMinTemperature, 1e-9);
}

// Promise (calibrated_truth_model.h): the gold map minimises the summed log-loss over tau in
// [kMinTemperature, 1], found (calibrated_truth_model.cc) by a 13-point grid on log tau and then
// golden-section search to a width of 1e-4. Four rows (0.9, 0.1) with truth 0, 0, 0, 1: for K = 2
// both maps give q0 = 0.9^tau / (0.9^tau + 0.1^tau) = 1 / (1 + 9^-tau), and the log-loss
// -[3 log q0 + log(1 - q0)] is least at q0 = 3/4 (the empirical frequency), i.e. 9^-tau = 1/3,
// tau = ln 3 / ln 9 = 0.5 exactly. That lies between grid points (log tau = -0.693; the grid on
// [ln 0.05, 0] steps 0.2496: -0.749 and -0.499, tau 0.473 and 0.607), so only a working
// golden-section search lands within 1e-3. The loss there: -(3 ln 0.75 + ln 0.25)
// = 3 * 0.2876821 + 1.3862944 = 2.2493406.
TEST(CalibrationMapTest, TheGoldMapFindsTheLogLossOptimumBetweenGridPoints) {
  const std::vector<double> rows = {0.9, 0.1, 0.9, 0.1, 0.9, 0.1, 0.9, 0.1};
  const std::vector<int32_t> truth = {0, 0, 0, 1};
  const FittedMap map = FitGoldMap(rows, 2, truth);
  EXPECT_NEAR(map.temperature, 0.5, 1e-3);
  EXPECT_NEAR(map.loss, -(3 * std::log(0.75) + std::log(0.25)), 1e-6);
  EXPECT_NEAR(map.loss, 2.2493406, 1e-6);
}

// A binary model that serves (p0, 1 - p0) (label 0) or (0.14, 0.86) (label 1) for every item
// whose gold it was not fitted with, and
// (0.001, 0.999)-sharp posteriors toward the gold of the items it was fitted with: a model that
// has memorised the gold it saw. Its clones keep nothing of the fit, so the cross-fitted
// posteriors of the gold map reveal exactly which gold each fold's copy was given. Product
// form: uniform prior x AnnotatorConfusion (0.9 right) on items with one label 0.
class GoldMemorisingModel final : public TruthModel {
 public:
  explicit GoldMemorisingModel(double p0 = 0.9) : p0_(p0) {}
  std::string_view method() const override { return "gold_memorising"; }
  int32_t num_classes() const override { return 2; }
  bool has_parameters() const override { return true; }
  std::unique_ptr<TruthModel> Clone() const override {
    return std::make_unique<GoldMemorisingModel>(p0_);
  }
  absl::StatusOr<FitReport> Fit(const AnnotationMatrix&, absl::Span<const int32_t> gold,
                                bool) override {
    fitted_gold_.assign(gold.begin(), gold.end());
    return FitReport{};
  }
  void ItemPosterior(absl::Span<const AnnotationMatrix::Entry> labels, int32_t gold_label,
                     absl::Span<double> out) const override {
    if (gold_label >= 0) {
      out[gold_label] = 1.0;
      out[1 - gold_label] = 0.0;
      return;
    }
    const bool says1 = !labels.empty() && labels[0].label == 1;
    out[0] = says1 ? 0.14 : p0_;
    out[1] = says1 ? 0.86 : 1 - p0_;
  }
  void ItemPosteriorForItem(int32_t item, absl::Span<const AnnotationMatrix::Entry> labels,
                            int32_t gold_label, absl::Span<double> out) const override {
    ItemPosterior(labels, gold_label, out);
    if (gold_label < 0 && item < static_cast<int32_t>(fitted_gold_.size()) &&
        fitted_gold_[item] >= 0) {
      out[fitted_gold_[item]] = 0.999;
      out[1 - fitted_gold_[item]] = 0.001;
    }
  }
  std::vector<double> AnnotatorConfusion(int32_t) const override { return {0.9, 0.1, 0.1, 0.9}; }
  std::string Serialize() const override { return "inner"; }
  absl::Status Restore(std::string_view) override { return absl::OkStatus(); }

 private:
  double p0_;
  std::vector<int32_t> fitted_gold_;
};

// Items 0..99 have one label and gold, 0 except every 4th (25 ones); items 100..102 have gold 1
// but no label; items 103..109 have a label and no gold. The gold map must score each labelled
// gold item with a copy that did not see its gold: all 100 rows are then (0.9, 0.1) against a
// truth 0 three times in four. As in TheGoldMapFindsTheLogLossOptimumBetweenGridPoints, the
// log-loss -[75 log q0 + 25 log(1 - q0)] with q0 = 1 / (1 + 9^-tau) is least at q0 = 3/4,
// tau = ln 3 / ln 9 = 1/2. ECE (10 bins): before, one bin of confidence 0.9 and accuracy 0.75,
// |75 - 90| / 100 = 0.15; after, confidence 0.75 = accuracy, about 0. Had a copy seen the gold
// of the items it scores, its rows would follow the gold (0.999) and the map would stay at
// tau = 1; had the unlabelled gold items been scored (they carry no crowd signal), there would
// be 103 rows.
AnnotationMatrix GoldMapData(int32_t labelled_gold, std::vector<int32_t>& gold) {
  constexpr int32_t kItems = 110;
  std::vector<Annotation> annotations;
  gold.assign(kItems, -1);
  for (int32_t i = 0; i < kItems; ++i) {
    if (i < labelled_gold) gold[i] = i % 4 == 3 ? 1 : 0;
    if (i >= 100 && i < 103) {
      gold[i] = 1;
      continue;
    }
    annotations.push_back({i, 0, 0});
  }
  absl::StatusOr<AnnotationMatrix> matrix = AnnotationMatrix::Build(kItems, 1, 2, annotations);
  EXPECT_THAT(matrix.status(), IsOk());
  return *std::move(matrix);
}

TEST(CalibrationMapTest, TheGoldMapScoresOnlyLabelledGoldItemsWithCopiesBlindToTheirGold) {
  std::vector<int32_t> gold;
  const AnnotationMatrix data = GoldMapData(100, gold);
  CalibratedTruthModel model(std::make_unique<GoldMemorisingModel>());
  ASSERT_THAT(model.Fit(data, gold, false).status(), IsOk());
  EXPECT_EQ(model.calibration().source, CalibrationSource::kGold);
  EXPECT_EQ(model.calibration().gold_items, 100);
  EXPECT_NEAR(model.calibration().temperature, 0.5, 1e-3);
  EXPECT_NEAR(model.calibration().gold_ece_raw, 0.15, 1e-12);
  EXPECT_NEAR(model.calibration().gold_ece, 0.0, 1e-3);

  // Served: a non-gold item's (0.9, 0.1) through the map, q0 = 1 / (1 + 9^-1/2) = 3/4; gold
  // stays one-hot through both entry points.
  std::vector<double> out(2);
  model.ItemPosterior(data.LabelsOfItem(105), -1, absl::MakeSpan(out));
  EXPECT_NEAR(out[0], 0.75, 1e-3);
  EXPECT_NEAR(out[0] + out[1], 1.0, 1e-12);
  model.ItemPosterior(data.LabelsOfItem(3), 1, absl::MakeSpan(out));
  EXPECT_EQ(out, (std::vector<double>{0.0, 1.0}));
  model.ItemPosteriorForItem(3, data.LabelsOfItem(3), 1, absl::MakeSpan(out));
  EXPECT_EQ(out, (std::vector<double>{0.0, 1.0}));
}

// A gold map, with its source and gold statistics, survives Serialize and Restore
// (calibrated_truth_model.h: Serialize writes the map, Restore reads it back).
TEST(CalibrationMapTest, AGoldMapRestoresWithItsGoldStatistics) {
  std::vector<int32_t> gold;
  const AnnotationMatrix data = GoldMapData(100, gold);
  CalibratedTruthModel model(std::make_unique<GoldMemorisingModel>());
  ASSERT_THAT(model.Fit(data, gold, false).status(), IsOk());
  ASSERT_EQ(model.calibration().source, CalibrationSource::kGold);
  CalibratedTruthModel restored(std::make_unique<GoldMemorisingModel>());
  ASSERT_THAT(restored.Restore(model.Serialize()), IsOk());
  EXPECT_EQ(restored.calibration().source, CalibrationSource::kGold);
  EXPECT_EQ(restored.calibration().kind, model.calibration().kind);
  EXPECT_EQ(restored.calibration().temperature, model.calibration().temperature);
  EXPECT_EQ(restored.calibration().gold_items, 100);
  EXPECT_NEAR(restored.calibration().gold_ece_raw, 0.15, 1e-12);
  EXPECT_EQ(restored.calibration().gold_ece, model.calibration().gold_ece);
  std::vector<double> out(2);
  restored.ItemPosterior(data.LabelsOfItem(105), -1, absl::MakeSpan(out));
  EXPECT_NEAR(out[0], 0.75, 1e-3);
}

// kMinGoldItems labelled gold items are enough for the gold map (not one more).
TEST(CalibrationMapTest, ExactlyTheMinimumNumberOfGoldItemsUsesTheGoldMap) {
  std::vector<int32_t> gold;
  const AnnotationMatrix data =
      GoldMapData(static_cast<int32_t>(CalibratedTruthModel::kMinGoldItems), gold);
  CalibratedTruthModel model(std::make_unique<GoldMemorisingModel>());
  ASSERT_THAT(model.Fit(data, gold, false).status(), IsOk());
  EXPECT_EQ(model.calibration().source, CalibrationSource::kGold);
  EXPECT_EQ(model.calibration().gold_items, CalibratedTruthModel::kMinGoldItems);
}

// A binary model that shows how the gold map's cross-fitted copies were fitted and with how many
// labels each gold item was scored. Clones keep nothing of a fit. A copy serves (0.9, 0.1) for
// an item whose gold it did not see only if it was warm-started with some gold (the other
// half's) and given a single label; otherwise (0.99, 0.01). Gold it saw it has memorised
// (0.999 toward it), as GoldMemorisingModel.
class FoldObservingModel final : public TruthModel {
 public:
  std::string_view method() const override { return "fold_observing"; }
  int32_t num_classes() const override { return 2; }
  bool has_parameters() const override { return true; }
  std::unique_ptr<TruthModel> Clone() const override {
    return std::make_unique<FoldObservingModel>();
  }
  absl::StatusOr<FitReport> Fit(const AnnotationMatrix&, absl::Span<const int32_t> gold,
                                bool warm_start) override {
    fitted_gold_.assign(gold.begin(), gold.end());
    warm_start_ = warm_start;
    return FitReport{};
  }
  void ItemPosterior(absl::Span<const AnnotationMatrix::Entry> labels, int32_t gold_label,
                     absl::Span<double> out) const override {
    ItemPosteriorForItem(-1, labels, gold_label, out);
  }
  void ItemPosteriorForItem(int32_t item, absl::Span<const AnnotationMatrix::Entry> labels,
                            int32_t gold_label, absl::Span<double> out) const override {
    if (gold_label >= 0) {
      out[gold_label] = 1.0;
      out[1 - gold_label] = 0.0;
      return;
    }
    if (item >= 0 && item < static_cast<int32_t>(fitted_gold_.size()) &&
        fitted_gold_[item] >= 0) {
      out[fitted_gold_[item]] = 0.999;
      out[1 - fitted_gold_[item]] = 0.001;
      return;
    }
    const bool saw_gold = std::any_of(fitted_gold_.begin(), fitted_gold_.end(),
                                      [](int32_t g) { return g >= 0; });
    const double p0 = warm_start_ && saw_gold && labels.size() == 1 ? 0.9 : 0.99;
    out[0] = p0;
    out[1] = 1 - p0;
  }
  std::vector<double> AnnotatorConfusion(int32_t) const override { return {0.9, 0.1, 0.1, 0.9}; }
  std::string Serialize() const override { return "inner"; }
  absl::Status Restore(std::string_view) override { return absl::OkStatus(); }

 private:
  std::vector<int32_t> fitted_gold_;
  bool warm_start_ = false;
};

// calibrated_truth_model.h: each half of the gold items is scored by a copy refitted
// (warm-started) with only the other half's gold, and each gold item's posterior uses only as
// many of its labels as the items served carry. Items 0..99 are gold (0 except every 4th) with
// 3 labels each; items 100..109 carry 1 label and no gold, so every gold item is scored with 1
// label (GoldCalibrationLabelCounts). Then every row is (0.9, 0.1) against a truth 0 three times
// in four: tau = ln 3 / ln 9 = 1/2 and gold_ece_raw |75 - 90| / 100 = 0.15 (as in
// TheGoldMapScoresOnlyLabelledGoldItemsWithCopiesBlindToTheirGold). A copy refitted cold, or
// with no gold at all, or given all 3 labels, would give (0.99, 0.01): tau = ln 3 / ln 99 =
// 0.239 and gold_ece_raw |75 - 99| / 100 = 0.24.
TEST(CalibrationMapTest, TheGoldMapsCopiesAreWarmStartedWithTheOtherHalfsGoldAndServedLabelCounts) {
  std::vector<Annotation> annotations;
  std::vector<int32_t> gold(110, -1);
  for (int32_t i = 0; i < 110; ++i) {
    if (i < 100) {
      gold[i] = i % 4 == 3 ? 1 : 0;
      for (int32_t a = 0; a < 3; ++a) annotations.push_back({i, a, 0});
    } else {
      annotations.push_back({i, 0, 0});
    }
  }
  absl::StatusOr<AnnotationMatrix> data = AnnotationMatrix::Build(110, 3, 2, annotations);
  ASSERT_THAT(data.status(), IsOk());
  CalibratedTruthModel model(std::make_unique<FoldObservingModel>());
  ASSERT_THAT(model.Fit(*data, gold, false).status(), IsOk());
  ASSERT_EQ(model.calibration().source, CalibrationSource::kGold);
  EXPECT_EQ(model.calibration().gold_items, 100);
  EXPECT_NEAR(model.calibration().gold_ece_raw, 0.15, 1e-12);
  EXPECT_NEAR(model.calibration().temperature, 0.5, 1e-3);
}

// gold_ece_raw is the ECE (10 equal-width bins, bin = floor(10 x confidence)) of the gold
// items' cross-fitted posteriors. Items 0..59 say 0 and are served (0.95, 0.05), gold 0 except
// every 4th (45 right); items 60..99 say 1 and are served (0.14, 0.86), all gold 1 (40 right).
// Bin 9 holds the first 60: |45 - 60 x 0.95| = 12; bin 8 the other 40: |40 - 40 x 0.86| = 5.6.
// ECE = (12 + 5.6) / 100 = 0.176. (One bin for all, as rounding 8.6 up would give, is
// |85 - 91.4| / 100 = 0.064; the signed sum -0.064.)
TEST(CalibrationMapTest, TheGoldEceIsTheBinnedCalibrationErrorOfTheCrossFittedRows) {
  std::vector<Annotation> annotations;
  std::vector<int32_t> gold(100);
  for (int32_t i = 0; i < 100; ++i) {
    const int32_t label = i < 60 ? 0 : 1;
    annotations.push_back({i, 0, label});
    gold[i] = i < 60 ? (i % 4 == 3 ? 1 : 0) : 1;
  }
  absl::StatusOr<AnnotationMatrix> data = AnnotationMatrix::Build(100, 1, 2, annotations);
  ASSERT_THAT(data.status(), IsOk());
  CalibratedTruthModel model(std::make_unique<GoldMemorisingModel>(0.95));
  ASSERT_THAT(model.Fit(*data, gold, false).status(), IsOk());
  ASSERT_EQ(model.calibration().source, CalibrationSource::kGold);
  EXPECT_NEAR(model.calibration().gold_ece_raw, 0.176, 1e-12);
  EXPECT_LT(model.calibration().gold_ece, model.calibration().gold_ece_raw);
}

// A binary model that serves an exact tie (0.5, 0.5) for an item labelled 0 and (0.45, 0.55)
// for one labelled 1, whatever it was fitted with.
class TieServingModel final : public TruthModel {
 public:
  std::string_view method() const override { return "tie_serving"; }
  int32_t num_classes() const override { return 2; }
  bool has_parameters() const override { return true; }
  std::unique_ptr<TruthModel> Clone() const override {
    return std::make_unique<TieServingModel>();
  }
  absl::StatusOr<FitReport> Fit(const AnnotationMatrix&, absl::Span<const int32_t>,
                                bool) override {
    return FitReport{};
  }
  void ItemPosterior(absl::Span<const AnnotationMatrix::Entry> labels, int32_t gold_label,
                     absl::Span<double> out) const override {
    if (gold_label >= 0) {
      out[gold_label] = 1.0;
      out[1 - gold_label] = 0.0;
      return;
    }
    const bool says1 = !labels.empty() && labels[0].label == 1;
    out[0] = says1 ? 0.45 : 0.5;
    out[1] = says1 ? 0.55 : 0.5;
  }
  std::vector<double> AnnotatorConfusion(int32_t) const override { return {0.9, 0.1, 0.1, 0.9}; }
  std::string Serialize() const override { return "inner"; }
  absl::Status Restore(std::string_view) override { return absl::OkStatus(); }
};

// The gold ECE predicts the lowest class of a tie, as ClassificationScores::ece. Items 0..29
// say 0 and are served (0.5, 0.5), gold 0; items 30..59 say 1 and are served (0.45, 0.55),
// gold 1. All 60 rows fall in bin 5: the ties count as right, so correct 60, confidence
// 30 x 0.5 + 30 x 0.55 = 31.5 and gold_ece_raw = |60 - 31.5| / 60 = 0.475. (Ties going to
// class 1 would give |30 - 31.5| / 60 = 0.025.)
TEST(CalibrationMapTest, TheGoldEceCountsATieAsTheLowestClass) {
  std::vector<Annotation> annotations;
  std::vector<int32_t> gold(60);
  for (int32_t i = 0; i < 60; ++i) {
    const int32_t label = i < 30 ? 0 : 1;
    annotations.push_back({i, 0, label});
    gold[i] = label;
  }
  absl::StatusOr<AnnotationMatrix> data = AnnotationMatrix::Build(60, 1, 2, annotations);
  ASSERT_THAT(data.status(), IsOk());
  CalibratedTruthModel model(std::make_unique<TieServingModel>());
  ASSERT_THAT(model.Fit(*data, gold, false).status(), IsOk());
  ASSERT_EQ(model.calibration().source, CalibrationSource::kGold);
  EXPECT_EQ(model.calibration().gold_items, 60);
  EXPECT_NEAR(model.calibration().gold_ece_raw, 0.475, 1e-12);
}

// FitLabelMap takes each held-out label's share out of its annotator's confusion
// (calibrated_truth_model.h). Items 0 and 1 are each labelled 0 by annotators 0 and 1; item 2 is
// labelled 1 by annotator 2 alone. Posteriors: items 0, 1 p = (0.64, 0.04) / 0.68 =
// (16/17, 1/17); item 2 (0.2, 0.8).
//   - Held out, a label of item 0 or 1 leaves q ∝ p / pi[., 0] = (0.8, 0.2), q ∝ (0.8^tau,
//     0.2^tau). Its annotator's expected class counts are N = 2p, so without this item
//     pi^-i[k, 0] = (pi[k, 0] N_k - p_k) / (N_k - p_k) = 2 pi[k, 0] - 1: 0.6 for k = 0, and
//     -0.6, clamped to 1e-6, for k = 1. Predictive 0.6 q0 + 1e-6 q1, largest at tau = 1:
//     each of the 4 labels costs -ln(0.8 x 0.6 + 0.2 x 1e-6). Uncorrected it would be
//     -ln(0.8 x 0.8 + 0.2 x 0.2) = -ln 0.68.
//   - Item 2's only label says nothing about tau (without it only the prior is left) and is
//     not counted; counted it would add -ln 0.5.
TEST(CalibrationMapTest, TheLabelMapTakesTheHeldOutLabelsShareOutOfItsAnnotator) {
  absl::StatusOr<AnnotationMatrix> data = AnnotationMatrix::Build(
      3, 3, 2, {{0, 0, 0}, {0, 1, 0}, {1, 0, 0}, {1, 1, 0}, {2, 2, 1}});
  ASSERT_THAT(data.status(), IsOk());
  const SymmetricBinaryModel model(0.8, 0.8);  // The product form.
  const std::vector<double> posteriors = AllPosteriors(model, *data, {});
  ASSERT_NEAR(posteriors[0], 16.0 / 17, 1e-15);
  const FittedMap map = FitLabelMap(model, *data, posteriors);
  EXPECT_NEAR(map.temperature, 1.0, 1e-3);
  EXPECT_NEAR(map.loss, -4 * std::log(0.8 * 0.6 + 0.2 * 1e-6), 1e-9);
}

// A map fitted on crowd labels that came out the identity (no item with two labels) is
// still written with its header (its source is crowd_labels), and tau = 1 is inside the range
// Restore accepts, [kMinTemperature, kMaxTemperature].
TEST(CalibrationMapTest, AnIdentityMapFittedOnCrowdLabelsRestores) {
  absl::StatusOr<AnnotationMatrix> data =
      AnnotationMatrix::Build(2, 2, 2, {{0, 0, 0}, {1, 1, 1}});
  ASSERT_THAT(data.status(), IsOk());
  CalibratedTruthModel model(std::make_unique<SymmetricBinaryModel>(0.8, 0.8));
  ASSERT_THAT(model.Fit(*data, {}, false).status(), IsOk());
  ASSERT_EQ(model.calibration().source, CalibrationSource::kCrowdLabels);
  ASSERT_EQ(model.calibration().temperature, 1.0);
  CalibratedTruthModel restored(std::make_unique<SymmetricBinaryModel>(0.8, 0.8));
  ASSERT_THAT(restored.Restore(model.Serialize()), IsOk());
  EXPECT_EQ(restored.calibration().source, CalibrationSource::kCrowdLabels);
  EXPECT_EQ(restored.calibration().temperature, 1.0);
}

// Both maps must predict a held-out label from its own posterior's top class with that class's
// likelihood. One item, labelled 0 by annotator 0 and 1 by annotator 1 (no other labels, so no
// share correction), under SymmetricBinaryModel(0.8, 0.8): the posterior is (0.5, 0.5), and
// holding out either label leaves q ∝ p / pi[., l] whose top class is the other label's:
// q_top = 1 / (1 + 4^-tau) on the class that mispredicts the held-out label. Its predictive
// probability 0.8 (1 - q_top) + 0.2 q_top = 0.8 - 0.6 q_top is largest where q_top is
// smallest: tau at the floor kMinTemperature = 0.05, for either map (the same for K = 2), and
// loss -2 ln(0.8 - 0.6 / (1 + 4^-0.05)) = 1.4284.
TEST(CalibrationMapTest, TheLabelMapSoftensAPosteriorWhoseTopClassMispredictsHeldOutLabels) {
  absl::StatusOr<AnnotationMatrix> data = AnnotationMatrix::Build(1, 2, 2, {{0, 0, 0}, {0, 1, 1}});
  ASSERT_THAT(data.status(), IsOk());
  const SymmetricBinaryModel model(0.8, 0.8);  // The product form.
  const std::vector<double> posteriors = AllPosteriors(model, *data, {});
  const FittedMap map = FitLabelMap(model, *data, posteriors);
  EXPECT_NEAR(map.temperature, CalibratedTruthModel::kMinTemperature, 1e-4);
  const double q_top = 1 / (1 + std::pow(4.0, -CalibratedTruthModel::kMinTemperature));
  EXPECT_NEAR(map.loss, -2 * std::log(0.8 - 0.6 * q_top), 1e-4);
}

// A binary model that is not of the product form: it serves (0.99, 0.01) toward its item's
// majority label (ties to class 0) however many labels agree, while its annotators are 0.8
// right. Items labelled (0, 0, 0) and (0, 1, 0) get the same posterior, which no prior times
// a product of those confusions gives.
class MajorityCertainModel final : public TruthModel {
 public:
  std::string_view method() const override { return "majority_certain"; }
  int32_t num_classes() const override { return 2; }
  bool has_parameters() const override { return true; }
  std::unique_ptr<TruthModel> Clone() const override {
    return std::make_unique<MajorityCertainModel>();
  }
  absl::StatusOr<FitReport> Fit(const AnnotationMatrix&, absl::Span<const int32_t>,
                                bool) override {
    return FitReport{};
  }
  void ItemPosterior(absl::Span<const AnnotationMatrix::Entry> labels, int32_t gold_label,
                     absl::Span<double> out) const override {
    if (gold_label >= 0) {
      out[gold_label] = 1.0;
      out[1 - gold_label] = 0.0;
      return;
    }
    int ones = 0;
    for (const AnnotationMatrix::Entry& e : labels) ones += e.label;
    const int32_t majority = 2 * ones > static_cast<int>(labels.size()) ? 1 : 0;
    out[majority] = 0.99;
    out[1 - majority] = 0.01;
  }
  std::vector<double> AnnotatorConfusion(int32_t) const override { return {0.8, 0.2, 0.2, 0.8}; }
  std::string Serialize() const override { return "inner"; }
  absl::Status Restore(std::string_view) override { return absl::OkStatus(); }
};

// calibrated_truth_model.h: for a model whose posterior is not prior x product of its
// confusions (mv's vote shares), the held-out posterior is not exact and the map fitted on
// crowd labels stays the identity (FitLabelMap returns FittedMap{}: tau 1, loss 0). Ten items
// labelled (0, 0, 0) and ten (0, 1, 0), each label by its own annotator: the held-out 1s of a
// (0.99, 0.01) posterior would ask for softening, but no map may be fitted.
TEST(CalibrationMapTest, TheLabelMapStaysTheIdentityForAModelNotOfTheProductForm) {
  std::vector<Annotation> annotations;
  for (int32_t i = 0; i < 20; ++i) {
    for (int32_t n = 0; n < 3; ++n) {
      annotations.push_back({i, 3 * i + n, i >= 10 && n == 1 ? 1 : 0});
    }
  }
  absl::StatusOr<AnnotationMatrix> data = AnnotationMatrix::Build(20, 60, 2, annotations);
  ASSERT_THAT(data.status(), IsOk());
  const MajorityCertainModel inner;
  const FittedMap map = FitLabelMap(inner, *data, AllPosteriors(inner, *data, {}));
  EXPECT_EQ(map.temperature, 1.0);
  EXPECT_EQ(map.loss, 0.0);

  CalibratedTruthModel model(std::make_unique<MajorityCertainModel>());
  ASSERT_THAT(model.Fit(*data, {}, false).status(), IsOk());
  EXPECT_EQ(model.calibration().source, CalibrationSource::kCrowdLabels);
  EXPECT_EQ(model.calibration().temperature, 1.0);
  std::vector<double> out(2);
  model.ItemPosteriorForItem(10, data->LabelsOfItem(10), -1, absl::MakeSpan(out));
  EXPECT_EQ(out, (std::vector<double>{0.99, 0.01}));
}

// The product-form check skips items whose posterior underflowed (a class below 1e-200, where
// the floor of the log breaks the identity): a confident item must not cost a product-form
// model its map. Item 0 is labelled 0 by 600 annotators, so its class 1 underflows to 0 under
// SymmetricBinaryModel(0.8, 0.8); item 1 is labelled 0 and 1, as in
// TheLabelMapSoftensAPosteriorWhoseTopClassMispredictsHeldOutLabels, which wants tau at the
// floor. Item 0's held-out labels leave 599 zeros, a posterior whose top class keeps
// 1 / (1 + 4^-(599 tau)) = 1 - 1e-18 even at tau = 0.05: they do not move tau.
TEST(CalibrationMapTest, TheProductFormCheckSkipsAnItemWhosePosteriorUnderflowed) {
  std::vector<Annotation> annotations;
  for (int32_t a = 0; a < 600; ++a) annotations.push_back({0, a, 0});
  annotations.push_back({1, 600, 0});
  annotations.push_back({1, 601, 1});
  absl::StatusOr<AnnotationMatrix> data = AnnotationMatrix::Build(2, 602, 2, annotations);
  ASSERT_THAT(data.status(), IsOk());
  const SymmetricBinaryModel model(0.8, 0.8);
  const std::vector<double> posteriors = AllPosteriors(model, *data, {});
  ASSERT_LT(posteriors[1], 1e-200);
  const FittedMap map = FitLabelMap(model, *data, posteriors);
  EXPECT_NEAR(map.temperature, CalibratedTruthModel::kMinTemperature, 1e-3);
}

// A three-class model that serves (0.6, 0.3, 0.1) for every item without gold.
class FixedRowModel final : public TruthModel {
 public:
  std::string_view method() const override { return "fixed_row"; }
  int32_t num_classes() const override { return 3; }
  bool has_parameters() const override { return true; }
  std::unique_ptr<TruthModel> Clone() const override { return std::make_unique<FixedRowModel>(); }
  absl::StatusOr<FitReport> Fit(const AnnotationMatrix&, absl::Span<const int32_t>,
                                bool) override {
    return FitReport{};
  }
  void ItemPosterior(absl::Span<const AnnotationMatrix::Entry>, int32_t gold_label,
                     absl::Span<double> out) const override {
    if (gold_label >= 0) {
      std::fill(out.begin(), out.end(), 0.0);
      out[gold_label] = 1.0;
      return;
    }
    out[0] = 0.6;
    out[1] = 0.3;
    out[2] = 0.1;
  }
  std::vector<double> AnnotatorConfusion(int32_t) const override {
    return {0.8, 0.1, 0.1, 0.1, 0.8, 0.1, 0.1, 0.1, 0.8};
  }
  std::string Serialize() const override { return "inner"; }
  absl::Status Restore(std::string_view) override { return absl::OkStatus(); }
};

// With three classes the gold map chooses the top-label map when it fits better, and serves it.
// 80 gold items, all served (0.6, 0.3, 0.1), truth 0 44 times, 1 27 times, 2 9 times: the
// empirical distribution (0.55, 0.3375, 0.1125) keeps the others' 3 : 1 proportions, so the
// top-label map with q_top = 0.55 reaches the least log-loss of any distribution, at
// tau = logit(0.55) / logit(0.6) = ln(11/9) / ln(1.5) = 0.4949; the full temperature cannot
// (it would need tau = 0.705 for class 1 and 0.886 for class 2). Served rows are then
// (0.55, 0.3375, 0.1125).
TEST(CalibrationMapTest, TheGoldMapServesTheTopLabelMapWhenItFitsBetter) {
  std::vector<Annotation> annotations;
  std::vector<int32_t> gold(81, -1);
  for (int32_t i = 0; i < 81; ++i) {
    annotations.push_back({i, 0, 0});
    if (i < 80) gold[i] = i < 44 ? 0 : (i < 71 ? 1 : 2);
  }
  absl::StatusOr<AnnotationMatrix> data = AnnotationMatrix::Build(81, 1, 3, annotations);
  ASSERT_THAT(data.status(), IsOk());
  CalibratedTruthModel model(std::make_unique<FixedRowModel>());
  ASSERT_THAT(model.Fit(*data, gold, false).status(), IsOk());
  ASSERT_EQ(model.calibration().source, CalibrationSource::kGold);
  EXPECT_EQ(model.calibration().kind, CalibrationMapKind::kTopLabelTemperature);
  EXPECT_NEAR(model.calibration().temperature, std::log(11.0 / 9) / std::log(1.5), 1e-3);
  std::vector<double> out(3);
  model.ItemPosteriorForItem(80, data->LabelsOfItem(80), -1, absl::MakeSpan(out));
  EXPECT_NEAR(out[0], 0.55, 1e-4);
  EXPECT_NEAR(out[1], 0.3375, 1e-4);
  EXPECT_NEAR(out[2], 0.1125, 1e-4);
}

// Three classes, posterior = uniform prior x the product of a fixed confusion (row = true
// class) for every annotator: ds's product form.
constexpr double kThreeClassConfusion[3][3] = {
    {0.7, 0.25, 0.05}, {0.2, 0.75, 0.05}, {0.15, 0.15, 0.7}};

class ProductForm3Model final : public TruthModel {
 public:
  std::string_view method() const override { return "product_form3"; }
  int32_t num_classes() const override { return 3; }
  bool has_parameters() const override { return true; }
  std::unique_ptr<TruthModel> Clone() const override {
    return std::make_unique<ProductForm3Model>();
  }
  absl::StatusOr<FitReport> Fit(const AnnotationMatrix&, absl::Span<const int32_t>,
                                bool) override {
    return FitReport{};
  }
  void ItemPosterior(absl::Span<const AnnotationMatrix::Entry> labels, int32_t gold_label,
                     absl::Span<double> out) const override {
    if (gold_label >= 0) {
      std::fill(out.begin(), out.end(), 0.0);
      out[gold_label] = 1.0;
      return;
    }
    double sum = 0;
    for (int k = 0; k < 3; ++k) {
      out[k] = 1.0;
      for (const AnnotationMatrix::Entry& e : labels) out[k] *= kThreeClassConfusion[k][e.label];
      sum += out[k];
    }
    for (int k = 0; k < 3; ++k) out[k] /= sum;
  }
  std::vector<double> AnnotatorConfusion(int32_t) const override {
    std::vector<double> c;
    for (const auto& row : kThreeClassConfusion) c.insert(c.end(), row, row + 3);
    return c;
  }
  std::string Serialize() const override { return "inner"; }
  absl::Status Restore(std::string_view) override { return absl::OkStatus(); }
};

// The map fitted on crowd labels is served with the kind it was fitted as. Items 0..2 are
// labelled 0, 0, 1 and item 3 0, 0, 0, each label by its own annotator (so no share
// correction). Held out, a label leaves the product of the other two: (0, 1) ->
// (0.504, 0.432, 0.065), (0, 0) -> (0.887, 0.072, 0.041). The label-1 labels, predicted mostly
// by class 1, want mass moved from class 0 to class 1 but not to class 2. Evaluated outside
// this code (a 20,001-point grid over tau in [0.05, 1] of the two losses of
// calibrated_truth_model.h): the full temperature is best at tau = 1 (loss 9.9388), the top-label
// map at tau = 0.611 (loss 9.9124), so the top-label map is chosen. Served, it keeps the
// proportions of the other classes and sets the top to sigmoid(tau logit(p_top)).
TEST(CalibrationMapTest, TheCrowdLabelMapServesTheTopLabelMapWhenItFitsBetter) {
  std::vector<Annotation> annotations;
  const int32_t labels[4][3] = {{0, 0, 1}, {0, 0, 1}, {0, 0, 1}, {0, 0, 0}};
  for (int32_t i = 0; i < 4; ++i) {
    for (int32_t n = 0; n < 3; ++n) annotations.push_back({i, 3 * i + n, labels[i][n]});
  }
  absl::StatusOr<AnnotationMatrix> data = AnnotationMatrix::Build(4, 12, 3, annotations);
  ASSERT_THAT(data.status(), IsOk());
  CalibratedTruthModel model(std::make_unique<ProductForm3Model>());
  ASSERT_THAT(model.Fit(*data, {}, false).status(), IsOk());
  ASSERT_EQ(model.calibration().source, CalibrationSource::kCrowdLabels);
  EXPECT_EQ(model.calibration().kind, CalibrationMapKind::kTopLabelTemperature);
  const double tau = model.calibration().temperature;
  EXPECT_NEAR(tau, 0.611, 0.005);

  // Item 0's inner posterior ∝ C[k][0]^2 C[k][1]: (0.1225, 0.03, 0.003375) / 0.155875.
  const double p[3] = {0.1225 / 0.155875, 0.03 / 0.155875, 0.003375 / 0.155875};
  const double top = 1 / (1 + std::pow((1 - p[0]) / p[0], tau));
  std::vector<double> out(3);
  model.ItemPosteriorForItem(0, data->LabelsOfItem(0), -1, absl::MakeSpan(out));
  EXPECT_NEAR(out[0], top, 1e-12);
  EXPECT_NEAR(out[1], (1 - top) * p[1] / (1 - p[0]), 1e-12);
  EXPECT_NEAR(out[2], (1 - top) * p[2] / (1 - p[0]), 1e-12);
}

// A matrix whose item i has counts[i] labels (annotators 0, 1, ..., class 0).
AnnotationMatrix WithLabelCounts(const std::vector<int32_t>& counts) {
  std::vector<Annotation> annotations;
  int32_t annotators = 1;
  for (size_t i = 0; i < counts.size(); ++i) {
    for (int32_t j = 0; j < counts[i]; ++j) {
      annotations.push_back({static_cast<int32_t>(i), j, 0});
    }
    annotators = std::max(annotators, counts[i]);
  }
  absl::StatusOr<AnnotationMatrix> data = AnnotationMatrix::Build(
      static_cast<int32_t>(counts.size()), annotators, 2, annotations);
  EXPECT_TRUE(data.ok()) << data.status();
  return *std::move(data);
}

TEST(GoldCalibrationLabelCountsTest, MapsGoldCountsByQuantileOntoTheOtherItemsCounts) {
  // Gold items 0-3 carry 10, 10, 12, 14 labels and item 4 none; items 5-12 are the others,
  // sorted counts 2 2 3 3 3 4 5 5. Mid-rank quantiles: 10 -> (0 + 2/2) / 4 = 0.25, index
  // floor(0.25 * 8) = 2, count 3; 12 -> 2.5 / 4 = 0.625, index 5, count 4; 14 -> 3.5 / 4 =
  // 0.875, index 7, count 5.
  const AnnotationMatrix data = WithLabelCounts({10, 10, 12, 14, 0, 3, 2, 5, 3, 4, 2, 3, 5});
  const std::vector<int32_t> gold = {1, 0, 1, 0, 1, -1, -1, -1, -1, -1, -1, -1, -1};
  EXPECT_THAT(GoldCalibrationLabelCounts(data, gold),
              ElementsAre(3, 3, 4, 5, -1, -1, -1, -1, -1, -1, -1, -1, -1));
}

TEST(GoldCalibrationLabelCountsTest, KeepsTheCountsWhenGoldAndOtherItemsCarryAlikeOrFewer) {
  // Alike: gold 3, 5 and others 3, 5 map onto themselves (quantiles 0.25 and 0.75).
  EXPECT_THAT(GoldCalibrationLabelCounts(WithLabelCounts({3, 5, 5, 3}), {0, 1, -1, -1}),
              ElementsAre(3, 5, -1, -1));
  // A gold item never gets more than its own labels.
  EXPECT_THAT(GoldCalibrationLabelCounts(WithLabelCounts({2, 10, 10}), {1, -1, -1}),
              ElementsAre(2, -1, -1));
  // No other labelled item (item 2 has none): every gold item keeps all its labels.
  EXPECT_THAT(GoldCalibrationLabelCounts(WithLabelCounts({4, 7, 0}), {0, 1, -1}),
              ElementsAre(4, 7, -1));
}

// The mid-rank quantile ranks a gold item among all gold items' counts, whatever order the
// gold items come in. Gold items 0-3 carry 14, 10, 12, 10 labels (sorted 10 10 12 14); items
// 4-11 are the others, sorted counts 2 2 3 3 3 4 5 5. 14 -> (3 + 1/2) / 4 = 0.875, index 7,
// count 5; 10 -> (0 + 2/2) / 4 = 0.25, index 2, count 3; 12 -> (2 + 1/2) / 4 = 0.625, index 5,
// count 4.
TEST(GoldCalibrationLabelCountsTest, RanksEachGoldItemAmongAllGoldItemsInAnyOrder) {
  const AnnotationMatrix data = WithLabelCounts({14, 10, 12, 10, 3, 2, 5, 3, 4, 2, 3, 5});
  const std::vector<int32_t> gold = {0, 1, 0, 1, -1, -1, -1, -1, -1, -1, -1, -1};
  EXPECT_THAT(GoldCalibrationLabelCounts(data, gold),
              ElementsAre(5, 3, 4, 3, -1, -1, -1, -1, -1, -1, -1, -1));
}

TEST(GoldCalibrationLabelsTest, KeepsAFixedSubsetOfTheCountInAnnotatorOrder) {
  const std::vector<AnnotationMatrix::Entry> labels = {{0, 1}, {2, 0}, {3, 1}, {7, 0}, {9, 1}};
  const std::vector<AnnotationMatrix::Entry> kept = GoldCalibrationLabels(4, labels, 2);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_LT(kept[0].other, kept[1].other);
  for (const AnnotationMatrix::Entry& e : kept) {
    EXPECT_TRUE(std::any_of(labels.begin(), labels.end(), [&](const AnnotationMatrix::Entry& l) {
      return l.other == e.other && l.label == e.label;
    })) << e.other;
  }
  const std::vector<AnnotationMatrix::Entry> again = GoldCalibrationLabels(4, labels, 2);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].other, kept[0].other);
  EXPECT_EQ(again[1].other, kept[1].other);
  // Across many items the choice is not always the lowest annotators.
  bool other_choice = false;
  for (int32_t item = 0; item < 50 && !other_choice; ++item) {
    const std::vector<AnnotationMatrix::Entry> k = GoldCalibrationLabels(item, labels, 2);
    other_choice = k[0].other != 0 || k[1].other != 2;
  }
  EXPECT_TRUE(other_choice);
  EXPECT_EQ(GoldCalibrationLabels(4, labels, 5).size(), 5u);
  EXPECT_EQ(GoldCalibrationLabels(4, labels, 9).size(), 5u);
}

// gold_ece_raw uses 10 equal-width bins, bin = floor(10 x confidence). 60 items labelled 0 are
// served (0.79, 0.21) and are gold 0 (all right); 40 labelled 1 are served (0.14, 0.86) and are
// gold 0 too (all wrong). Bin 7 holds the first 60: |60 - 60 x 0.79| = 12.6; bin 8 the other 40:
// |0 - 40 x 0.86| = 34.4; ECE = 47 / 100 = 0.47. (Nine bins would merge them: |60 - 81.8| / 100.)
TEST(CalibrationMapTest, TheGoldEceHasTenBins) {
  std::vector<Annotation> annotations;
  std::vector<int32_t> gold(100, 0);
  for (int32_t i = 0; i < 100; ++i) annotations.push_back({i, 0, i < 60 ? 0 : 1});
  absl::StatusOr<AnnotationMatrix> data = AnnotationMatrix::Build(100, 1, 2, annotations);
  ASSERT_THAT(data.status(), IsOk());
  CalibratedTruthModel model(std::make_unique<GoldMemorisingModel>(0.79));
  ASSERT_THAT(model.Fit(*data, gold, false).status(), IsOk());
  ASSERT_EQ(model.calibration().source, CalibrationSource::kGold);
  EXPECT_NEAR(model.calibration().gold_ece_raw, 0.47, 1e-12);
}

// calibrated_truth_model.h: tau = 1 is the identity, and a map is kept only for a lower loss.
// Uniform rows are left as they are by every tau, so no map lowers their log-loss and the
// fitted map is the identity, tau = 1.
TEST(CalibrationMapTest, RowsNoMapChangesGetTheIdentity) {
  const std::vector<double> rows = {0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5};
  const std::vector<int32_t> truth = {0, 1, 0, 1};
  const FittedMap map = FitGoldMap(rows, 2, truth);
  EXPECT_EQ(map.temperature, 1.0);
  EXPECT_NEAR(map.loss, 4 * std::log(2.0), 1e-12);
}

// CalibrationSource has the values 0, 1 and 2: Restore refuses a calibrated blob whose source
// is 3 (the control, source 2, restores).
TEST(CalibratedTruthModelTest, RestoreRefusesAnUnknownSource) {
  const auto blob = [](uint32_t source) {
    CalibratedBlobFields fields;
    fields.source = source;
    return CalibratedBlob(fields);
  };
  CalibratedTruthModel model(std::make_unique<FixedRowModel>());
  ASSERT_THAT(model.Restore(blob(2)), IsOk());
  EXPECT_EQ(model.calibration().source, CalibrationSource::kGold);
  EXPECT_THAT(model.Restore(blob(3)), StatusIs(absl::StatusCode::kInvalidArgument));
}

// calibrated_truth_model.h: Restore refuses a calibrated blob whose map kind is neither 1 nor 2,
// whose temperature is outside [kMinTemperature, kMaxTemperature], or that has bytes after the
// inner blob (the control, kind 2 at tau 0.05, restores).
TEST(CalibratedTruthModelTest, RestoreRefusesAnUnknownKindATemperatureOutOfRangeOrTrailingBytes) {
  const auto blob = [](uint32_t kind, double temperature, bool trailing) {
    CalibratedBlobFields fields;
    fields.kind = kind;
    fields.temperature = temperature;
    fields.trailing = trailing;
    return CalibratedBlob(fields);
  };
  CalibratedTruthModel model(std::make_unique<FixedRowModel>());
  ASSERT_THAT(model.Restore(blob(2, CalibratedTruthModel::kMinTemperature, false)), IsOk());
  EXPECT_EQ(model.calibration().kind, CalibrationMapKind::kTopLabelTemperature);
  for (const std::string& bad : {blob(3, 0.5, false), blob(0, 0.5, false), blob(1, 1.5, false),
                                 blob(1, 0.01, false), blob(1, 0.5, true)}) {
    EXPECT_THAT(model.Restore(bad), StatusIs(absl::StatusCode::kInvalidArgument));
  }
  EXPECT_EQ(model.calibration().temperature, CalibratedTruthModel::kMinTemperature);
}

// calibrated_truth_model.h: Restore accepts a bare inner blob (stored before calibration) and
// restores it with the identity map, replacing a map the model had.
TEST(CalibratedTruthModelTest, RestoringABareInnerBlobResetsTheMapToTheIdentity) {
  CalibratedTruthModel model(std::make_unique<FixedRowModel>());
  ASSERT_THAT(model.Restore(CalibratedBlob({})), IsOk());
  ASSERT_EQ(model.calibration().temperature, 0.5);
  ASSERT_THAT(model.Restore("inner"), IsOk());
  EXPECT_EQ(model.calibration().temperature, 1.0);
  EXPECT_EQ(model.calibration().source, CalibrationSource::kNone);
  std::vector<double> out(3);
  model.ItemPosterior({}, -1, absl::MakeSpan(out));
  EXPECT_EQ(out, std::vector<double>({0.6, 0.3, 0.1}));
}

// calibrated_truth_model.h / WithoutMap: the copy serves the inner posteriors, as a wrapper made
// with fit_map false and restored from this model's version would: it fits no map, and a
// calibrated version restored into it keeps only its inner model.
TEST(CalibratedTruthModelTest, WithoutMapServesTheInnerPosteriorsAndNeverFitsAMap) {
  const Crowd crowd = CorrelatedCrowd(800, 5, 41);
  auto model = CalibratedDs();
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false).status(), IsOk());
  ASSERT_NE(model->calibration().temperature, 1.0);
  std::unique_ptr<CalibratedTruthModel> plain = model->WithoutMap();
  EXPECT_FALSE(plain->fits_map());
  EXPECT_EQ(plain->calibration().temperature, 1.0);
  EXPECT_EQ(AllPosteriors(*plain, crowd.matrix, {}),
            AllPosteriors(model->inner(), crowd.matrix, {}));
  ASSERT_THAT(plain->Restore(model->Serialize()), IsOk());
  EXPECT_EQ(plain->calibration().temperature, 1.0);
  EXPECT_EQ(plain->calibration().source, CalibrationSource::kNone);
  ASSERT_THAT(plain->Fit(crowd.matrix, {}, true).status(), IsOk());
  EXPECT_EQ(plain->calibration().source, CalibrationSource::kNone);
  EXPECT_EQ(plain->calibration().temperature, 1.0);
  EXPECT_EQ(AllPosteriors(*plain, crowd.matrix, {}),
            AllPosteriors(plain->inner(), crowd.matrix, {}));
}

// calibrated_truth_model.h / GoldCalibrationLabels: the `count` labels the gold map uses; a count
// of 0 keeps none (GoldCalibrationLabelCounts never asks for fewer than 1, but the function keeps
// exactly the count it is given).
TEST(GoldCalibrationLabelsTest, ACountOfZeroKeepsNoLabel) {
  const std::vector<AnnotationMatrix::Entry> labels = {{0, 1}, {2, 0}, {3, 1}};
  EXPECT_TRUE(GoldCalibrationLabels(4, labels, 0).empty());
  EXPECT_EQ(GoldCalibrationLabels(4, labels, 1).size(), 1u);
}

// calibrated_truth_model.h: the names the service reports for the map's kind and source.
TEST(CalibrationMapTest, KindAndSourceNames) {
  EXPECT_EQ(CalibrationMapKindName(CalibrationMapKind::kTemperature), "temperature");
  EXPECT_EQ(CalibrationMapKindName(CalibrationMapKind::kTopLabelTemperature),
            "top_label_temperature");
  EXPECT_EQ(CalibrationSourceName(CalibrationSource::kNone), "none");
  EXPECT_EQ(CalibrationSourceName(CalibrationSource::kCrowdLabels), "crowd_labels");
  EXPECT_EQ(CalibrationSourceName(CalibrationSource::kGold), "gold");
}

// A ds that refuses, in Restore with bounds, a project smaller than the one it was fitted on,
// standing in for a model whose blob names sizes it would allocate.
class BoundedDs final : public TruthModel {
 public:
  BoundedDs() : inner_(*DawidSkeneModel::Create(2, {})) {}
  std::string_view method() const override { return inner_->method(); }
  int32_t num_classes() const override { return 2; }
  bool has_parameters() const override { return inner_->has_parameters(); }
  std::unique_ptr<TruthModel> Clone() const override { return std::make_unique<BoundedDs>(); }
  absl::StatusOr<FitReport> Fit(const AnnotationMatrix& data, absl::Span<const int32_t> gold,
                                bool warm_start) override {
    return inner_->Fit(data, gold, warm_start);
  }
  void ItemPosterior(absl::Span<const AnnotationMatrix::Entry> labels, int32_t gold_label,
                     absl::Span<double> out) const override {
    inner_->ItemPosterior(labels, gold_label, out);
  }
  std::vector<double> AnnotatorConfusion(int32_t annotator) const override {
    return inner_->AnnotatorConfusion(annotator);
  }
  std::string Serialize() const override { return inner_->Serialize(); }
  absl::Status Restore(std::string_view serialized) override {
    return inner_->Restore(serialized);
  }
  absl::Status Restore(std::string_view serialized, const RestoreBounds& bounds) override {
    if (bounds.max_annotators < 5) return absl::InvalidArgumentError("too many annotators");
    return inner_->Restore(serialized);
  }

 private:
  std::unique_ptr<TruthModel> inner_;
};

// truth_model.h / Restore with bounds: the wrapper hands the bounds to its inner model, for a
// calibrated version and for a bare inner blob alike, and a refusal leaves it unchanged.
TEST(CalibratedTruthModelTest, RestoreWithBoundsPassesThemToTheInnerModel) {
  const Crowd crowd = CorrelatedCrowd(600, 5, 43);
  CalibratedTruthModel model(std::make_unique<BoundedDs>());
  ASSERT_THAT(model.Fit(crowd.matrix, {}, false).status(), IsOk());
  ASSERT_NE(model.calibration().temperature, 1.0);
  const std::string calibrated = model.Serialize();
  const std::string bare = model.inner().Serialize();
  TruthModel::RestoreBounds tight;
  tight.max_annotators = 4;
  TruthModel::RestoreBounds loose;
  loose.max_annotators = 5;
  for (const std::string& blob : {calibrated, bare}) {
    CalibratedTruthModel restored(std::make_unique<BoundedDs>());
    EXPECT_THAT(restored.Restore(blob, tight), StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_FALSE(restored.has_parameters());
    EXPECT_EQ(restored.calibration().source, CalibrationSource::kNone);
    ASSERT_THAT(restored.Restore(blob, loose), IsOk());
    EXPECT_EQ(AllPosteriors(restored.inner(), crowd.matrix, {}),
              AllPosteriors(model.inner(), crowd.matrix, {}));
  }
}

// calibrated_truth_model.h: Restore refuses a calibrated blob of another format version (the
// control, version 1, restores).
TEST(CalibratedTruthModelTest, RestoreRefusesAnotherFormatVersion) {
  const auto blob = [](uint32_t version) {
    CalibratedBlobFields fields;
    fields.format_version = version;
    return CalibratedBlob(fields);
  };
  CalibratedTruthModel model(std::make_unique<FixedRowModel>());
  EXPECT_THAT(model.Restore(blob(2)), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(model.calibration().source, CalibrationSource::kNone);
  ASSERT_THAT(model.Restore(blob(1)), IsOk());
  EXPECT_EQ(model.calibration().temperature, 0.5);
}

// calibrated_truth_model.h, top_label_temperature: the other classes share 1 - q_m in the
// proportions of p, where q_m = sigmoid(tau log(p_m / (1 - p_m))). When p_m is so near 1 that
// q_m rounds to 1, the others' share must still be e^(-tau L) / (1 + e^(-tau L)) (L the top
// log-odds), not 1 - q_m = 0. Row (1, 3e-20, 1e-20) at tau = 0.9: 1 - p_m = 4e-20, so the share
// is (4e-20)^0.9 / (1 + (4e-20)^0.9), about 1.9e-18, split 3 : 1.
TEST(CalibrationMapTest, TopLabelTemperatureKeepsTheOthersShareBelowRounding) {
  std::vector<double> row = {1.0, 3e-20, 1e-20};
  ApplyTopLabelTemperature(0.9, absl::MakeSpan(row));
  const double e = std::pow(4e-20, 0.9);
  const double share = e / (1 + e);
  EXPECT_EQ(row[0], 1.0);
  EXPECT_NEAR(row[1] / (0.75 * share), 1.0, 1e-9);
  EXPECT_NEAR(row[2] / (0.25 * share), 1.0, 1e-9);
}

// calibrated_truth_model.h: "On error the model (map included) is unchanged." A calibrated ds
// fitted on a correlated crowd has a softening map; a second Fit that ds refuses (a gold class
// 2 of a binary project) must leave that map, although a map fitted on the new data (one label
// per item: nothing to hold out) would be the identity.
TEST(CalibratedTruthModelTest, AFailedFitKeepsTheMap) {
  const Crowd crowd = CorrelatedCrowd(800, 5, 41);
  auto model = CalibratedDs();
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false).status(), IsOk());
  const PosteriorCalibration before = model->calibration();
  ASSERT_EQ(before.source, CalibrationSource::kCrowdLabels);
  ASSERT_LT(before.temperature, 1.0);
  const std::vector<double> served = AllPosteriors(*model, crowd.matrix, {});

  const Crowd single = CorrelatedCrowd(800, 1, 43);
  std::vector<int32_t> bad_gold(800, -1);
  bad_gold[5] = 2;
  EXPECT_THAT(model->Fit(single.matrix, bad_gold, true).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(model->calibration().source, CalibrationSource::kCrowdLabels);
  EXPECT_EQ(model->calibration().temperature, before.temperature);
  EXPECT_EQ(model->calibration().kind, before.kind);
  EXPECT_EQ(AllPosteriors(*model, crowd.matrix, {}), served);
}

// calibrated_truth_model.h: a wrapper made with fit_map false never fits a map; its Clone is
// such a wrapper too (Clone: a deep copy, options included), so a project on calibration "none"
// that refits a clone keeps serving the inner posteriors.
TEST(CalibratedTruthModelTest, ACloneOfAWrapperWithoutMapFitsNoMap) {
  const Crowd crowd = CorrelatedCrowd(800, 5, 41);
  auto ds = DawidSkeneModel::Create(2, {});
  ASSERT_THAT(ds.status(), IsOk());
  const CalibratedTruthModel plain(*std::move(ds), /*fit_map=*/false);
  std::unique_ptr<TruthModel> copy = plain.Clone();
  auto* wrapper = dynamic_cast<CalibratedTruthModel*>(copy.get());
  ASSERT_NE(wrapper, nullptr);
  EXPECT_FALSE(wrapper->fits_map());
  ASSERT_THAT(copy->Fit(crowd.matrix, {}, false).status(), IsOk());
  EXPECT_EQ(wrapper->calibration().source, CalibrationSource::kNone);
  EXPECT_EQ(wrapper->calibration().temperature, 1.0);
  EXPECT_EQ(AllPosteriors(*copy, crowd.matrix, {}),
            AllPosteriors(wrapper->inner(), crowd.matrix, {}));
}

// Items labelled by annotators 0 and 1 (each SymmetricBinaryModel(0.8, 0.8)): item i agrees
// (0, 0) when i is even and disagrees (0, 1) when it is odd.
AnnotationMatrix AlternatingAgreement(int32_t num_items) {
  std::vector<Annotation> annotations;
  annotations.reserve(2 * static_cast<size_t>(num_items));
  for (int32_t i = 0; i < num_items; ++i) {
    annotations.push_back({i, 0, 0});
    annotations.push_back({i, 1, i % 2});
  }
  absl::StatusOr<AnnotationMatrix> data = AnnotationMatrix::Build(num_items, 2, 2, annotations);
  EXPECT_THAT(data.status(), IsOk());
  return *std::move(data);
}

// calibrated_truth_model.h: projects with more than 2M (label, class) pairs use every n-th item
// only, n the smallest that keeps them to about 2M. With q = q_top = 1 / (1 + 4^-tau) (both
// maps, K = 2), a held-out label of an agreeing item is predicted with 0.2 + 0.6 q, one of a
// disagreeing item with 0.8 - 0.6 q (as in
// TheLabelMapSoftensAPosteriorWhoseTopClassMispredictsHeldOutLabels). The annotators hold
// hundreds of thousands of labels, so the share correction is negligible.
//   - 500,000 items: 2,000,000 pairs, every item. Equal numbers of both kinds: the loss
//     -2 ln(0.2 + 0.6 q) - 2 ln(0.8 - 0.6 q) per pair of items grows with q > 1/2, so tau is
//     at the floor, kMinTemperature.
//   - 500,001 items: 2,000,004 pairs, every 2nd item: items 0, 2, 4, ..., all agreeing, whose
//     loss falls as q grows: the identity, tau = 1.
TEST(CalibrationMapTest, TheLabelMapUsesEveryOtherItemJustAboveTwoMillionValues) {
  const SymmetricBinaryModel model(0.8, 0.8);
  const AnnotationMatrix all = AlternatingAgreement(500'000);
  const FittedMap every = FitLabelMap(model, all, AllPosteriors(model, all, {}));
  EXPECT_NEAR(every.temperature, CalibratedTruthModel::kMinTemperature, 1e-3);
  const AnnotationMatrix more = AlternatingAgreement(500'001);
  const FittedMap strided = FitLabelMap(model, more, AllPosteriors(model, more, {}));
  EXPECT_EQ(strided.temperature, 1.0);
}

// A binary model of the product form over per-item confusions (0.9 right, as glad's easiness
// fitted with the item's labels), whose annotators' confusion on an item outside the fit is not
// symmetric: a true 0 is labelled 0 with probability 0.8, a true 1 with 0.4.
class AsymmetricAnnotatorModel final : public TruthModel {
 public:
  std::string_view method() const override { return "asymmetric_annotator"; }
  int32_t num_classes() const override { return 2; }
  bool has_parameters() const override { return true; }
  std::unique_ptr<TruthModel> Clone() const override {
    return std::make_unique<AsymmetricAnnotatorModel>();
  }
  absl::StatusOr<FitReport> Fit(const AnnotationMatrix&, absl::Span<const int32_t>, bool) override {
    return FitReport{};
  }
  void ItemPosterior(absl::Span<const AnnotationMatrix::Entry> labels, int32_t gold_label,
                     absl::Span<double> out) const override {
    item_.ItemPosterior(labels, gold_label, out);
  }
  std::vector<double> AnnotatorConfusion(int32_t) const override { return {0.8, 0.2, 0.4, 0.6}; }
  std::vector<double> ItemAnnotatorConfusion(int32_t i, int32_t a) const override {
    return item_.ItemAnnotatorConfusion(i, a);
  }
  bool ConfusionsDependOnItem() const override { return true; }
  std::string Serialize() const override { return "inner"; }
  absl::Status Restore(std::string_view) override { return absl::OkStatus(); }

 private:
  SymmetricBinaryModel item_{0.9, 0.9};
};

// The held-out label l is predicted with sum_k q(k) pi_j[k, l] (calibrated_truth_model.h), pi_j
// = AnnotatorConfusion(j), row = true class. One item labelled 0 by annotators 0 and 1 (no
// share correction, as in AHeldOutLabelIsPredictedWithoutTheItemsOwnParameters): q ∝ (0.9^tau,
// 0.1^tau), predictive 0.8 q0 + 0.4 q1, largest at tau = 1: loss -2 ln(0.72 + 0.04) =
// -2 ln 0.76. Column 0 read as a row, (0.8, 0.2), would give -2 ln 0.74.
TEST(CalibratedTruthModelTest, AHeldOutLabelIsPredictedWithTheColumnOfItsLabel) {
  absl::StatusOr<AnnotationMatrix> data = AnnotationMatrix::Build(1, 2, 2, {{0, 0, 0}, {0, 1, 0}});
  ASSERT_THAT(data.status(), IsOk());
  const AsymmetricAnnotatorModel model;
  const FittedMap map = FitLabelMap(model, *data, AllPosteriors(model, *data, {}));
  EXPECT_EQ(map.temperature, 1.0);
  EXPECT_NEAR(map.loss, -2 * std::log(0.76), 1e-9);
}

// Three classes. Every annotator's confusion on an item (the factor the posterior holds) has
// the column (0.2, 0.2, 0.8) for label 2; on an item outside the fit (what predicts a held-out
// label) the column (0.6, 0.2, 0.1), rows (0.2, 0.2, 0.6), (0.4, 0.4, 0.2), (0.45, 0.45, 0.1).
class TiedHeldOutModel final : public TruthModel {
 public:
  std::string_view method() const override { return "tied_held_out"; }
  int32_t num_classes() const override { return 3; }
  bool has_parameters() const override { return true; }
  std::unique_ptr<TruthModel> Clone() const override {
    return std::make_unique<TiedHeldOutModel>();
  }
  absl::StatusOr<FitReport> Fit(const AnnotationMatrix&, absl::Span<const int32_t>, bool) override {
    return FitReport{};
  }
  void ItemPosterior(absl::Span<const AnnotationMatrix::Entry>, int32_t,
                     absl::Span<double> out) const override {
    std::fill(out.begin(), out.end(), 1.0 / 3);
  }
  std::vector<double> AnnotatorConfusion(int32_t) const override {
    return {0.2, 0.2, 0.6, 0.4, 0.4, 0.2, 0.45, 0.45, 0.1};
  }
  std::vector<double> ItemAnnotatorConfusion(int32_t, int32_t) const override {
    return {0.6, 0.2, 0.2, 0.2, 0.6, 0.2, 0.1, 0.1, 0.8};
  }
  bool ConfusionsDependOnItem() const override { return true; }
  std::string Serialize() const override { return "inner"; }
  absl::Status Restore(std::string_view) override { return absl::OkStatus(); }
};

// The top-label map's top class is the lowest index on ties (calibrated_truth_model.h), in the
// objective FitLabelMap minimises as in the map served. One item labelled 2 by annotators 0 and
// 1 (one label each: no share correction), inner posterior (0.45, 0.45, 0.1). Holding out
// either label leaves (0.45 / 0.2, 0.45 / 0.2, 0.1 / 0.8) ∝ (18, 18, 1) / 37: classes 0 and 1
// tie. With class 0 the top, q_top = 1 / (1 + (19/18)^tau) and the label is predicted with
// 0.6 q_top + (1 - q_top) (18 x 0.2 + 0.1) / 19, which grows as tau falls: tau at the floor,
// q_top = 0.4993242, loss -2 ln 0.3970945 = 1.8471618. The full temperature's predictive
// 0.4 (1 - q_2) + 0.1 q_2 is best at tau = 1, loss -2 ln(0.8 x 18/37 + 0.1/37) = 1.8735385, so
// the top-label map is kept. (Class 1 the top: 0.2 q_top + (1 - q_top) (18 x 0.6 + 0.1) / 19
// falls as tau falls, and the identity would be kept.)
TEST(CalibrationMapTest, TheLabelMapsTopClassIsTheLowestIndexOnTies) {
  absl::StatusOr<AnnotationMatrix> data = AnnotationMatrix::Build(1, 2, 3, {{0, 0, 2}, {0, 1, 2}});
  ASSERT_THAT(data.status(), IsOk());
  const TiedHeldOutModel model;
  const std::vector<double> posterior = {0.45, 0.45, 0.1};
  const FittedMap map = FitLabelMap(model, *data, posterior);
  EXPECT_EQ(map.kind, CalibrationMapKind::kTopLabelTemperature);
  EXPECT_NEAR(map.temperature, CalibratedTruthModel::kMinTemperature, 1e-4);
  EXPECT_NEAR(map.loss, 1.8471618, 1e-5);
}

// calibrated_truth_model.h: the label-free map softens only where held-out labels disagree more
// than the model predicts. On a crowd that always agrees (every annotator gives every item its
// class), each held-out label is the class the other labels point to, so its predictive
// probability sum_k q(k) pi_j[k, l] grows as q sharpens toward l (pi_j[l, l] is the largest of
// its column): both maps are best at tau = 1, the identity, served bit for bit.
TEST(CalibratedTruthModelTest, AnAgreeingCrowdKeepsTheIdentity) {
  std::vector<Annotation> annotations;
  for (int32_t i = 0; i < 300; ++i) {
    for (int32_t n = 0; n < 4; ++n) annotations.push_back({i, (i + n) % 12, i % 3});
  }
  absl::StatusOr<AnnotationMatrix> data = AnnotationMatrix::Build(300, 12, 3, annotations);
  ASSERT_THAT(data.status(), IsOk());
  absl::StatusOr<std::unique_ptr<DawidSkeneModel>> ds = DawidSkeneModel::Create(3, {});
  ASSERT_THAT(ds.status(), IsOk());
  CalibratedTruthModel model(*std::move(ds));
  ASSERT_THAT(model.Fit(*data, {}, false).status(), IsOk());
  EXPECT_EQ(model.calibration().source, CalibrationSource::kCrowdLabels);
  EXPECT_EQ(model.calibration().temperature, 1.0);
  EXPECT_EQ(AllPosteriors(model, *data, {}), AllPosteriors(model.inner(), *data, {}));
}

// calibrated_truth_model.h: the gold map minimises the gold log-loss over tau. Twenty rows
// (0.9, 0.1) with truth 0 for n of them: for K = 2 both maps give q0 = 1 / (1 + 9^-tau), and
// -[n log q0 + (20 - n) log(1 - q0)] is least at q0 = n / 20, tau = ln(n / (20 - n)) / ln 9,
// with loss -[n log(n / 20) + (20 - n) log((20 - n) / 20)]. The minimiser narrows tau to a
// width of 1e-4 in log tau (calibrated_truth_model.cc), so tau is within 1e-4 relative of it.
TEST(CalibrationMapTest, TheGoldMapsTemperatureIsTheLogLossMinimiserToWithinAWidthOf1e4) {
  for (const int n : {13, 14, 15, 16, 17}) {
    std::vector<double> rows;
    std::vector<int32_t> truth;
    for (int i = 0; i < 20; ++i) {
      rows.insert(rows.end(), {0.9, 0.1});
      truth.push_back(i < n ? 0 : 1);
    }
    const double f = n / 20.0;
    const double tau = std::log(f / (1 - f)) / std::log(9.0);
    const FittedMap map = FitGoldMap(rows, 2, truth);
    EXPECT_NEAR(map.temperature / tau, 1.0, 1e-4) << n;
    EXPECT_NEAR(map.loss, -(n * std::log(f) + (20 - n) * std::log(1 - f)), 1e-7) << n;
  }
}

// calibrated_truth_model.h: FitLabelMap is given the inner model's unclamped posteriors. Item 0,
// labelled 0 and 1, has gold 0 (one gold item: the crowd-label map); item 1 is labelled 0 and 0;
// each label by its own annotator (no share correction). Under SymmetricBinaryModel(0.8, 0.8),
// unclamped, they are the agreeing and the disagreeing item of
// TheLabelMapUsesEveryOtherItemJustAboveTwoMillionValues in equal numbers: tau at the floor.
// Clamped to (1, 0), item 0's held-out posteriors would stay one-hot at any tau (their loss
// barely depends on it), and item 1 alone would keep the identity.
TEST(CalibratedTruthModelTest, TheCrowdLabelMapIsFittedOnUnclampedPosteriors) {
  absl::StatusOr<AnnotationMatrix> data =
      AnnotationMatrix::Build(2, 4, 2, {{0, 0, 0}, {0, 1, 1}, {1, 2, 0}, {1, 3, 0}});
  ASSERT_THAT(data.status(), IsOk());
  CalibratedTruthModel model(std::make_unique<SymmetricBinaryModel>(0.8, 0.8));
  ASSERT_THAT(model.Fit(*data, {0, -1}, false).status(), IsOk());
  EXPECT_EQ(model.calibration().source, CalibrationSource::kCrowdLabels);
  EXPECT_NEAR(model.calibration().temperature, CalibratedTruthModel::kMinTemperature, 1e-3);
}

// calibrated_truth_model.h: the label-free map's held-out posterior is exact for the models whose
// posterior is prior x product of their confusions, ds, one_coin, mace and glad, which are
// overconfident on a crowd that errs together (as in LowersTheEceOfDsOnACorrelatedCrowd) and get
// a softening map; mv's vote shares are not of that form, and without gold mv keeps the
// identity.
TEST(CalibratedTruthModelTest, TheLabelMapSoftensTheProductFormMethodsAndLeavesMv) {
  const Crowd crowd = CorrelatedCrowd(3000, 7, 23, 0.5, 0.55);
  for (const char* method : {"ds", "one_coin", "mace", "glad", "mv"}) {
    absl::StatusOr<std::unique_ptr<TruthModel>> created = CreateTruthModel(method, 2, {});
    ASSERT_THAT(created.status(), IsOk());
    auto* model = dynamic_cast<CalibratedTruthModel*>(created->get());
    ASSERT_NE(model, nullptr);
    ASSERT_THAT(model->Fit(crowd.matrix, {}, false).status(), IsOk());
    EXPECT_EQ(model->calibration().source, CalibrationSource::kCrowdLabels) << method;
    if (std::string_view(method) == "mv") {
      EXPECT_EQ(model->calibration().temperature, 1.0);
      EXPECT_EQ(AllPosteriors(*model, crowd.matrix, {}),
                AllPosteriors(model->inner(), crowd.matrix, {}));
    } else {
      EXPECT_LT(model->calibration().temperature, 0.9) << method;
    }
  }
}

// SymmetricBinaryModel(0.7, 0.7) whose posteriors are rounded to float, as a model computing in
// single precision (the neural models) serves them.
class FloatRoundedModel final : public TruthModel {
 public:
  std::string_view method() const override { return "float_rounded"; }
  int32_t num_classes() const override { return 2; }
  bool has_parameters() const override { return true; }
  std::unique_ptr<TruthModel> Clone() const override {
    return std::make_unique<FloatRoundedModel>();
  }
  absl::StatusOr<FitReport> Fit(const AnnotationMatrix&, absl::Span<const int32_t>, bool) override {
    return FitReport{};
  }
  void ItemPosterior(absl::Span<const AnnotationMatrix::Entry> labels, int32_t gold_label,
                     absl::Span<double> out) const override {
    exact_.ItemPosterior(labels, gold_label, out);
    for (double& v : out) v = static_cast<float>(v);
  }
  std::vector<double> AnnotatorConfusion(int32_t a) const override {
    return exact_.AnnotatorConfusion(a);
  }
  std::string Serialize() const override { return "inner"; }
  absl::Status Restore(std::string_view) override { return absl::OkStatus(); }

 private:
  SymmetricBinaryModel exact_{0.7, 0.7};
};

// calibrated_truth_model.h: the held-out posterior is exact for the neural models without item
// features, which compute in single precision: a posterior of the product form rounded to float
// (log deviations near 1e-8) still passes FitLabelMap's product-form check, and gets the map
// the exact posteriors get. Items labelled (0, 1), (0, 0, 1) and (0, 0) in turn, each label by
// its own annotator: the disagreements ask for softening.
TEST(CalibrationMapTest, PosteriorsRoundedToFloatStillGetTheLabelMap) {
  std::vector<Annotation> annotations;
  const std::vector<std::vector<int32_t>> patterns = {{0, 1}, {0, 0, 1}, {0, 0}};
  int32_t annotator = 0;
  for (int32_t i = 0; i < 30; ++i) {
    for (const int32_t label : patterns[i % 3]) annotations.push_back({i, annotator++, label});
  }
  absl::StatusOr<AnnotationMatrix> data = AnnotationMatrix::Build(30, annotator, 2, annotations);
  ASSERT_THAT(data.status(), IsOk());
  const SymmetricBinaryModel exact(0.7, 0.7);
  const FittedMap exact_map = FitLabelMap(exact, *data, AllPosteriors(exact, *data, {}));
  ASSERT_LT(exact_map.temperature, 0.9);
  const FloatRoundedModel rounded;
  const std::vector<double> posteriors = AllPosteriors(rounded, *data, {});
  ASSERT_NE(posteriors[2], AllPosteriors(exact, *data, {})[2]);
  const FittedMap map = FitLabelMap(rounded, *data, posteriors);
  EXPECT_NEAR(map.temperature, exact_map.temperature, 1e-3);
}

// calibrated_truth_model.h: a gold item at mid-rank quantile q gets the count at index
// floor(q * n) of the n other items' sorted counts. Gold items 0, 1 carry 10 and 12 labels,
// the others 2, 4 and 6: 10 -> q = (0 + 1/2) / 2 = 0.25, floor(0.75) = 0, count 2; 12 -> q =
// (1 + 1/2) / 2 = 0.75, floor(2.25) = 2, count 6. (Rounding 0.75 would give index 1, count 4.)
TEST(GoldCalibrationLabelCountsTest, TakesTheIndexFloorOfTheQuantileTimesTheOtherItems) {
  EXPECT_THAT(GoldCalibrationLabelCounts(WithLabelCounts({10, 12, 2, 4, 6}), {0, 1, -1, -1, -1}),
              ElementsAre(2, 6, -1, -1, -1));
}

// calibrated_truth_model.h: the labels kept are those with the smallest hash of (item,
// annotator), so which of the same annotators' labels are kept varies from item to item.
TEST(GoldCalibrationLabelsTest, TheChoiceDependsOnTheItem) {
  const std::vector<AnnotationMatrix::Entry> labels = {{0, 1}, {2, 0}, {3, 1}, {7, 0}, {9, 1}};
  const std::vector<AnnotationMatrix::Entry> first = GoldCalibrationLabels(0, labels, 2);
  ASSERT_EQ(first.size(), 2u);
  bool differs = false;
  for (int32_t item = 1; item < 50 && !differs; ++item) {
    const std::vector<AnnotationMatrix::Entry> kept = GoldCalibrationLabels(item, labels, 2);
    ASSERT_EQ(kept.size(), 2u);
    differs = kept[0].other != first[0].other || kept[1].other != first[1].other;
  }
  EXPECT_TRUE(differs);
}

// calibrated_truth_model.h (kNone): a Fit after which the inner model has no parameters leaves
// the identity, also when the wrapper served a map before it (here one restored from a stored
// version, tau 0.5 on crowd labels).
TEST(CalibratedTruthModelTest, AFitLeavingNoParametersDropsAMapServedBefore) {
  CalibratedTruthModel model(std::make_unique<ParameterlessModel>());
  ASSERT_THAT(model.Restore(CalibratedBlob({})), IsOk());
  ASSERT_EQ(model.calibration().temperature, 0.5);
  absl::StatusOr<AnnotationMatrix> data =
      AnnotationMatrix::Build(2, 2, 2, {{0, 0, 0}, {0, 1, 1}, {1, 0, 0}, {1, 1, 0}});
  ASSERT_THAT(data.status(), IsOk());
  ASSERT_THAT(model.Fit(*data, {}, false).status(), IsOk());
  EXPECT_EQ(model.calibration().source, CalibrationSource::kNone);
  EXPECT_EQ(model.calibration().temperature, 1.0);
  EXPECT_EQ(AllPosteriors(model, *data, {}), AllPosteriors(model.inner(), *data, {}));
}

// calibrated_truth_model.h: a calibrated version starts with the 4 bytes kMagic, "VCAL"; any
// other blob is a bare inner blob (a version stored before calibration), restored with the
// identity map, even one that shares kMagic's last three bytes.
TEST(CalibratedTruthModelTest, OnlyTheFullMagicMarksACalibratedVersion) {
  CalibratedTruthModel model(std::make_unique<FixedRowModel>());
  ASSERT_THAT(model.Restore("xCAL and the rest of an inner blob"), IsOk());
  EXPECT_EQ(model.calibration().source, CalibrationSource::kNone);
  EXPECT_EQ(model.calibration().temperature, 1.0);
}

}  // namespace
}  // namespace verity::models

// CalibratedTruthModel: a TruthModel that serves another model's posteriors
// through a calibration map, so that an item served with confidence p is right
// with probability about p (issue 18).
//
// EM-fitted models (ds above all) are overconfident: they multiply the
// likelihoods of an item's labels as if the annotators erred independently,
// while real annotators err together on hard items. On the 12 shared datasets
// ds serves confidence > 0.99 for most items whose accuracy is 0.70-0.96
// (ECE 0.15-0.33), and AssignmentSettings.confidence_target stops buying
// labels too early. The wrapper fits the inner model, then a one-parameter
// map of the inner posterior p of an item (CalibrationMapKind), one of
//
//   temperature:            q_k ∝ p_k^tau
//   top_label_temperature:  the top class m (largest p_m, lowest index on
//                           ties) gets q_m = sigmoid(tau * log(p_m / (1 -
//                           p_m))), the other classes share 1 - q_m in the
//                           proportions of p
//
// tau < 1 softens; the maps are only fitted with tau <= 1 (kMaxTemperature).
// Both keep the MAP label (and so the accuracy) of every item, exact ties
// aside: the temperature keeps the order of the classes; with tau <= 1 the
// top-label map keeps q_m >= 1/2 if p_m >= 1/2 and raises it if p_m < 1/2,
// while the others only shrink. For K = 2 the two maps are the same, and only
// the temperature is fitted (its kind is reported, never the other). The full
// temperature also spreads the probability of a many-class item over all
// classes, which lowers its top probability more than ECE asks (music, 10
// classes: ECE 0.11 -> 0.20 label-free); the top-label map changes only the
// top class's confidence, what ECE and confidence_target read. Fit fits
// both and keeps the one of lower loss (below); tau = 1 is the identity
// (the inner posterior bit for bit). Gold items stay clamped one-hot.
//
// Where tau comes from (CalibrationSource):
//   - kGold: with at least kMinGoldItems gold items that have labels, the
//     map minimises the log-loss of the gold items' posteriors against their
//     gold class, over tau in [kMinTemperature, 1]. The posteriors are not
//     those of the served model, which was fitted with the gold clamped: its confusions were learned from the
//     very items with their truth known, so their unclamped posteriors are
//     optimistic (10 % gold on music, before tau was capped at 1: tau 1.23, a
//     sharpening, while the other items needed softening). They come from
//     two-fold cross-fitting: the gold items are split into two halves, and
//     each half is scored by a copy of the fitted model refitted
//     (warm-started) with only the other half's gold (for auto, a copy of the
//     method it serves, so that the selection does not run again). A copy refitted with
//     no gold at all is worse than the served model and leaned to softening
//     too much (medical_cause, 30 % gold: ECE 0.075 against 0.063).
//     Each gold item's posterior uses only as many of its labels as the
//     items served carry (GoldCalibrationLabelCounts below).
//     gold_ece reports the ECE of those posteriors after the map.
//   - kCrowdLabels (no or too few gold items): leave-one-label-out predictive
//     likelihood of the crowd labels. For each label l of annotator j on item
//     i, the posterior of i without that label is
//       log p_{-j}(k) = log p_i(k) - log pi_ij[k, l] + const
//     (pi_ij = ItemAnnotatorConfusion(i, j), AnnotatorConfusion(j) for the
//     models whose confusions do not depend on the item; exact for the models
//     whose posterior is prior x product of those confusions: ds, one_coin,
//     mace, glad and the neural models without item features, which
//     FitLabelMap checks on every item; for the others (mv's vote shares,
//     wawa's and zero_based_skill's weighted votes, bwa's, ibcc's and ebcc's
//     posteriors, cmm's mixture, the neural models given item features, whose
//     prior is per item) it is not,
//     and the map stays the identity without gold), mapped to q_{-j}
//     (either map), and the label's predictive probability is sum_k q_{-j}(k) pi_j[k, l]. tau in
//     [kMinTemperature, 1] maximises the sum of their logs: when labels
//     disagree more often than the fitted model predicts (correlated
//     errors), held-out labels are better predicted from a softer posterior.
//     pi_j was itself fitted with the held-out label, which makes the
//     annotator predict its own label too well and rewards overconfidence;
//     the label's share is taken out of it (FitLabelMap). Where confusions
//     depend on the item, pi_ij also holds the item's own parameters, fitted
//     with the label: the label is then predicted with pi_j =
//     AnnotatorConfusion(j), the annotator on an item outside the fit (pi_ij
//     still takes it out of the posterior). This map cannot see
//     where the crowd as a whole disagrees with the gold (ducks, relevance,
//     medical_cause): only gold can calibrate that.
//     Each evaluation of tau costs O(labels x K); the item posteriors and the
//     annotators' log confusions are computed once per Fit. Projects with
//     more than 2M (label, class) pairs use every n-th item only, so the map
//     costs at most about 2 x 35 passes over 2M values after one E-step.
//     Fit costs one E-step pass more than the inner Fit (AllPosteriors), and
//     with gold two warm refits of copies more.
//   - kNone: not fitted (no parameters, or the inner model's has_parameters()
//     is false after Fit): the identity.
//
// Serialize writes a small header with the map, then the inner model's blob.
// Restore also accepts a bare inner blob (versions stored before calibration)
// and restores it with the identity map.
//
// Thread safety: as TruthModel (const methods from any number of threads;
// Fit and Restore exclusive).

#ifndef VERITY_MODELS_CALIBRATED_TRUTH_MODEL_H_
#define VERITY_MODELS_CALIBRATED_TRUTH_MODEL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "models/annotation_matrix.h"
#include "models/truth_model.h"

namespace verity::models {

enum class CalibrationMapKind : uint32_t {
  kTemperature = 1,
  kTopLabelTemperature = 2,
};

// "temperature", "top_label_temperature".
std::string_view CalibrationMapKindName(CalibrationMapKind kind);

enum class CalibrationSource : uint32_t {
  kNone = 0,         // identity map (not fitted, or an old-format restore)
  kCrowdLabels = 1,  // leave-one-label-out likelihood of the crowd labels
  kGold = 2,         // log-loss of the gold items
};

// "none", "crowd_labels", "gold".
std::string_view CalibrationSourceName(CalibrationSource source);

struct PosteriorCalibration {
  CalibrationMapKind kind = CalibrationMapKind::kTemperature;
  double temperature = 1.0;  // 1: the identity, whatever the kind.
  CalibrationSource source = CalibrationSource::kNone;
  // kGold only (else 0): gold items the map was fitted on, and the ECE
  // (10 bins, as ClassificationScores::ece) of their unclamped posteriors
  // before and after the map.
  int64_t gold_items = 0;
  double gold_ece_raw = 0.0;
  double gold_ece = 0.0;
};

// A fitted map and its loss (the objective it minimised).
struct FittedMap {
  CalibrationMapKind kind = CalibrationMapKind::kTemperature;
  double temperature = 1.0;
  double loss = 0.0;
};

// Fits the map of CalibratedTruthModel from crowd labels alone (see the file
// comment), given the inner model's unclamped posteriors of all items
// (data.num_items() x K, row-major); loss = -sum of the held-out labels' log
// predictive probabilities. The identity when no item has two labels.
// Exposed for tests and evaluation.
FittedMap FitLabelMap(const TruthModel& inner, const AnnotationMatrix& data,
                      absl::Span<const double> raw_posteriors);

// The map minimising the log-loss of `raw_posteriors` (rows of K) against
// `truth` (one class per row); loss = the summed log-loss.
FittedMap FitGoldMap(absl::Span<const double> raw_posteriors, int32_t num_classes,
                     absl::Span<const int32_t> truth);

// How many of its labels each gold item's calibration posterior uses (the
// gold map): its label count mapped by quantile onto the label counts of the
// items without gold that have labels (the items whose posteriors the map is
// for), at least 1 and at most its own count. Control items often carry many
// more labels than the others (a platform sends them to every new annotator,
// AssignmentSettings.gold_items_for_new_annotators), and a model is the more
// overconfident the more labels it multiplies: a map fitted on their
// full-label posteriors over-softens the items served (dynamic overlap on rte
// with 10 % gold, docs/ASSIGNMENT.md run 4: resolved items at confidence 0.94
// were right 0.965 of the time). When gold and other items carry alike many
// labels the counts are (nearly) kept. A gold item at mid-rank quantile q of
// the gold items' counts, (#fewer + #equal / 2) / #gold, gets the count at
// index floor(q * n) of the n other items' counts sorted ascending. One entry
// per item of `gold` (gold.size() <= data.num_items()): -1 for the items
// that are not gold or have no label; with no other labelled item, every gold
// item keeps all its labels.
std::vector<int32_t> GoldCalibrationLabelCounts(const AnnotationMatrix& data,
                                                absl::Span<const int32_t> gold);

// The `count` labels of item `item` (of `labels`, its labels sorted by
// annotator) that the gold map uses: those with the smallest hash of (item,
// annotator), a fixed pseudo-random choice, in annotator order. All of them if
// count >= labels.size().
std::vector<AnnotationMatrix::Entry> GoldCalibrationLabels(
    int32_t item, absl::Span<const AnnotationMatrix::Entry> labels, int32_t count);

// The maps, in place on a probability row; tau == 1 leaves `row` untouched.
void ApplyTemperature(double temperature, absl::Span<double> row);
void ApplyTopLabelTemperature(double temperature, absl::Span<double> row);
void ApplyCalibrationMap(CalibrationMapKind kind, double temperature, absl::Span<double> row);

class CalibratedTruthModel final : public TruthModel {
 public:
  // The fewest gold items (with >= 1 label) for the gold map; with fewer,
  // the map is fitted on the crowd labels. 50 gold items put the standard
  // error of an accuracy near 0.9 at about 0.04, under the ECE target.
  static constexpr int64_t kMinGoldItems = 50;
  static constexpr double kMinTemperature = 0.05;
  // The map only softens (tau <= 1). On a small gold sample that the model
  // happens to get all right, the gold log-loss falls without bound as tau
  // grows: with 10 % gold on possent one of five draws chose tau = 5 and
  // tripled the log-loss of the other items (0.40 -> 1.21). The EM models
  // are overconfident, and a sharpened posterior would stop confidence_target
  // from buying labels even earlier; a model that is underconfident (mv's
  // vote shares on a good crowd) stays so.
  static constexpr double kMaxTemperature = 1.0;
  // First 4 bytes of a serialized CalibratedTruthModel (the inner blobs
  // start with "VRTY").
  static constexpr std::string_view kMagic = "VCAL";

  // Wraps `inner` (not null) with the identity map. With fit_map false
  // (TruthModelOptions::calibration "none") the map stays the identity: Fit
  // fits only the inner model, Restore of a calibrated blob keeps only its
  // inner model, and the served posteriors are the inner model's, bit for
  // bit; such a wrapper still reads every version a calibrated one wrote, so
  // a project can switch calibration on and off without losing its model.
  explicit CalibratedTruthModel(std::unique_ptr<TruthModel> inner, bool fit_map = true);

  const TruthModel& inner() const { return *inner_; }
  bool fits_map() const { return fit_map_; }
  const PosteriorCalibration& calibration() const { return calibration_; }

  std::string_view method() const override { return inner_->method(); }
  int32_t num_classes() const override { return inner_->num_classes(); }
  bool has_parameters() const override { return inner_->has_parameters(); }
  std::unique_ptr<TruthModel> Clone() const override;
  // A copy that serves the inner model's posteriors, as one made with fit_map false and
  // restored from this model's version would: a project switched to calibration "none" serves
  // it at once.
  std::unique_ptr<CalibratedTruthModel> WithoutMap() const;

  // The inner Fit, then the map (see the file comment). On error the model
  // (map included) is unchanged.
  absl::StatusOr<FitReport> Fit(const AnnotationMatrix& data, absl::Span<const int32_t> gold,
                                bool warm_start) override;

  void ItemPosterior(absl::Span<const AnnotationMatrix::Entry> labels, int32_t gold_label,
                     absl::Span<double> out) const override;
  void ItemPosteriorForItem(int32_t item, absl::Span<const AnnotationMatrix::Entry> labels,
                            int32_t gold_label, absl::Span<double> out) const override;

  std::vector<double> AnnotatorConfusion(int32_t annotator) const override {
    return inner_->AnnotatorConfusion(annotator);
  }
  std::vector<double> AnnotatorConfusionDiagonal(int32_t annotator) const override {
    return inner_->AnnotatorConfusionDiagonal(annotator);
  }
  std::vector<double> ItemAnnotatorConfusion(int32_t item, int32_t annotator) const override {
    return inner_->ItemAnnotatorConfusion(item, annotator);
  }
  bool ConfusionsDependOnItem() const override { return inner_->ConfusionsDependOnItem(); }
  // The inner model's own predictive, before the calibration map.
  std::vector<double> PredictLabel(int32_t item, absl::Span<const AnnotationMatrix::Entry> labels,
                                   int32_t annotator) const override {
    return inner_->PredictLabel(item, labels, annotator);
  }
  std::vector<float> AnnotatorEmbedding(int32_t annotator) const override {
    return inner_->AnnotatorEmbedding(annotator);
  }
  std::optional<double> ItemDifficulty(int32_t item) const override {
    return inner_->ItemDifficulty(item);
  }
  std::vector<double> AnnotatorConfusionFromFeatures(
      int32_t annotator, absl::Span<const float> features) const override {
    return inner_->AnnotatorConfusionFromFeatures(annotator, features);
  }
  absl::Status SetItemFeatures(int32_t dim, std::vector<float> features) override {
    return inner_->SetItemFeatures(dim, std::move(features));
  }
  absl::Status SetAnnotatorFeatures(int32_t dim, std::vector<float> features) override {
    return inner_->SetAnnotatorFeatures(dim, std::move(features));
  }

  std::string Serialize() const override;
  absl::Status Restore(std::string_view serialized) override;
  absl::Status Restore(std::string_view serialized, const RestoreBounds& bounds) override;

 private:
  absl::Status RestoreImpl(std::string_view serialized, const RestoreBounds* bounds);

  std::unique_ptr<TruthModel> inner_;
  bool fit_map_;
  PosteriorCalibration calibration_;
};

}  // namespace verity::models

#endif  // VERITY_MODELS_CALIBRATED_TRUTH_MODEL_H_

// AutoTruthModel ("auto"): a TruthModel that chooses, at each Fit, which
// classical method serves the project, and forwards every call to that
// method's fitted model (issue 18). It is the default method of new projects.
//
// The candidates are kCandidateMethods (one constant: add a method there to
// make it eligible). A candidate that cannot be created for the project
// (e.g. a 2-class-only method) is skipped, and so is ebcc above
// kMaxEbccCells. The criterion:
//
//   - Gold cross-validation ("gold_cv"), when the project has at least
//     kMinGoldItems gold items with labels: the gold items are split into
//     kGoldFolds folds (a deterministic shuffle). For each fold, each
//     candidate is fitted cold on all labels with the gold of the *other*
//     folds only (the held-out fold's gold is set to -1 in the fit), and the
//     held-out fold's items are scored by their unclamped posteriors
//     (ItemPosteriorForItem with gold_label = -1): accuracy (argmax, lowest
//     index on ties) and log-loss. A candidate replaces ds only if it gets
//     at least kGoldMarginItems more gold items right than ds over all
//     folds and its accuracy gain is at least kGoldStandardErrors standard
//     errors of the paired per-item difference (100 gold items on labelme
//     picked a method 4 points worse without it); among those, the most
//     accurate wins, then the lowest log-loss. (With n >= kMinGoldItems
//     scored items the standard-error rule alone already needs a net gain
//     of at least 4n / (n + 3) >= 3.6 items, so the margin never decides
//     today; it is a floor should either constant change.)
//   - Held-out crowd labels ("held_out_labels"), otherwise: a deterministic
//     kHeldOutFraction of the labels (never the last label of an item; only
//     items with >= 2 labels lose any) is held out; each candidate is fitted
//     cold on the rest (with whatever gold there is) and scores the mean over
//     held-out labels (j, l) on item i of log PredictLabel(i, labels, j)[l],
//     the candidate's predictive from i's remaining labels: for most
//     candidates log sum_k q_i(k) pi_ij[k, l] (q_i the unclamped posterior,
//     pi_ij = ItemAnnotatorConfusion(i, j)); ebcc's also conditions on the
//     item's subtype, which is how it sees annotators who err alike. A
//     candidate replaces ds only if its mean beats ds's by at least
//     kHeldOutMarginNats per held-out label and by at least
//     kHeldOutStandardErrors standard errors of the paired per-label
//     difference (a small project's few held-out labels rarely pass: wordsim's
//     30 chose a worse method by noise); the best such wins. The margin is
//     0.05 nats, not less: a richer model can fit the crowd's labels better
//     without finding the truth better. At 0.01 ebcc replaced ds on
//     medical_treat (+0.023 nats per label, 5 standard errors; 5.5 points
//     less accurate on gold); the gains that came with better truth on the
//     shared datasets were 0.11 (ebcc on ducks) and 0.16 nats (mace on
//     music). docs/EVALUATION.md, "auto", has the figures.
//   - With no usable signal (no label held out, e.g. no item with 2 labels,
//     and too little gold; or no candidate fitting) the fallback
//     kFallbackMethod (ds) serves; its reason starts "fallback:".
//
// Cost: selection fits every candidate once (held-out labels) or kGoldFolds
// times (gold), then the chosen method once on all data. Above
// kMaxSelectionLabels labels, selection runs on every n-th item only (n the
// smallest making it fit), so its cost is bounded whatever the project size;
// the served fit always uses all data. If the chosen method is the one
// already served and warm_start is true, the served model is warm-started.
//
// Serialize writes "VAUT", the chosen method, the criterion and the
// per-candidate summary, then the chosen model's blob.
//
// Thread safety: as TruthModel.

#ifndef VERITY_MODELS_AUTO_TRUTH_MODEL_H_
#define VERITY_MODELS_AUTO_TRUTH_MODEL_H_

#include <array>
#include <cstdint>
#include <functional>
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

// One candidate's selection score. Gold CV fills accuracy and log_loss (per
// gold item); held-out labels fills held_out_log_likelihood (per label).
struct AutoCandidateScore {
  std::string method;
  bool fitted = false;  // false: the candidate failed to fit (skipped).
  double accuracy = 0.0;
  double log_loss = 0.0;
  // Gold CV: the standard error of the accuracy difference from ds (paired over the same gold
  // items; 0 for ds itself).
  double accuracy_standard_error = 0.0;
  double held_out_log_likelihood = 0.0;
  // Held-out labels: the standard error of the mean per-label difference from ds (paired over
  // the same held-out labels; 0 for ds itself).
  double held_out_standard_error = 0.0;
};

struct AutoChoice {
  std::string method;     // the method served; empty before the first Fit.
  std::string criterion;  // "gold_cv", "held_out_labels", "fallback" or "" before a Fit.
  // Human-readable: the criterion, its values per candidate and the rule applied.
  std::string reason;
  std::vector<AutoCandidateScore> scores;  // empty after Restore.
};

class AutoTruthModel final : public TruthModel {
 public:
  static constexpr std::string_view kMethod = "auto";
  // The methods auto chooses from. The neural ones are too slow to fit
  // several times per refit; kos only serves 2 classes and defines no
  // likelihood. ibcc (ds with Dirichlet priors: never ahead of ds on held-out
  // labels on the shared datasets), bwa (one precision per class) and mmsr
  // (no per-label likelihood) are left out to bound the selection's cost.
  static constexpr std::array<std::string_view, 8> kCandidateMethods = {
      "ds", "one_coin", "glad", "mace", "mv", "wawa", "zero_based_skill", "ebcc"};
  static constexpr std::string_view kFallbackMethod = "ds";
  static constexpr int64_t kMinGoldItems = 30;
  static constexpr int kGoldFolds = 3;
  static constexpr int64_t kGoldMarginItems = 2;
  static constexpr double kGoldStandardErrors = 2.0;
  static constexpr double kHeldOutFraction = 0.1;
  static constexpr double kHeldOutMarginNats = 0.05;
  static constexpr double kHeldOutStandardErrors = 2.0;
  static constexpr int64_t kMaxSelectionLabels = 200'000;
  // ebcc keeps EbccModel::kSubtypes K x K Dirichlets per annotator whatever labels it gave
  // (the other candidates' state grows with the labels, and the project quota does not bound
  // auto's): it is a candidate only while (annotators + 1) * kSubtypes * K^2 stays within this
  // (32 MB of doubles per array; K = 5: 16,000 annotators; K = 100: 39).
  static constexpr int64_t kMaxEbccCells = 4'000'000;
  static constexpr uint64_t kSeed = 0x5eed'a070;
  static constexpr std::string_view kMagic = "VAUT";

  // Creates a candidate model (without calibration) by method name.
  using CandidateFactory = std::function<absl::StatusOr<std::unique_ptr<TruthModel>>(
      std::string_view method, int32_t num_classes, const TruthModelOptions& options)>;

  // INVALID_ARGUMENT for num_classes < 2 or invalid options. Before the
  // first Fit the model serves an empty kFallbackMethod model.
  static absl::StatusOr<std::unique_ptr<AutoTruthModel>> Create(
      int32_t num_classes, const TruthModelOptions& options, CandidateFactory factory);

  const AutoChoice& choice() const { return choice_; }
  const TruthModel& served() const { return *inner_; }

  std::string_view method() const override { return kMethod; }
  int32_t num_classes() const override { return num_classes_; }
  bool has_parameters() const override { return inner_->has_parameters(); }
  std::unique_ptr<TruthModel> Clone() const override;

  absl::StatusOr<FitReport> Fit(const AnnotationMatrix& data, absl::Span<const int32_t> gold,
                                bool warm_start) override;

  void ItemPosterior(absl::Span<const AnnotationMatrix::Entry> labels, int32_t gold_label,
                     absl::Span<double> out) const override {
    inner_->ItemPosterior(labels, gold_label, out);
  }
  void ItemPosteriorForItem(int32_t item, absl::Span<const AnnotationMatrix::Entry> labels,
                            int32_t gold_label, absl::Span<double> out) const override {
    inner_->ItemPosteriorForItem(item, labels, gold_label, out);
  }
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
  std::vector<double> PredictLabel(int32_t item, absl::Span<const AnnotationMatrix::Entry> labels,
                                   int32_t annotator) const override {
    return inner_->PredictLabel(item, labels, annotator);
  }
  std::optional<double> ItemDifficulty(int32_t item) const override {
    return inner_->ItemDifficulty(item);
  }
  std::vector<double> AnnotatorConfusionFromFeatures(
      int32_t annotator, absl::Span<const float> features) const override {
    return inner_->AnnotatorConfusionFromFeatures(annotator, features);
  }

  std::string Serialize() const override;
  absl::Status Restore(std::string_view serialized) override;

 private:
  AutoTruthModel(int32_t num_classes, TruthModelOptions options, CandidateFactory factory,
                 std::unique_ptr<TruthModel> inner);

  int32_t num_classes_;
  TruthModelOptions options_;
  CandidateFactory factory_;
  std::unique_ptr<TruthModel> inner_;
  AutoChoice choice_;
};

// The selection alone (exposed for tests and evaluation): the choice auto
// would make on `data` and `gold`, without fitting the served model.
absl::StatusOr<AutoChoice> ChooseTruthMethod(const AnnotationMatrix& data,
                                             absl::Span<const int32_t> gold,
                                             const TruthModelOptions& options,
                                             const AutoTruthModel::CandidateFactory& factory);

}  // namespace verity::models

#endif  // VERITY_MODELS_AUTO_TRUTH_MODEL_H_

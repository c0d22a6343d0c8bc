// DawidSkeneModel: the Dawid & Skene (1979) truth model, method "ds".
//
// Each annotator a has a full confusion matrix C_a[k][l] = p(a says l | true
// class k); items' true classes are drawn from a class prior. Fit() runs EM:
// the first E-step is the soft majority vote (or, when warm-starting, the
// E-step of the previous parameters); each M-step re-estimates the prior and
// the confusions from the expected counts with Dirichlet smoothing and
// shrinkage toward the population confusion (see TruthModelOptions); EM stops
// when the relative change of the marginal log-likelihood falls below
// options.tolerance or after options.max_iterations M-steps. Gold items are
// clamped to their known class in every E-step. Everything is computed in log
// space, so an annotator with one label or an item with none never produces
// NaN.
//
// Which items the M-step learns from. Only items with at least two labels,
// or with gold, add expected counts: an item's single label cannot say
// whether its annotator was right, so with one label per item a class prior
// skewed toward one class and annotators biased toward it explain the labels
// as well as the truth does, and EM used to drift to predicting one class for
// every item. Single-label items still get their posterior (and their
// log-likelihood term) from the parameters the other items identify, and
// each adds 1/K to every class's mass in the class prior's M-step
// (ConfusionCounts::AddUninformedItem): it is drawn from the prior, but its
// label cannot say which class. Without that, a prior learnt from a few
// two-label items among many single-label ones (early in a project, or under
// dynamic overlap) collapsed onto one class and overruled the single labels:
// with one label per item and a second on every 50th, ds predicted one class
// for nearly every item of rte (0.58 against majority vote's 0.80) and
// medical_treat (0.56 against 0.72). (A kept state restored from a blob
// written before this rule lacks that mass; its incremental refits take out
// what was never added, clamped at 0, until the next full EM pass replaces
// the state.) When no item has two labels, the
// parameters are the priors alone: the uniform class prior and, for every
// annotator, the population confusion with options.population_diagonal_prior
// on its diagonal, so ds gives the majority vote (docs/EVALUATION.md,
// "Accuracy against redundancy").
//
// Incremental refits. A fit keeps, besides the parameters, the state needed
// to refit without passing over all labels (Neal & Hinton's incremental EM,
// 1998): the labels and gold of every item as of its last E-step, the
// parameters each item's responsibility (its posterior in the E-step) was
// computed with (an item's responsibility is recomputed from them, exactly,
// when needed; they are few parameter sets, not one posterior per item), and
// the expected counts those responsibilities sum to. A warm Fit then
//   1. compares every item's labels and gold with the kept ones (one cheap
//      pass, no arithmetic) to find the changed items (new, relabelled,
//      revised, gold set or cleared);
//   2. takes the changed items' old contributions out of the counts and
//      their old terms out of the log-likelihood;
//   3. runs EM on the changed items only: E-step them under the current
//      parameters, replace their contributions, M-step, until the relative
//      change of the log-likelihood (the unchanged items' terms held at their
//      last values) is below options.tolerance or options.max_iterations.
// Unchanged items keep their responsibilities from an earlier E-step (Neal &
// Hinton's partial E-step: each iteration still improves EM's objective, but
// over the changed items' responsibilities only), so the parameters are
// close to, not equal to, those of a full warm fit. To bound the drift, a
// warm Fit runs full EM passes over all items (and starts a fresh state)
// instead when the labels of the changed items, added to those of the
// incremental refits since the last full EM, exceed
// options.incremental_refit_max_fraction of all labels, after
// kMaxIncrementalRefits incremental refits in a row, when the last fit did
// not converge, when the kept state is missing (a cold start; a model
// restored from a blob written before ds kept it), or when the data have
// fewer items or annotators than the kept state. A refit after 1 % new labels
// costs about 2 % of a cold fit (docs/PERFORMANCE.md). Fits are
// deterministic given the model (parameters and kept state) and the data.
//
// Each full EM iteration is one fused pass over the item-major CSR (posterior
// of an item, then its expected counts), with no allocation per label; it can
// be split over options.num_threads threads (incremental refits, over few
// items, run on one). Besides the data, a fit holds about three tables of
// (num_annotators + 1) * K^2 doubles (parameters, their logs, counts; one
// more count table per extra thread), and the kept state: a copy of the
// item-major labels (8 bytes per label, 12 per item), the counts, and up to
// kMaxIncrementalRefits + 1 parameter sets. Serialize() writes the state too
// (a versioned section after the parameters), so a restarted server refits
// incrementally as before.
//
// Thread safety: as for every TruthModel — const methods are safe to call
// concurrently; Fit() and Restore() need exclusive access. Clones share the
// kept state, which is immutable (a Fit replaces it, never changes it).

#ifndef VERITY_MODELS_DAWID_SKENE_H_
#define VERITY_MODELS_DAWID_SKENE_H_

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
#include "models/confusion_parameters.h"
#include "models/truth_model.h"

namespace verity::models {

class DawidSkeneModel : public TruthModel {
 public:
  static constexpr std::string_view kMethod = "ds";

  // A warm Fit after this many incremental refits in a row runs full EM over
  // all labels, so that items whose labels did not change are re-estimated
  // at least every kMaxIncrementalRefits + 1 refits.
  static constexpr int32_t kMaxIncrementalRefits = 10;

  // INVALID_ARGUMENT if num_classes < 2 or an option is out of range.
  static absl::StatusOr<std::unique_ptr<DawidSkeneModel>> Create(
      int32_t num_classes, const TruthModelOptions& options);

  std::string_view method() const override { return kMethod; }
  int32_t num_classes() const override { return num_classes_; }
  bool has_parameters() const override { return params_.has_value(); }
  std::unique_ptr<TruthModel> Clone() const override;

  // FitReport::iterations of an incremental refit counts its EM iterations
  // over the changed items (0 if no item changed); its log_likelihood holds
  // the unchanged items' terms at their last E-step.
  absl::StatusOr<FitReport> Fit(const AnnotationMatrix& data,
                                absl::Span<const int32_t> gold,
                                bool warm_start) override;
  void ItemPosterior(absl::Span<const AnnotationMatrix::Entry> labels,
                     int32_t gold_label,
                     absl::Span<double> out) const override;
  std::vector<double> AnnotatorConfusion(int32_t annotator) const override;
  std::vector<double> AnnotatorConfusionDiagonal(int32_t annotator) const override;
  // The parameters, followed by the kept state if the model has one (a
  // section of its own layout version; a model without it writes what ds
  // wrote before it kept one).
  std::string Serialize() const override;
  // Reads blobs with and without the kept state; INVALID_ARGUMENT also if the
  // kept state is inconsistent (labels, annotators or classes out of range)
  // or of an unknown layout version.
  absl::Status Restore(std::string_view serialized) override;

  // The fitted class prior (uniform before the first fit).
  std::vector<double> ClassPrior() const;

  // Whether the model keeps the state of its last fit, without which a warm
  // Fit cannot refit incrementally (see the file comment).
  bool has_refit_state() const { return state_ != nullptr; }
  // Incremental refits since the last full EM: 0 after a full fit, 1 after
  // the first incremental refit that follows it, and so on.
  int32_t incremental_refits_in_a_row() const;

 private:
  struct RefitState;

  DawidSkeneModel(int32_t num_classes, const TruthModelOptions& options)
      : num_classes_(num_classes), options_(options) {}

  // Full EM over all items; replaces the parameters and the kept state.
  FitReport FitAllItems(const AnnotationMatrix& data,
                        absl::Span<const int32_t> gold, bool warm_start);
  // EM over the changed items only, if the kept state allows it (see the
  // file comment); nullopt, with the model unchanged, if not.
  std::optional<FitReport> RefitIncrementally(const AnnotationMatrix& data,
                                              absl::Span<const int32_t> gold);

  int32_t num_classes_;
  TruthModelOptions options_;
  std::optional<ConfusionParameters> params_;  // empty until Fit or Restore
  // The state of the last fit; null before the first fit and after a Restore
  // of a blob without it.
  std::shared_ptr<const RefitState> state_;
};

}  // namespace verity::models

#endif  // VERITY_MODELS_DAWID_SKENE_H_

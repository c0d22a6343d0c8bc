// OneCoinModel: the "one-coin" truth model, method "one_coin".
//
// Each annotator a has one accuracy p_a: given an item of true class k, they
// give label k with probability p_a and each of the other K - 1 labels with
// probability (1 - p_a) / (K - 1). Its confusion matrix is thus symmetric,
// p_a on the diagonal, which needs far fewer labels per annotator than a full
// Dawid-Skene confusion (1 parameter instead of K (K - 1)) at the price of
// ignoring which classes an annotator confuses. Items' true classes are drawn
// from a class prior.
//
// Fit() runs EM like DawidSkeneModel: the first E-step is the soft majority
// vote (or, when warm-starting, the E-step of the previous parameters); each
// M-step re-estimates
//   - the class prior, only if options.learn_symmetric_class_prior (else it
//     stays uniform; see there why): (mass_k + r) / (mass + K r),
//     r = prior_smoothing;
//   - the pooled accuracy of all labels: (C + s) / (N + K s), where C is the
//     posterior mass of the given labels being correct summed over all
//     labels, N the number of labels and s = confusion_smoothing;
//   - each annotator's accuracy, a Beta posterior mean shrunk toward it:
//       p_a = (c_a + s + m p_pool) / (n_a + K s + m),
//     c_a and n_a being the annotator's share of C and N, and
//     m = population_smoothing. The Beta pseudo-counts are s + m p_pool for
//     "correct" and (K - 1) s + m (1 - p_pool) for "wrong": s per confusion
//     cell as in ds, plus m pseudo-labels of the crowd's typical accuracy,
//     so an annotator with few labels starts from the crowd and one with
//     many is judged on their own labels.
// An annotator without labels, and any id never seen in the fit, gets the
// pooled accuracy. EM stops when the relative change of the marginal
// log-likelihood falls below options.tolerance or after
// options.max_iterations M-steps. Gold items are clamped to their known class
// in every E-step. Everything is computed in log space, and every accuracy is
// strictly inside (0, 1), so no input produces NaN.
//
// Each EM iteration is one fused pass over the item-major CSR (posterior of an
// item, then its expected counts) with O(1) work per label and no allocation,
// split over options.num_threads threads by item ranges; the partial counts
// are merged in range order, so a fit is bit-identical for the same data and
// num_threads. A fit holds a few arrays of num_annotators doubles (one count
// array per thread) besides the data.
//
// Thread safety: as for every TruthModel — const methods are safe to call
// concurrently; Fit() and Restore() need exclusive access.

#ifndef VERITY_MODELS_ONE_COIN_H_
#define VERITY_MODELS_ONE_COIN_H_

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

// The parameters of a one-coin fit, with the logarithms the E-step needs
// derived from them by one function, so that restored parameters compute
// bit-identical posteriors. Slot 0 of the per-annotator arrays is the pooled
// accuracy, slot a + 1 annotator a. Immutable in use (built by a fit or a
// parse, then only read); const methods may be called concurrently.
struct OneCoinParameters {
  // A uniform prior, pooled accuracy 1 / K, no annotators.
  explicit OneCoinParameters(int32_t num_classes);

  int32_t num_annotators() const {
    return static_cast<int32_t>(accuracy.size()) - 1;
  }
  size_t Slot(int32_t annotator) const {
    return annotator >= 0 && annotator < num_annotators()
               ? static_cast<size_t>(annotator) + 1
               : 0;
  }
  // Recomputes log_prior, log_wrong and vote_weight.
  void DeriveLogs();
  // Keeps the first `num_annotators`; new ones get the pooled accuracy.
  void ResizeAnnotators(int32_t num_annotators);
  // Writes p(true class | labels) into out (one-hot of gold_label if >= 0)
  // and returns log p(labels) (log p(gold_label, labels) for gold). For
  // results independent of the order of `labels`, pass them sorted by
  // (annotator, label).
  double Posterior(absl::Span<const AnnotationMatrix::Entry> labels,
                   int32_t gold_label, absl::Span<double> out) const;

  int32_t num_classes;
  std::vector<double> prior;     // K
  std::vector<double> accuracy;  // 1 + A: pooled, then per annotator
  // Derived.
  std::vector<double> log_prior;  // K
  // log((1 - p) / (K - 1)): the log-probability of any one wrong label.
  std::vector<double> log_wrong;  // 1 + A
  // log p - log_wrong: what a label adds to the log-score of its class.
  std::vector<double> vote_weight;  // 1 + A
};

class OneCoinModel : public TruthModel {
 public:
  static constexpr std::string_view kMethod = "one_coin";

  // INVALID_ARGUMENT if num_classes < 2 or an option is out of range.
  static absl::StatusOr<std::unique_ptr<OneCoinModel>> Create(
      int32_t num_classes, const TruthModelOptions& options);

  std::string_view method() const override { return kMethod; }
  int32_t num_classes() const override { return num_classes_; }
  bool has_parameters() const override { return params_.has_value(); }
  std::unique_ptr<TruthModel> Clone() const override;

  absl::StatusOr<FitReport> Fit(const AnnotationMatrix& data,
                                absl::Span<const int32_t> gold,
                                bool warm_start) override;
  void ItemPosterior(absl::Span<const AnnotationMatrix::Entry> labels,
                     int32_t gold_label,
                     absl::Span<double> out) const override;
  // K x K, row-major: p_a on the diagonal, (1 - p_a) / (K - 1) elsewhere
  // (uniform before the first fit).
  std::vector<double> AnnotatorConfusion(int32_t annotator) const override;
  std::string Serialize() const override;
  absl::Status Restore(std::string_view serialized) override;

  // The fitted class prior (uniform before the first fit).
  std::vector<double> ClassPrior() const;

  // The fitted accuracy p_a of `annotator`; the pooled accuracy for an
  // annotator without labels in the fit or out of the fitted range; 1 / K
  // before the first fit.
  double AnnotatorAccuracy(int32_t annotator) const;

 private:
  OneCoinModel(int32_t num_classes, const TruthModelOptions& options)
      : num_classes_(num_classes), options_(options) {}

  int32_t num_classes_;
  TruthModelOptions options_;
  std::optional<OneCoinParameters> params_;  // empty until Fit or Restore
};

}  // namespace verity::models

#endif  // VERITY_MODELS_ONE_COIN_H_

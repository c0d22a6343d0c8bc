// GladModel: GLAD (Whitehill et al., NIPS 2009, "Whose vote should count
// more"), method "glad", in its multi-class form.
//
// Each annotator a has an ability alpha_a (any real: the larger the more
// often right; alpha_a beta_i = -log(K - 1) is guessing, below adversarial)
// and each item i an easiness beta_i = exp(b_i) > 0 (1 / difficulty in the
// paper). The
// annotator gives the true class with probability sigmoid(alpha_a * beta_i)
// and each of the other K - 1 classes with probability
// (1 - sigmoid(alpha_a * beta_i)) / (K - 1). True classes are drawn from a
// class prior. So the weight of a vote, alpha_a * beta_i + log(K - 1) on the
// log-odds of its class, depends on who gave it and on how hard the item is:
// on an easy item (large beta) a good annotator is nearly always right, on a
// hard one (beta -> 0) everybody is a coin toss.
//
// Fit() runs EM for the MAP parameters under Gaussian priors,
// alpha_a ~ N(glad_ability_prior_mean, glad_ability_prior_stddev^2) and
// b_i ~ N(glad_log_easiness_prior_mean, glad_log_easiness_prior_stddev^2)
// (defaults N(1, 1) and N(0, 1)). The class prior is uniform unless
// options.learn_symmetric_class_prior (see there why). The first E-step is
// the soft majority vote (or, when warm-starting, the E-step of the previous
// parameters). The M-step has no closed form; it is one round of
// block-coordinate ascent on the expected complete-data log posterior Q,
// which is a sum of one-dimensional terms given the other block:
//   1. each b_i, given the abilities, by a Newton step on the item's labels
//      (exact curvature where the term is concave, Gauss-Newton where not;
//      clamped to +-2 and halved until the term increases; skipped when its
//      predicted gain is negligible);
//   2. each alpha_a, given the new easiness (a concave term), by the Newton
//      step from sums gathered in the same item pass. Since
//      |d log w(x) / dx| < 1 for the logistic curvature w, a step delta with
//      |delta| * max_i beta_i <= log 2 provably increases the term and is
//      taken as is; a larger one is replaced by up to kAbilityNewtonSteps
//      checked Newton steps over the annotator's labels.
// So each EM iteration increases the log posterior (generalised EM). EM stops
// when the relative change of the marginal log-likelihood falls below
// options.tolerance or after options.max_iterations iterations. Gold items
// are clamped to their known class in every E-step (and so inform abilities
// and their own easiness). Everything is in log space; abilities stay within
// +-kMaxAbsAbility and log easiness within +-kMaxAbsLogEasiness, so no input
// produces NaN.
//
// Per-item parameters and online posteriors: the easiness of the items of
// the last fit is part of the parameters (8 bytes per item in Serialize), and
// ItemPosteriorForItem(i, ...) uses beta_i. An item created since the fit (or
// any id out of the fitted range, e.g. -1) gets the prior easiness
// exp(glad_log_easiness_prior_mean), as do ItemPosterior (which has no item
// id) and AnnotatorConfusion. An annotator without labels in the fit, or
// never seen, gets the population ability: the label-weighted mean of the
// fitted abilities.
//
// Cost: an EM iteration is one pass over the item-major CSR with about two
// exp per label (the E-step and the easiness step's check) and no
// allocation, split over options.num_threads threads by item ranges (the
// per-annotator sums are merged in range order, so a fit is bit-identical
// for the same data and num_threads), plus, in early iterations, a pass over
// the labels of the annotators whose ability moves far. Memory is linear: a
// few arrays of num_items doubles and, per thread, of num_annotators sums.
// Measured on the 2-core development VM, one thread, 5M labels (1M items x
// 5, K = 5, 1000 annotators): ~240 ms CPU per iteration (ds: ~130 ms in the
// same runs); 27 iterations from a cold start (ds: 7), 2 when warm-started
// from the converged model (ds: 2). EM converges more slowly than ds's
// because every item has a parameter of its own.
//
// Thread safety: as for every TruthModel — const methods are safe to call
// concurrently; Fit() and Restore() need exclusive access.

#ifndef VERITY_MODELS_GLAD_H_
#define VERITY_MODELS_GLAD_H_

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

// The parameters of a GLAD fit, with what the E-step needs derived from them
// by one function, so that restored parameters compute bit-identical
// posteriors. Slot 0 of `ability` is the population ability, slot a + 1
// annotator a; slot 0 of `log_easiness` is the prior log easiness, slot
// i + 1 item i. Immutable in use (built by a fit or a parse, then only read);
// const methods may be called concurrently.
struct GladParameters {
  // A uniform prior, no annotators or items; population ability and prior
  // log easiness as given.
  GladParameters(int32_t num_classes, double population_ability,
                 double prior_log_easiness);

  int32_t num_annotators() const {
    return static_cast<int32_t>(ability.size()) - 1;
  }
  int32_t num_items() const {
    return static_cast<int32_t>(log_easiness.size()) - 1;
  }
  double Ability(int32_t annotator) const {
    return ability[annotator >= 0 && annotator < num_annotators()
                       ? static_cast<size_t>(annotator) + 1
                       : 0];
  }
  double Easiness(int32_t item) const {
    return easiness[item >= 0 && item < num_items()
                        ? static_cast<size_t>(item) + 1
                        : 0];
  }
  // Recomputes log_prior and easiness.
  void Derive();
  // Writes p(true class | labels) of an item of easiness `beta` into out
  // (one-hot of gold_label if >= 0). For results independent of the order of
  // `labels`, pass them sorted by (annotator, label).
  void Posterior(absl::Span<const AnnotationMatrix::Entry> labels, double beta,
                 int32_t gold_label, absl::Span<double> out) const;

  int32_t num_classes;
  std::vector<double> prior;         // K
  std::vector<double> ability;       // 1 + A
  std::vector<double> log_easiness;  // 1 + N
  // Derived.
  std::vector<double> log_prior;  // K
  std::vector<double> easiness;   // 1 + N, exp(log_easiness)
  double log_other_classes;       // log(K - 1)
};

class GladModel : public TruthModel {
 public:
  static constexpr std::string_view kMethod = "glad";
  // The most safeguarded Newton steps per M-step for an item's log easiness
  // (one: each costs an exp per label, and more do not reduce the number of
  // EM iterations measurably) and for an ability whose step needs checking.
  static constexpr int kEasinessNewtonSteps = 1;
  static constexpr int kAbilityNewtonSteps = 3;
  // Bounds that keep alpha * beta finite whatever the data and options.
  static constexpr double kMaxAbsAbility = 1e3;
  static constexpr double kMaxAbsLogEasiness = 30.0;

  // INVALID_ARGUMENT if num_classes < 2 or an option is out of range.
  static absl::StatusOr<std::unique_ptr<GladModel>> Create(
      int32_t num_classes, const TruthModelOptions& options);

  std::string_view method() const override { return kMethod; }
  int32_t num_classes() const override { return num_classes_; }
  bool has_parameters() const override { return params_.has_value(); }
  std::unique_ptr<TruthModel> Clone() const override;

  absl::StatusOr<FitReport> Fit(const AnnotationMatrix& data,
                                absl::Span<const int32_t> gold,
                                bool warm_start) override;
  // The posterior of an item of prior easiness.
  void ItemPosterior(absl::Span<const AnnotationMatrix::Entry> labels,
                     int32_t gold_label,
                     absl::Span<double> out) const override;
  // The posterior with the fitted easiness of `item` (prior easiness if it
  // was not in the fit).
  void ItemPosteriorForItem(int32_t item,
                            absl::Span<const AnnotationMatrix::Entry> labels,
                            int32_t gold_label,
                            absl::Span<double> out) const override;
  // For an item of prior easiness beta_0: p = sigmoid(alpha_a * beta_0) on
  // the diagonal, (1 - p) / (K - 1) elsewhere (uniform before the first
  // fit).
  std::vector<double> AnnotatorConfusion(int32_t annotator) const override;
  std::vector<double> ItemAnnotatorConfusion(int32_t item, int32_t annotator) const override;
  bool ConfusionsDependOnItem() const override { return true; }
  std::string Serialize() const override;
  absl::Status Restore(std::string_view serialized) override;

  // The fitted class prior (uniform before the first fit).
  std::vector<double> ClassPrior() const;
  // The fitted ability of `annotator` (the population ability if it had no
  // labels or is out of the fitted range; the prior mean before a fit).
  double AnnotatorAbility(int32_t annotator) const;
  // The fitted easiness beta_i of `item` (the prior easiness if it is out of
  // the fitted range or before a fit).
  double ItemEasiness(int32_t item) const;

 private:
  GladModel(int32_t num_classes, const TruthModelOptions& options)
      : num_classes_(num_classes), options_(options) {}

  int32_t num_classes_;
  TruthModelOptions options_;
  std::optional<GladParameters> params_;  // empty until Fit or Restore
};

}  // namespace verity::models

#endif  // VERITY_MODELS_GLAD_H_

// EbccModel: Enhanced Bayesian Classifier Combination (Li, Rubinstein and
// Cohn, "Exploiting worker correlation for label aggregation in
// crowdsourcing", ICML 2019), method "ebcc".
//
// Each true class k has kSubtypes (M) subtypes: item i's class t_i ~
// Categorical(tau), tau ~ Dirichlet(alpha); its subtype g_i | t_i = k ~
// Categorical(pi_k), pi_k ~ Dirichlet(a_pi / M); annotator j's label given
// (k, m) ~ Categorical(v_jkm), v_jkm ~ Dirichlet(beta_k) with beta_kk = a_v
// and beta_kl = b_v (l != k). Annotators who err alike on the same subtype
// are thus correlated, which IBCC (M = 1) cannot express. Mean-field VB, as
// the authors' code (ebcc.py, ebcc_vb):
//   E-step: q_i(k, m) ∝ exp(E[ln tau_k] + E[ln pi_km] +
//           sum over i's labels (j, l) of E[ln v_jkml]), normalised over all
//           (k, m); the posterior of the class is sum_m q_i(k, m);
//   M-step: nu_k = alpha + sum_i q_i(k), eta_km = a_pi / M + sum_i q_i(k, m),
//           mu_jkml = beta_kl + sum over j's labels l of q_i(k, m);
// E[ln] of a Dirichlet parameter x in a vector X is psi(x) - psi(sum X).
// Hyper-parameters: the defaults of ebcc_vb: M = 10, a_pi = 0.1, alpha = 1,
// a_v = 4, b_v = 1 (empirical_prior off).
//
// Departures from the authors' code, and why:
//   - One deterministic run. The code's q(k, m) starts from the majority vote
//     split over the subtypes by Dirichlet(1) draws of numpy's generator
//     (seed 1234), and the authors' experiments take the best ELBO of several
//     seeds; Verity draws the split from a counter-based hash (SplitMix64 of
//     kSeed and (item, class, subtype)), so the fit is a pure function of the
//     data and needs no generator state, and runs once (a fit of 40 seeds
//     costs 40 fits).
//   - Convergence: the code's rule, every q_i(k) moved less than
//     kClassTolerance (1e-3) between two E-steps, but at most
//     options.max_iterations (100 by default; the code's cap is 500).
//     options.tolerance is not read: the log normaliser of the E-step
//     (reported as FitReport::log_likelihood; not the ELBO) settles while the
//     subtypes still drift, and stopping on it left a warm refit of the same
//     data moving 3 % of the items' labels.
//   - Gold items are clamped: q_i(k, m) is 0 for k other than the gold class;
//     the subtypes of the gold class keep their posterior.
//   - A warm fit (model with parameters) starts from the previous Dirichlet
//     parameters; annotators beyond them from the prior beta.
//   - Annotators without labels and ids not in the fit get the prior beta.
//   - AnnotatorConfusion reports sum_m E[pi_km] E[v_jkm] (posterior means),
//     row-stochastic; ItemPosterior uses the VB expectations of the logs.
//
// Memory: M K^2 Dirichlet parameters and M K^2 expectations per annotator
// (dense; the project quota counts M K^2 cells), and in a fit as many
// exp(E[ln v]) factors. Cost per iteration:
// O(labels * K * M + annotators * K^2 * M) (the second term the digammas and
// exps per annotator), no allocation inside the iterations: M = 10 times
// ibcc's. The fit's E-step multiplies per-label factors exp(E[ln v]) (each
// (annotator, label) column scaled to a largest entry of 1) instead of adding
// logs and taking K * M exps per item, which agrees with the log form to
// rounding (an item whose product falls below 1e-200, hundreds of labels,
// takes the log form); ItemPosterior keeps the log form. Single-threaded
// (options.num_threads is not read).
//
// Thread safety: as for every TruthModel — const methods are safe to call
// concurrently; Fit() and Restore() need exclusive access.

#ifndef VERITY_MODELS_EBCC_H_
#define VERITY_MODELS_EBCC_H_

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

class EbccModel : public TruthModel {
 public:
  static constexpr std::string_view kMethod = "ebcc";
  static constexpr int32_t kSubtypes = 10;           // num_groups
  static constexpr double kSubtypePrior = 0.1;       // a_pi (total over M)
  static constexpr double kClassPrior = 1.0;         // alpha
  static constexpr double kDiagonalPrior = 4.0;      // a_v
  static constexpr double kOffDiagonalPrior = 1.0;   // b_v
  static constexpr uint64_t kSeed = 1234;
  // The code's stopping rule: every q_i(k) moved less than this (absolute)
  // since the previous E-step.
  static constexpr double kClassTolerance = 1e-3;

  // INVALID_ARGUMENT if num_classes < 2 or an option is out of range.
  static absl::StatusOr<std::unique_ptr<EbccModel>> Create(
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
  std::vector<double> AnnotatorConfusion(int32_t annotator) const override;
  // Sum over (k, m) of q(k, m | labels) E[v_{annotator,k,m}]: the new label shares the item's
  // subtype with its other labels, so annotators who erred alike on the item's subtype predict
  // each other; the default (posterior of k times AnnotatorConfusion) averages the subtype out.
  std::vector<double> PredictLabel(int32_t item, absl::Span<const AnnotationMatrix::Entry> labels,
                                   int32_t annotator) const override;
  std::string Serialize() const override;
  // Also INVALID_ARGUMENT if the blob has another number of subtypes, or a
  // Dirichlet parameter is below its prior or not finite.
  absl::Status Restore(std::string_view serialized) override;

  // p(subtype m | class k) = E[pi_km], K x M row-major; nullopt before a fit.
  std::optional<std::vector<double>> SubtypeProportions() const;

 private:
  struct Parameters {
    std::vector<double> nu;   // K
    std::vector<double> eta;  // K x M
    // (num_annotators + 1) x [K][M][K] (true class, subtype, label); block 0
    // the prior beta.
    std::vector<double> mu;
    // Derived by Derive() only, so a restored model computes bit-identical
    // posteriors: E[ln tau_k] + E[ln pi_km] (K x M) and E[ln v] label-major,
    // (num_annotators + 1) x [label][k * M + m].
    std::vector<double> log_class_subtype;
    std::vector<double> log_v;
    void Derive(int32_t k);
  };

  EbccModel(int32_t num_classes, const TruthModelOptions& options)
      : num_classes_(num_classes), options_(options) {}

  size_t SlotOf(int32_t annotator) const;
  // q(k, m | labels), K x M row-major, from the VB expectations of the logs; needs params_.
  std::vector<double> ClassSubtypePosterior(absl::Span<const AnnotationMatrix::Entry> labels) const;

  int32_t num_classes_;
  TruthModelOptions options_;
  std::optional<Parameters> params_;
};

}  // namespace verity::models

#endif  // VERITY_MODELS_EBCC_H_

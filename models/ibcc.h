// IbccModel: Independent Bayesian Classifier Combination by variational Bayes
// (Kim and Ghahramani, AISTATS 2012; Simpson, Roberts, Psorakis and Smith,
// "Dynamic Bayesian combination of multiple imperfect classifiers", 2013),
// method "ibcc".
//
// The true class t_i ~ Categorical(kappa), kappa ~ Dirichlet(nu0); annotator
// j's label given t_i = k ~ Categorical(pi_j[k]), each confusion row pi_j[k] ~
// Dirichlet(alpha0[k]). The mean-field posterior q(t) q(kappa) q(pi) is found
// by coordinate ascent:
//   E-step: q_i(k) ∝ exp(E[ln kappa_k] + sum over i's labels (j, l) of
//           E[ln pi_j[k][l]]), with E[ln kappa_k] = psi(nu_k) - psi(sum nu)
//           and E[ln pi_j[k][l]] = psi(alpha_j[k][l]) - psi(sum_l alpha_j[k][l]);
//   M-step: nu_k = nu0 + sum_i q_i(k),
//           alpha_j[k][l] = alpha0[k][l] + sum over j's labels l of q_i(k).
// Priors: alpha0 = kDiagonalPrior (4) on the diagonal and kOffDiagonalPrior
// (1) elsewhere, nu0 = kClassPrior (1): the defaults of Li et al.'s EBCC code
// (a_v = 4, b_v = 1, alpha = 1), of which IBCC is the one-subtype case; a
// diagonal-favouring prior says annotators are a priori better than chance.
//
// Departures from the papers, and why:
//   - A cold fit starts from the soft majority vote (options.vote_smoothing)
//     as the first q (the papers start from the prior); a warm fit (model with
//     parameters) from the previous alpha and nu, annotators beyond them from
//     the prior alpha0. Deterministic, and the majority vote starts near the
//     mode that EM-type methods are known to reach from it.
//   - Convergence: the relative change of sum_i ln(sum_k exp(...)) (the log
//     normaliser of the E-step, reported as FitReport::log_likelihood; it is
//     not the full ELBO, which adds KL terms of the Dirichlets) between two
//     E-steps is below options.tolerance, or options.max_iterations.
//   - Gold items are clamped: q_i is one-hot on the gold class.
//   - ItemPosterior uses exp(E[ln pi]) (the VB posterior); AnnotatorConfusion
//     reports the posterior mean alpha_j[k][l] / sum_l alpha_j[k][l], a
//     row-stochastic matrix that is not exactly what ItemPosterior multiplies.
//   - Annotators without labels and ids not in the fit get the prior alpha0.
//
// Memory: K^2 Dirichlet parameters and K^2 expectations per annotator (dense;
// the project quota counts them as dense confusion cells). Cost per
// iteration: O(labels * K + annotators * K^2) (the second term the digammas),
// no allocation inside the iterations. Single-threaded (options.num_threads is
// not read).
//
// Thread safety: as for every TruthModel — const methods are safe to call
// concurrently; Fit() and Restore() need exclusive access.

#ifndef VERITY_MODELS_IBCC_H_
#define VERITY_MODELS_IBCC_H_

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

class IbccModel : public TruthModel {
 public:
  static constexpr std::string_view kMethod = "ibcc";
  static constexpr double kDiagonalPrior = 4.0;
  static constexpr double kOffDiagonalPrior = 1.0;
  static constexpr double kClassPrior = 1.0;

  // INVALID_ARGUMENT if num_classes < 2 or an option is out of range.
  static absl::StatusOr<std::unique_ptr<IbccModel>> Create(
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
  // Posterior mean of the confusion rows (the prior's for an id not in the
  // fit; uniform before a fit).
  std::vector<double> AnnotatorConfusion(int32_t annotator) const override;
  std::string Serialize() const override;
  // Also INVALID_ARGUMENT if a Dirichlet parameter is below its prior or not
  // finite.
  absl::Status Restore(std::string_view serialized) override;

  // The Dirichlet parameters alpha_j, K x K row-major (alpha0 for an id not
  // in the fit), and nu; nullopt before the first fit.
  std::optional<std::vector<double>> AnnotatorDirichlet(int32_t annotator) const;
  std::optional<std::vector<double>> ClassDirichlet() const;

 private:
  // Dirichlet parameters and the expectations derived from them (always by
  // Derive(), so a restored model computes bit-identical posteriors).
  struct Parameters {
    std::vector<double> nu;     // K
    // (num_annotators + 1) K x K row-major, row 0 the prior alpha0.
    std::vector<double> alpha;
    std::vector<double> log_kappa;  // E[ln kappa], K
    // E[ln pi] label-major: [(annotator + 1)][label][true class].
    std::vector<double> log_pi;
    void Derive(int32_t k);
  };

  IbccModel(int32_t num_classes, const TruthModelOptions& options)
      : num_classes_(num_classes), options_(options) {}

  size_t SlotOf(int32_t annotator) const;

  int32_t num_classes_;
  TruthModelOptions options_;
  std::optional<Parameters> params_;
};

}  // namespace verity::models

#endif  // VERITY_MODELS_IBCC_H_

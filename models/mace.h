// MaceModel: Multi-Annotator Competence Estimation (Hovy, Berg-Kirkpatrick,
// Vaswani and Hovy, NAACL 2013), method "mace" (crowd-kit's MACE).
//
// Each annotator j has a competence theta_j, the probability of labelling an
// item truthfully, and a spamming distribution xi_j over the K labels: a label
// is the item's true class with probability theta_j, else it is drawn from
// xi_j. The true class has the uniform prior (as in the paper and crowd-kit).
// So annotator j's confusion is
//   Q_j[k][y] = theta_j [y = k] + (1 - theta_j) xi_j[y],
// and the posterior of an item is
//   p(k | labels) ∝ prod over its labels (j, y) of Q_j[k][y].
//
// Fit runs EM over the true classes. The E-step computes each item's
// posterior q_i and, for every label (j, y), the expected truthful count
// q_i[y] theta_j / Q_j[y][y] (the rest is the expected spamming count, which
// also counts towards xi_j[y]). The M-step takes the posterior means under
// crowd-kit's priors, Beta(kCompetencePrior, kCompetencePrior) on theta_j
// (its alpha = beta = 0.5) and the symmetric Dirichlet(kStrategyPrior) on
// xi_j (its 10 per label), added as pseudo-counts:
//   theta_j = (truthful_j + 0.5) / (n_j + 1),
//   xi_j[y] = (spam_j[y] + 10) / (spam_j + 10 K).
// crowd-kit's default is variational Bayes (exp-digamma instead of the
// means) from a random start with 10 restarts of 50 iterations; Verity runs
// one deterministic EM: a cold fit starts from the soft majority vote (the
// first M-step uses its posteriors), a warm one from the previous theta and
// xi (annotators beyond them start with the pooled ones). It stops after
// options.max_iterations iterations or when the relative change of the
// marginal log-likelihood is below options.tolerance. Gold items are clamped.
//
// An annotator without labels, and any id not in the fit, gets the pooled
// parameters: the label-weighted mean theta and xi of the fitted annotators
// (theta 1/2 and uniform xi if there were no labels).
//
// Memory: K + 1 doubles per annotator (xi is dense over the labels, not a
// K x K confusion). Cost per iteration: O(labels + items K).
//
// Thread safety: as for every TruthModel — const methods are safe to call
// concurrently; Fit() and Restore() need exclusive access.

#ifndef VERITY_MODELS_MACE_H_
#define VERITY_MODELS_MACE_H_

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

class MaceModel : public TruthModel {
 public:
  static constexpr std::string_view kMethod = "mace";
  // crowd-kit MACE's alpha and beta (Beta prior of theta_j) and its
  // Dirichlet prior of xi_j (strategy_priors_, 10 per label).
  static constexpr double kCompetencePrior = 0.5;
  static constexpr double kStrategyPrior = 10.0;

  // INVALID_ARGUMENT if num_classes < 2 or an option is out of range.
  static absl::StatusOr<std::unique_ptr<MaceModel>> Create(
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
  // Q[k][y] = theta [y = k] + (1 - theta) xi[y] (uniform before a fit).
  std::vector<double> AnnotatorConfusion(int32_t annotator) const override;
  std::string Serialize() const override;
  absl::Status Restore(std::string_view serialized) override;

  // theta_j and xi_j (pooled for an id not in the fit); nullopt before the
  // first fit.
  std::optional<double> AnnotatorCompetence(int32_t annotator) const;
  std::optional<std::vector<double>> AnnotatorStrategy(int32_t annotator) const;

 private:
  MaceModel(int32_t num_classes, const TruthModelOptions& options)
      : num_classes_(num_classes), options_(options) {}

  // Row of `annotator` in params_ (0 = pooled).
  const double* RowOf(int32_t annotator) const;

  int32_t num_classes_;
  TruthModelOptions options_;
  // (num_annotators + 1) rows of K + 1 doubles: theta, then xi[0..K). Row 0
  // is the pooled annotator, row j + 1 annotator j. Empty until Fit/Restore.
  std::optional<std::vector<double>> params_;
};

}  // namespace verity::models

#endif  // VERITY_MODELS_MACE_H_

// BwaModel: Bayesian weighted averaging (Li, Rubinstein and Cohn, "Truth
// inference at scale: a Bayesian model for adjudicating highly redundant crowd
// annotations", WWW 2019), method "bwa".
//
// BWA treats each class k separately as a real-valued regression on the
// one-hot labels: label y_ij of annotator j on item i gives the indicator
// [y_ij = k], modelled as Normal(z_ik, 1 / v_jk) around the item's truth
// z_ik, with annotator j's precision v_jk ~ Gamma(a_v, b_k) and
// z_ik ~ Normal(mu_k, 1 / (lambda v_jk)) (the prior scales with the
// precision, which makes the updates closed-form). The fit alternates, as the
// authors' code (bwa.py) does:
//   mu_k  = mean over items of z_ik,
//   v_jk  = (a_v + n_j) / (b_k + sum over j's labels of (z_ik - [y_ij = k])^2),
//   z_ik  = (lambda mu_k + sum over i's labels of v_jk [y_ij = k]) /
//           (lambda + sum over i's labels of v_jk),
// with a_v = kPrecisionShape (15), lambda = kLambda (1) and the authors'
// "prior correction" b_k = a_v * c * (label-weighted mean of z_ik (1 - z_ik)
// under the majority vote), c = 4 (1 - 1 / K). The posterior of an item is
// z_i normalised to sum to 1 (the paper predicts argmax_k z_ik; normalising
// keeps the argmax and gives a distribution).
//
// Departures from the paper / authors' code, and why:
//   - All K classes iterate together (the code runs K independent loops): one
//     pass over the labels per iteration instead of K, and one stopping rule.
//     Each class's updates are unchanged.
//   - The stopping rule is the authors' (every z_ik within 1e-8 + 1e-3 |z_ik|
//     of its previous value), capped at options.max_iterations (the code caps
//     at 500); options.tolerance is not read: BWA has no likelihood to watch,
//     and FitReport::log_likelihood is 0.
//   - b_k is floored at kMinRate * a_v so that a crowd in full agreement (zero
//     variance under the majority vote) still gets finite precisions.
//   - Gold items are clamped: their z_i is the one-hot gold class in every
//     update (the paper has no gold).
//   - A warm start (a model with parameters) starts from the z_i its
//     precisions and mu give; a cold one from the majority-vote fractions, as
//     the code. b_k is recomputed from the current labels either way.
//   - Annotators without labels and ids not in the fit get the prior mean
//     precision a_v / b_k.
//
// AnnotatorConfusion: BWA has no confusion matrix. The one reported (used by
// assignment and shown to clients) is one-coin per row: with balanced classes
// and exact truth, a one-coin annotator of accuracy p has E[(z_ik -
// [y = k])^2] = 2 (1 - p) / K, so row k has p_k = 1 - K / (2 v_jk) on the
// diagonal, clamped into [1/K, 1 - 1e-6], and (1 - p_k) / (K - 1) elsewhere.
// ItemPosterior does not use it.
//
// Cost: O(labels * K) per iteration, no allocation inside the iterations;
// memory K doubles per annotator. Single-threaded (options.num_threads is not
// read).
//
// Thread safety: as for every TruthModel — const methods are safe to call
// concurrently; Fit() and Restore() need exclusive access.

#ifndef VERITY_MODELS_BWA_H_
#define VERITY_MODELS_BWA_H_

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

class BwaModel : public TruthModel {
 public:
  static constexpr std::string_view kMethod = "bwa";
  // The authors' defaults (bwa.py: a_v = 15, lambda_ = 1, prior_correction).
  static constexpr double kPrecisionShape = 15.0;
  static constexpr double kLambda = 1.0;
  static constexpr double kMinRate = 1e-6;
  // The authors' np.allclose(last_z, z, rtol=1e-3) (atol 1e-8).
  static constexpr double kRelativeTolerance = 1e-3;
  static constexpr double kAbsoluteTolerance = 1e-8;

  // INVALID_ARGUMENT if num_classes < 2 or an option is out of range.
  static absl::StatusOr<std::unique_ptr<BwaModel>> Create(
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
  // The one-coin confusion documented above (uniform rows before a fit).
  std::vector<double> AnnotatorConfusion(int32_t annotator) const override;
  std::string Serialize() const override;
  // Also INVALID_ARGUMENT if a precision is not finite and > 0, or a class
  // mean is not in [0, 1].
  absl::Status Restore(std::string_view serialized) override;

  // v_jk, k = 0..K-1 (the prior mean a_v / b_k for an id not in the fit);
  // nullopt before the first fit.
  std::optional<std::vector<double>> AnnotatorPrecision(int32_t annotator) const;
  // mu_k, k = 0..K-1; nullopt before the first fit.
  std::optional<std::vector<double>> ClassMean() const;

 private:
  BwaModel(int32_t num_classes, const TruthModelOptions& options)
      : num_classes_(num_classes), options_(options) {}

  // K precisions of `annotator` (row 0, the prior mean, for an id not in the
  // fit).
  const double* RowOf(int32_t annotator) const;

  int32_t num_classes_;
  TruthModelOptions options_;
  // K class means mu, then (num_annotators + 1) rows of K precisions: row 0
  // the prior mean a_v / b_k, row j + 1 annotator j. Empty until Fit/Restore.
  std::optional<std::vector<double>> params_;
};

}  // namespace verity::models

#endif  // VERITY_MODELS_BWA_H_

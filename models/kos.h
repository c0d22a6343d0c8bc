// KosModel: Karger, Oh and Shah's iterative message passing, method "kos"
// (crowd-kit's KOS), for binary tasks only.
//
// A label of class 0 is A = +1, of class 1 A = -1. Every label (edge between
// item i and annotator j) carries an annotator-to-item message y_{j->i},
// initially 1 (crowd-kit draws each from N(1, 1) with a fixed seed; the
// paper allows either). Each iteration computes
//   x_{i->j} = sum over the item's other labels j' of A_{ij'} y_{j'->i},
//   y_{j->i} = sum over the annotator's other labels i' of A_{i'j} x_{i'->j},
// and rescales the y messages to a root mean square of 1 (the algorithm is
// homogeneous, so this only prevents overflow, where crowd-kit stops at
// 1e300). Fit stops after options.max_iterations iterations, or, converged,
// once no rescaled message moved by more than options.tolerance.
//
// KOS decides sign(sum_j A_ij y_{j->i}) with per-edge messages, which a
// server cannot evaluate for labels that arrive after the fit. This model
// keeps one weight per annotator instead, y_j = sum over all of the
// annotator's labels of A_ij x_{i->j} (the message without leaving item i
// out), divided by the root mean square of y_j over annotators with labels,
// so that a typical annotator's label moves the log-odds by 1. The posterior
// of an item is then the binary one-coin posterior with vote weight w_j,
//   log p(0 | labels) / p(1 | labels) = sum_j A_ij w_j,
// whose sign is the KOS decision with full instead of leave-one-out messages,
// and an annotator's confusion is one-coin with accuracy sigmoid(w_j)
// (clamped into [1e-6, 1 - 1e-6]). An annotator without labels and any id
// unseen in the fit get the label-weighted mean weight. If every message is
// 0 (no item has two labels, or no annotator has two labels), every weight
// is 1: the majority vote.
//
// Gold items are clamped in the posteriors but do not enter the messages.
// A warm start initialises y_{j->i} with the previous weight of annotator j
// (new annotators the pooled one) instead of 1. FitReport.log_likelihood is
// 0 (KOS has no likelihood).
//
// Cost per iteration: two passes over the labels; memory: two doubles per
// label and an int per label for the annotator-major order.
//
// Thread safety: as for every TruthModel — const methods are safe to call
// concurrently; Fit() and Restore() need exclusive access.

#ifndef VERITY_MODELS_KOS_H_
#define VERITY_MODELS_KOS_H_

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

class KosModel : public TruthModel {
 public:
  static constexpr std::string_view kMethod = "kos";
  static constexpr double kMinConfusionAccuracy = 1e-6;

  // INVALID_ARGUMENT if num_classes != 2 (KOS is for binary tasks; the
  // message names the method) or an option is out of range.
  static absl::StatusOr<std::unique_ptr<KosModel>> Create(
      int32_t num_classes, const TruthModelOptions& options);

  std::string_view method() const override { return kMethod; }
  int32_t num_classes() const override { return 2; }
  bool has_parameters() const override { return weights_.has_value(); }
  std::unique_ptr<TruthModel> Clone() const override;

  absl::StatusOr<FitReport> Fit(const AnnotationMatrix& data,
                                absl::Span<const int32_t> gold,
                                bool warm_start) override;
  void ItemPosterior(absl::Span<const AnnotationMatrix::Entry> labels,
                     int32_t gold_label,
                     absl::Span<double> out) const override;
  // 2 x 2 one-coin: sigmoid(w_j) on the diagonal (uniform before a fit).
  std::vector<double> AnnotatorConfusion(int32_t annotator) const override;
  std::string Serialize() const override;
  absl::Status Restore(std::string_view serialized) override;

  // The fitted vote weight w_j (pooled for an id not in the fit); nullopt
  // before the first fit.
  std::optional<double> AnnotatorWeight(int32_t annotator) const;

 private:
  explicit KosModel(const TruthModelOptions& options) : options_(options) {}

  double WeightOf(int32_t annotator) const;

  TruthModelOptions options_;
  // Slot 0 the pooled weight, slot j + 1 annotator j; empty until Fit or
  // Restore.
  std::optional<std::vector<double>> weights_;
};

}  // namespace verity::models

#endif  // VERITY_MODELS_KOS_H_

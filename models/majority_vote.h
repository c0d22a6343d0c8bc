// MajorityVoteModel: soft majority vote, method "mv".
//
// The posterior of an item is its normalised label counts, smoothed so that
// no class gets probability 0: p_k = (count_k + s) / (n + K s) with
// s = options.vote_smoothing; an item without labels gets the uniform
// distribution, a gold item the one-hot of its gold class. The posterior does
// not depend on the fit at all, and annotators are interchangeable.
//
// Fit() still learns confusion matrices, because the assignment service needs
// a predicted confusion for every annotator whatever the truth model: it is
// one M-step on the soft-majority-vote posteriors (with gold clamped), i.e.
// each annotator's smoothed agreement with the majority, shrunk toward the
// population's (see TruthModelOptions). These are the parameters Dawid-Skene
// starts from. Fit() also reports the Dawid-Skene log-likelihood of the data
// under them, so mv and ds fits are comparable; warm_start is ignored.
//
// Thread safety: as for every TruthModel — const methods are safe to call
// concurrently; Fit() and Restore() need exclusive access.

#ifndef VERITY_MODELS_MAJORITY_VOTE_H_
#define VERITY_MODELS_MAJORITY_VOTE_H_

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

class MajorityVoteModel : public TruthModel {
 public:
  static constexpr std::string_view kMethod = "mv";

  // INVALID_ARGUMENT if num_classes < 2 or an option is out of range.
  static absl::StatusOr<std::unique_ptr<MajorityVoteModel>> Create(
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
  std::vector<double> AnnotatorConfusionDiagonal(int32_t annotator) const override;
  std::string Serialize() const override;
  absl::Status Restore(std::string_view serialized) override;

 private:
  MajorityVoteModel(int32_t num_classes, const TruthModelOptions& options)
      : num_classes_(num_classes), options_(options) {}

  int32_t num_classes_;
  TruthModelOptions options_;
  std::optional<ConfusionParameters> params_;  // empty until Fit or Restore
};

}  // namespace verity::models

#endif  // VERITY_MODELS_MAJORITY_VOTE_H_

// WawaModel: Worker Agreement With Aggregate, method "wawa" (crowd-kit's
// Wawa).
//
// Fit() runs three steps, none iterated:
//   1. the majority vote label of every item (plain counts, ties toward the
//      lower class index; a gold item takes its gold class);
//   2. each annotator's skill: the fraction of their labels equal to the
//      majority label of the item (crowd-kit's get_accuracy); the pooled skill
//      is that fraction over all labels (annotators without labels and ids
//      unseen in the fit get it);
//   3. the posterior of an item: the skill-weighted vote of its labels
//      (SkillVoteParameters, smoothed by options.vote_smoothing).
// Options read: vote_smoothing. warm_start is ignored: the fit is a pure
// function of the labels and gold. FitReport: iterations 1, converged, and
// log_likelihood 0 (wawa has no likelihood).
//
// Cost: two passes over the labels (item-major then annotator-major), O(N + I K)
// time and O(A + I) memory beyond the data.
//
// Thread safety: as for every TruthModel — const methods are safe to call
// concurrently; Fit() and Restore() need exclusive access.

#ifndef VERITY_MODELS_WAWA_H_
#define VERITY_MODELS_WAWA_H_

#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "models/annotation_matrix.h"
#include "models/skill_vote.h"
#include "models/truth_model.h"

namespace verity::models {

class WawaModel : public SkillVoteModel {
 public:
  static constexpr std::string_view kMethod = "wawa";

  // INVALID_ARGUMENT if num_classes < 2 or an option is out of range.
  static absl::StatusOr<std::unique_ptr<WawaModel>> Create(
      int32_t num_classes, const TruthModelOptions& options);

  std::string_view method() const override { return kMethod; }
  std::unique_ptr<TruthModel> Clone() const override;
  absl::StatusOr<FitReport> Fit(const AnnotationMatrix& data,
                                absl::Span<const int32_t> gold,
                                bool warm_start) override;

 private:
  using SkillVoteModel::SkillVoteModel;
};

}  // namespace verity::models

#endif  // VERITY_MODELS_WAWA_H_

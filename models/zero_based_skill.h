// ZeroBasedSkillModel: method "zero_based_skill" (crowd-kit's ZeroBasedSkill),
// an iterated skill-weighted majority vote.
//
// Every annotator starts with skill 1/K + 1e-5 (crowd-kit: 1 / the number of
// distinct labels + eps; here K = num_classes, the same when every class
// occurs). Iteration t = 1, 2, ... then
//   1. halves the learning rate η (initially 1) when t is a multiple of 20;
//   2. takes the weighted majority label of every item under the current
//      skills (SkillVoteParameters::WeightedMajorityLabel; gold items their
//      gold class);
//   3. moves every skill toward the annotator's agreement rate r_a with those
//      labels (AgreementWithReference): s_a += η (r_a - s_a), a gradient step
//      on (r_a - s_a)^2 / 2. The pooled skill moves the same way.
// These are crowd-kit's defaults (n_iter 100, lr_init 1, lr_steps_to_reduce
// 20, lr_reduce_factor 0.5, eps 1e-5); n_iter is options.max_iterations, the
// others are the constants below. crowd-kit always runs n_iter iterations;
// this fit stops earlier, converged, once no skill moved by more than
// options.tolerance in an iteration (with η = 1 this means the labels repeat,
// a fixed point that every later iteration would keep). The posterior is the
// weighted vote under the final skills (SkillVoteParameters).
//
// A warm start begins from the previous skills (new annotators with the
// previous pooled skill) instead of 1/K + 1e-5, with the same learning-rate
// schedule. FitReport.log_likelihood is 0 (no likelihood).
//
// Cost per iteration: two passes over the labels, as one iteration of wawa.
//
// Thread safety: as for every TruthModel — const methods are safe to call
// concurrently; Fit() and Restore() need exclusive access.

#ifndef VERITY_MODELS_ZERO_BASED_SKILL_H_
#define VERITY_MODELS_ZERO_BASED_SKILL_H_

#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "models/annotation_matrix.h"
#include "models/skill_vote.h"
#include "models/truth_model.h"

namespace verity::models {

class ZeroBasedSkillModel : public SkillVoteModel {
 public:
  static constexpr std::string_view kMethod = "zero_based_skill";
  static constexpr double kInitialLearningRate = 1.0;
  static constexpr int kStepsToReduceLearningRate = 20;
  static constexpr double kLearningRateReduceFactor = 0.5;
  static constexpr double kInitialSkillAboveChance = 1e-5;

  // INVALID_ARGUMENT if num_classes < 2 or an option is out of range.
  static absl::StatusOr<std::unique_ptr<ZeroBasedSkillModel>> Create(
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

#endif  // VERITY_MODELS_ZERO_BASED_SKILL_H_

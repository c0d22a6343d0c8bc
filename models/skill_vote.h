// SkillVoteParameters: one skill per annotator and the weighted majority vote
// it implies, the parameters of the skill-weighted voting methods wawa and
// zero_based_skill (crowd-kit's Wawa and ZeroBasedSkill).
//
// An annotator's skill s_a is a weight in [0, 1] (both methods estimate it as
// an agreement rate with aggregated labels). The posterior of an item is its
// skill-weighted vote, smoothed so that it is a proper distribution with no
// zero:
//   p_k = (W_k + v) / (W + K v),
// W_k = the sum of the skills of the annotators who gave label k, W = sum_k W_k,
// v = options.vote_smoothing. With v -> 0 this is crowd-kit's normalised
// weighted vote (its probas_); the argmax, ties broken toward the lower class
// index, is the weighted majority label both methods iterate on. An item with
// no labels (or only labels of skill 0) gets the uniform distribution; a gold
// item the one-hot of its class.
//
// Slot 0 of the skill array is the pooled skill (the agreement rate of all
// labels), used for annotators without labels in the fit and for ids never
// seen in it; slot a + 1 is annotator a.
//
// The confusion implied for an annotator (for assignment and for clients) is
// one-coin: s_a on the diagonal and (1 - s_a) / (K - 1) elsewhere, with s_a
// clamped into [kMinConfusionSkill, 1 - kMinConfusionSkill] so that no cell is
// 0 (consumers take its logarithm). Only the confusion is clamped; the
// posterior uses the skills as fitted.
//
// Thread safety: immutable in use (built by a fit or a parse, then only read);
// const methods may be called concurrently.

#ifndef VERITY_MODELS_SKILL_VOTE_H_
#define VERITY_MODELS_SKILL_VOTE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "models/annotation_matrix.h"
#include "models/binary_codec.h"
#include "models/truth_model.h"

namespace verity::models {

struct SkillVoteParameters {
  static constexpr double kMinConfusionSkill = 1e-6;

  // `num_annotators` annotators, every skill (and the pooled one) = `skill`.
  SkillVoteParameters(int32_t num_classes, int32_t num_annotators,
                      double skill);

  int32_t num_annotators() const {
    return static_cast<int32_t>(skill.size()) - 1;
  }
  size_t Slot(int32_t annotator) const {
    return annotator >= 0 && annotator < num_annotators()
               ? static_cast<size_t>(annotator) + 1
               : 0;
  }
  double SkillOf(int32_t annotator) const { return skill[Slot(annotator)]; }

  // Keeps the first `num_annotators`; new ones get the pooled skill.
  void ResizeAnnotators(int32_t num_annotators);

  // Writes the smoothed weighted vote documented above into out (size K;
  // one-hot of gold_label if >= 0). Sums in the order of `labels`: pass them
  // sorted by (annotator, label) (CanonicalLabels) for results independent of
  // their order.
  void Posterior(absl::Span<const AnnotationMatrix::Entry> labels,
                 int32_t gold_label, double vote_smoothing,
                 absl::Span<double> out) const;

  // The class with the largest weighted vote W_k, the lowest index among
  // ties (crowd-kit takes the first of its sorted label columns); gold_label
  // if >= 0; -1 for an item with no labels and no gold.
  int32_t WeightedMajorityLabel(
      absl::Span<const AnnotationMatrix::Entry> labels, int32_t gold_label,
      absl::Span<double> scratch) const;

  // K x K one-coin confusion of `annotator` (see above).
  std::vector<double> Confusion(int32_t annotator) const;

  // Appends K, the number of annotators and the 1 + A skills.
  void Write(ByteWriter& writer) const;
  // Reads what Write wrote. INVALID_ARGUMENT if the class count differs from
  // num_classes, the blob is truncated, or a skill is not in [0, 1].
  static absl::StatusOr<SkillVoteParameters> Read(ByteReader& reader,
                                                  int32_t num_classes);

  int32_t num_classes;
  std::vector<double> skill;  // 1 + A: pooled, then per annotator
};

// Each annotator's agreement rate with `reference` (one class per item, -1 =
// no reference: the item's labels are not counted): the fraction of their
// labels on referenced items that equal the item's reference class, as
// crowd-kit's get_accuracy. Returned in the SkillVoteParameters layout: slot 0
// is the agreement rate of all counted labels; an annotator with no counted
// label gets it too. With no counted label at all every skill is
// `empty_skill`. One pass over the annotator-major CSR.
std::vector<double> AgreementWithReference(const AnnotationMatrix& data,
                                           absl::Span<const int32_t> reference,
                                           double empty_skill);

// The part of wawa and zero_based_skill that does not depend on how the skills
// are fitted: posteriors, confusions and serialisation of SkillVoteParameters.
// Before the first fit (no parameters) the posterior is the soft majority vote
// (every skill equal) and every confusion uniform. Subclasses implement
// method(), Clone() and Fit(), which must set params_ only on success.
class SkillVoteModel : public TruthModel {
 public:
  int32_t num_classes() const override { return num_classes_; }
  bool has_parameters() const override { return params_.has_value(); }

  void ItemPosterior(absl::Span<const AnnotationMatrix::Entry> labels,
                     int32_t gold_label,
                     absl::Span<double> out) const override;
  // One-coin from the annotator's skill (SkillVoteParameters::Confusion);
  // uniform before the first fit.
  std::vector<double> AnnotatorConfusion(int32_t annotator) const override;
  // Header, then SkillVoteParameters::Write when fitted.
  std::string Serialize() const override;
  absl::Status Restore(std::string_view serialized) override;

  // The fitted skill of `annotator` (the pooled skill for an id not in the
  // fit); nullopt before the first fit.
  std::optional<double> AnnotatorSkill(int32_t annotator) const;

 protected:
  SkillVoteModel(int32_t num_classes, const TruthModelOptions& options)
      : num_classes_(num_classes), options_(options) {}

  int32_t num_classes_;
  TruthModelOptions options_;
  std::optional<SkillVoteParameters> params_;  // empty until Fit or Restore
};

// Validates the arguments shared by the skill-vote models' Create functions:
// INVALID_ARGUMENT if num_classes < 2 or an option is out of range.
absl::Status ValidateSkillVoteModel(int32_t num_classes,
                                    const TruthModelOptions& options);

}  // namespace verity::models

#endif  // VERITY_MODELS_SKILL_VOTE_H_

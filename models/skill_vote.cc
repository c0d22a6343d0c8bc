#include "models/skill_vote.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "models/confusion_parameters.h"

namespace verity::models {

SkillVoteParameters::SkillVoteParameters(int32_t num_classes,
                                         int32_t num_annotators, double skill)
    : num_classes(num_classes),
      skill(static_cast<size_t>(num_annotators) + 1, skill) {}

void SkillVoteParameters::ResizeAnnotators(int32_t num_annotators) {
  skill.resize(static_cast<size_t>(num_annotators) + 1, skill[0]);
}

void SkillVoteParameters::Posterior(
    absl::Span<const AnnotationMatrix::Entry> labels, int32_t gold_label,
    double vote_smoothing, absl::Span<double> out) const {
  const size_t k = static_cast<size_t>(num_classes);
  if (gold_label >= 0) {
    std::fill(out.begin(), out.end(), 0.0);
    out[gold_label] = 1.0;
    return;
  }
  std::fill(out.begin(), out.end(), vote_smoothing);
  double total = static_cast<double>(k) * vote_smoothing;
  for (const AnnotationMatrix::Entry& e : labels) {
    const double w = skill[Slot(e.other)];
    out[e.label] += w;
    total += w;
  }
  const double inv = 1.0 / total;
  for (size_t c = 0; c < k; ++c) out[c] *= inv;
}

int32_t SkillVoteParameters::WeightedMajorityLabel(
    absl::Span<const AnnotationMatrix::Entry> labels, int32_t gold_label,
    absl::Span<double> scratch) const {
  if (gold_label >= 0) return gold_label;
  if (labels.empty()) return -1;
  std::fill(scratch.begin(), scratch.end(), 0.0);
  for (const AnnotationMatrix::Entry& e : labels) {
    scratch[e.label] += skill[Slot(e.other)];
  }
  // std::max_element returns the first of equal maxima.
  return static_cast<int32_t>(
      std::max_element(scratch.begin(), scratch.end()) - scratch.begin());
}

std::vector<double> SkillVoteParameters::Confusion(int32_t annotator) const {
  const size_t k = static_cast<size_t>(num_classes);
  const double p = std::clamp(SkillOf(annotator), kMinConfusionSkill,
                              1.0 - kMinConfusionSkill);
  std::vector<double> confusion(k * k, (1.0 - p) / static_cast<double>(k - 1));
  for (size_t c = 0; c < k; ++c) confusion[c * k + c] = p;
  return confusion;
}

void SkillVoteParameters::Write(ByteWriter& writer) const {
  writer.WriteU32(static_cast<uint32_t>(num_classes));
  writer.WriteU32(static_cast<uint32_t>(num_annotators()));
  for (double s : skill) writer.WriteF64(s);
}

absl::StatusOr<SkillVoteParameters> SkillVoteParameters::Read(
    ByteReader& reader, int32_t num_classes) {
  if (absl::Status s = ReadClassCount(reader, num_classes); !s.ok()) return s;
  absl::StatusOr<uint32_t> a32 = reader.ReadU32();
  if (!a32.ok()) return a32.status();
  // Check the size before allocating, so a corrupt count cannot make us
  // allocate gigabytes.
  const uint64_t want_bytes = 8 * (static_cast<uint64_t>(*a32) + 1);
  if (*a32 > static_cast<uint32_t>(INT32_MAX - 1) ||
      reader.remaining() < want_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "serialized model is truncated: ", *a32, " annotators need ",
        want_bytes, " bytes, have ", reader.remaining()));
  }
  SkillVoteParameters params(num_classes, static_cast<int32_t>(*a32), 0.0);
  for (double& s : params.skill) {
    absl::StatusOr<double> v = reader.ReadF64();
    if (!v.ok()) return v.status();
    if (!(*v >= 0.0 && *v <= 1.0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("serialized model is corrupt: a skill is ", *v));
    }
    s = *v;
  }
  return params;
}

std::vector<double> AgreementWithReference(const AnnotationMatrix& data,
                                           absl::Span<const int32_t> reference,
                                           double empty_skill) {
  const int32_t num_annotators = data.num_annotators();
  std::vector<double> skill(static_cast<size_t>(num_annotators) + 1);
  std::vector<int64_t> agree(num_annotators, 0);
  std::vector<int64_t> counted(num_annotators, 0);
  int64_t total_agree = 0;
  int64_t total_counted = 0;
  for (int32_t a = 0; a < num_annotators; ++a) {
    for (const AnnotationMatrix::Entry& e : data.LabelsOfAnnotator(a)) {
      const int32_t ref = reference[e.other];
      if (ref < 0) continue;
      ++counted[a];
      agree[a] += e.label == ref;
    }
    total_agree += agree[a];
    total_counted += counted[a];
  }
  skill[0] = total_counted > 0 ? static_cast<double>(total_agree) /
                                     static_cast<double>(total_counted)
                               : empty_skill;
  for (int32_t a = 0; a < num_annotators; ++a) {
    skill[static_cast<size_t>(a) + 1] =
        counted[a] > 0 ? static_cast<double>(agree[a]) /
                             static_cast<double>(counted[a])
                       : skill[0];
  }
  return skill;
}

void SkillVoteModel::ItemPosterior(
    absl::Span<const AnnotationMatrix::Entry> labels, int32_t gold_label,
    absl::Span<double> out) const {
  if (!params_.has_value()) {
    SoftMajorityVote(labels, gold_label, options_.vote_smoothing, out);
    return;
  }
  std::vector<AnnotationMatrix::Entry> scratch;
  params_->Posterior(CanonicalLabels(labels, scratch), gold_label,
                     options_.vote_smoothing, out);
}

std::vector<double> SkillVoteModel::AnnotatorConfusion(
    int32_t annotator) const {
  if (!params_.has_value()) {
    const size_t k = static_cast<size_t>(num_classes_);
    return std::vector<double>(k * k, 1.0 / static_cast<double>(k));
  }
  return params_->Confusion(annotator);
}

std::optional<double> SkillVoteModel::AnnotatorSkill(int32_t annotator) const {
  if (!params_.has_value()) return std::nullopt;
  return params_->SkillOf(annotator);
}

std::string SkillVoteModel::Serialize() const {
  ByteWriter writer;
  WriteModelHeader(writer, method(), params_.has_value());
  if (params_.has_value()) params_->Write(writer);
  return writer.Finish();
}

absl::Status SkillVoteModel::Restore(std::string_view serialized) {
  absl::StatusOr<ByteReader> reader = ByteReader::Open(serialized);
  if (!reader.ok()) return reader.status();
  absl::StatusOr<bool> has_params = ReadModelHeader(*reader, method());
  if (!has_params.ok()) return has_params.status();
  std::optional<SkillVoteParameters> params;
  if (*has_params) {
    absl::StatusOr<SkillVoteParameters> parsed =
        SkillVoteParameters::Read(*reader, num_classes_);
    if (!parsed.ok()) return parsed.status();
    params = *std::move(parsed);
  }
  absl::Status s = reader->ExpectEnd();
  if (!s.ok()) return s;
  params_ = std::move(params);
  return absl::OkStatus();
}

absl::Status ValidateSkillVoteModel(int32_t num_classes,
                                    const TruthModelOptions& options) {
  if (num_classes < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_classes must be >= 2, got ", num_classes));
  }
  return ValidateTruthModelOptions(options);
}

}  // namespace verity::models

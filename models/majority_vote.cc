#include "models/majority_vote.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace verity::models {

absl::StatusOr<std::unique_ptr<MajorityVoteModel>> MajorityVoteModel::Create(
    int32_t num_classes, const TruthModelOptions& options) {
  if (num_classes < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_classes must be >= 2, got ", num_classes));
  }
  absl::Status s = ValidateTruthModelOptions(options);
  if (!s.ok()) return s;
  return std::unique_ptr<MajorityVoteModel>(
      new MajorityVoteModel(num_classes, options));
}

std::unique_ptr<TruthModel> MajorityVoteModel::Clone() const {
  return std::unique_ptr<TruthModel>(new MajorityVoteModel(*this));
}

absl::StatusOr<FitReport> MajorityVoteModel::Fit(
    const AnnotationMatrix& data, absl::Span<const int32_t> gold,
    bool /*warm_start*/) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = ValidateFitInputs(num_classes_, data, gold);
  if (!s.ok()) return s;

  const double smoothing = options_.vote_smoothing;
  PassResult pass = PassOverItems(
      data, gold, options_.num_threads,
      [smoothing](absl::Span<const AnnotationMatrix::Entry> labels,
                  int32_t gold_label, absl::Span<double> out) {
        SoftMajorityVote(labels, gold_label, smoothing, out);
        return 0.0;
      });
  ConfusionParameters params = EstimateParameters(pass.counts, options_);

  FitReport report;
  report.iterations = 1;
  report.converged = true;
  std::vector<double> posterior(num_classes_);
  for (int32_t i = 0; i < data.num_items(); ++i) {
    const int32_t gold_label = gold.empty() ? -1 : gold[i];
    const absl::Span<const AnnotationMatrix::Entry> labels =
        data.LabelsOfItem(i);
    if (labels.empty() && gold_label < 0) continue;
    report.log_likelihood +=
        params.Posterior(labels, gold_label, absl::MakeSpan(posterior));
  }
  params_ = std::move(params);
  report.seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  return report;
}

void MajorityVoteModel::ItemPosterior(
    absl::Span<const AnnotationMatrix::Entry> labels, int32_t gold_label,
    absl::Span<double> out) const {
  SoftMajorityVote(labels, gold_label, options_.vote_smoothing, out);
}

std::vector<double> MajorityVoteModel::AnnotatorConfusion(
    int32_t annotator) const {
  if (!params_.has_value()) {
    return std::vector<double>(
        static_cast<size_t>(num_classes_) * num_classes_, 1.0 / num_classes_);
  }
  return params_->Confusion(annotator);
}

std::vector<double> MajorityVoteModel::AnnotatorConfusionDiagonal(
    int32_t annotator) const {
  if (!params_.has_value()) {
    return std::vector<double>(num_classes_, 1.0 / num_classes_);
  }
  return params_->ConfusionDiagonal(annotator);
}

std::string MajorityVoteModel::Serialize() const {
  return SerializeConfusionModel(kMethod, params_);
}

absl::Status MajorityVoteModel::Restore(std::string_view serialized) {
  absl::StatusOr<std::optional<ConfusionParameters>> params =
      ParseConfusionModel(serialized, kMethod, num_classes_);
  if (!params.ok()) return params.status();
  params_ = *std::move(params);
  return absl::OkStatus();
}

}  // namespace verity::models

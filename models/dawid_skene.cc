#include "models/dawid_skene.h"

#include <chrono>
#include <cmath>
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

absl::StatusOr<std::unique_ptr<DawidSkeneModel>> DawidSkeneModel::Create(
    int32_t num_classes, const TruthModelOptions& options) {
  if (num_classes < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_classes must be >= 2, got ", num_classes));
  }
  absl::Status s = ValidateTruthModelOptions(options);
  if (!s.ok()) return s;
  return std::unique_ptr<DawidSkeneModel>(
      new DawidSkeneModel(num_classes, options));
}

std::unique_ptr<TruthModel> DawidSkeneModel::Clone() const {
  return std::unique_ptr<TruthModel>(new DawidSkeneModel(*this));
}

absl::StatusOr<FitReport> DawidSkeneModel::Fit(const AnnotationMatrix& data,
                                               absl::Span<const int32_t> gold,
                                               bool warm_start) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = ValidateFitInputs(num_classes_, data, gold);
  if (!s.ok()) return s;

  FitReport report;
  std::optional<ConfusionParameters> params;
  if (warm_start && params_.has_value()) {
    params = *params_;
    params->ResizeAnnotators(data.num_annotators());
  } else {
    // Initialisation (not counted as an iteration): the M-step on the soft
    // majority vote.
    const double smoothing = options_.vote_smoothing;
    PassResult pass = PassOverItems(
        data, gold, options_.num_threads,
        [smoothing](absl::Span<const AnnotationMatrix::Entry> labels,
                    int32_t gold_label, absl::Span<double> out) {
          SoftMajorityVote(labels, gold_label, smoothing, out);
          return 0.0;
        });
    params = EstimateParameters(pass.counts, options_);
  }

  // Each pass is the E-step of the current parameters (giving their
  // log-likelihood) fused with the M-step that replaces them.
  std::optional<double> previous_ll;
  while (report.iterations < options_.max_iterations) {
    const ConfusionParameters& current = *params;
    PassResult pass = PassOverItems(
        data, gold, options_.num_threads,
        [&current](absl::Span<const AnnotationMatrix::Entry> labels,
                   int32_t gold_label, absl::Span<double> out) {
          return current.Posterior(labels, gold_label, out);
        });
    report.log_likelihood = pass.log_likelihood;
    params = EstimateParameters(pass.counts, options_);
    ++report.iterations;
    if (previous_ll.has_value()) {
      const double change = std::abs(pass.log_likelihood - *previous_ll);
      const double scale = std::abs(pass.log_likelihood);
      if (change <= options_.tolerance * scale) {
        report.converged = true;
        break;
      }
    }
    previous_ll = pass.log_likelihood;
  }

  params_ = std::move(params);
  report.seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  return report;
}

void DawidSkeneModel::ItemPosterior(
    absl::Span<const AnnotationMatrix::Entry> labels, int32_t gold_label,
    absl::Span<double> out) const {
  if (!params_.has_value()) {
    SoftMajorityVote(labels, gold_label, options_.vote_smoothing, out);
    return;
  }
  std::vector<AnnotationMatrix::Entry> scratch;
  params_->Posterior(CanonicalLabels(labels, scratch), gold_label, out);
}

std::vector<double> DawidSkeneModel::AnnotatorConfusion(
    int32_t annotator) const {
  if (!params_.has_value()) {
    return std::vector<double>(
        static_cast<size_t>(num_classes_) * num_classes_, 1.0 / num_classes_);
  }
  return params_->Confusion(annotator);
}

std::vector<double> DawidSkeneModel::ClassPrior() const {
  if (!params_.has_value()) {
    return std::vector<double>(num_classes_, 1.0 / num_classes_);
  }
  return params_->ClassPrior();
}

std::string DawidSkeneModel::Serialize() const {
  return SerializeConfusionModel(kMethod, params_);
}

absl::Status DawidSkeneModel::Restore(std::string_view serialized) {
  absl::StatusOr<std::optional<ConfusionParameters>> params =
      ParseConfusionModel(serialized, kMethod, num_classes_);
  if (!params.ok()) return params.status();
  params_ = *std::move(params);
  return absl::OkStatus();
}

}  // namespace verity::models

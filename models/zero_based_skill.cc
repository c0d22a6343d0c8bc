#include "models/zero_based_skill.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"

namespace verity::models {

absl::StatusOr<std::unique_ptr<ZeroBasedSkillModel>>
ZeroBasedSkillModel::Create(int32_t num_classes,
                            const TruthModelOptions& options) {
  absl::Status s = ValidateSkillVoteModel(num_classes, options);
  if (!s.ok()) return s;
  return std::unique_ptr<ZeroBasedSkillModel>(
      new ZeroBasedSkillModel(num_classes, options));
}

std::unique_ptr<TruthModel> ZeroBasedSkillModel::Clone() const {
  return std::unique_ptr<TruthModel>(new ZeroBasedSkillModel(*this));
}

absl::StatusOr<FitReport> ZeroBasedSkillModel::Fit(
    const AnnotationMatrix& data, absl::Span<const int32_t> gold,
    bool warm_start) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = ValidateFitInputs(num_classes_, data, gold);
  if (!s.ok()) return s;

  std::optional<SkillVoteParameters> params;
  if (warm_start && params_.has_value()) {
    params = *params_;
    params->ResizeAnnotators(data.num_annotators());
  } else {
    params.emplace(num_classes_, data.num_annotators(),
                   1.0 / num_classes_ + kInitialSkillAboveChance);
  }

  const int32_t n = data.num_items();
  std::vector<double> scratch(static_cast<size_t>(num_classes_));
  std::vector<int32_t> labels(static_cast<size_t>(n));
  double learning_rate = kInitialLearningRate;
  FitReport report;
  for (int t = 1; t <= options_.max_iterations; ++t) {
    if (t % kStepsToReduceLearningRate == 0) {
      learning_rate *= kLearningRateReduceFactor;
    }
    for (int32_t i = 0; i < n; ++i) {
      labels[i] = params->WeightedMajorityLabel(
          data.LabelsOfItem(i), gold.empty() ? -1 : gold[i],
          absl::MakeSpan(scratch));
    }
    const std::vector<double> agreement =
        AgreementWithReference(data, labels, params->skill[0]);
    double largest_step = 0.0;
    for (size_t slot = 0; slot < agreement.size(); ++slot) {
      const double step = learning_rate * (agreement[slot] - params->skill[slot]);
      // A convex step stays in [0, 1] but for rounding.
      params->skill[slot] = std::clamp(params->skill[slot] + step, 0.0, 1.0);
      largest_step = std::max(largest_step, std::abs(step));
    }
    report.iterations = t;
    if (largest_step <= options_.tolerance) {
      report.converged = true;
      break;
    }
  }
  params_ = std::move(params);
  report.seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  return report;
}

}  // namespace verity::models

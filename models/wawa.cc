#include "models/wawa.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"

namespace verity::models {

absl::StatusOr<std::unique_ptr<WawaModel>> WawaModel::Create(
    int32_t num_classes, const TruthModelOptions& options) {
  absl::Status s = ValidateSkillVoteModel(num_classes, options);
  if (!s.ok()) return s;
  return std::unique_ptr<WawaModel>(new WawaModel(num_classes, options));
}

std::unique_ptr<TruthModel> WawaModel::Clone() const {
  return std::unique_ptr<TruthModel>(new WawaModel(*this));
}

absl::StatusOr<FitReport> WawaModel::Fit(const AnnotationMatrix& data,
                                         absl::Span<const int32_t> gold,
                                         bool warm_start) {
  (void)warm_start;
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = ValidateFitInputs(num_classes_, data, gold);
  if (!s.ok()) return s;

  const int32_t n = data.num_items();
  // Every skill 1: the weighted majority is the plain majority vote.
  const SkillVoteParameters equal(num_classes_, 0, 1.0);
  std::vector<double> scratch(static_cast<size_t>(num_classes_));
  std::vector<int32_t> majority(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    majority[i] = equal.WeightedMajorityLabel(
        data.LabelsOfItem(i), gold.empty() ? -1 : gold[i],
        absl::MakeSpan(scratch));
  }
  SkillVoteParameters params(num_classes_, data.num_annotators(), 0.0);
  params.skill =
      AgreementWithReference(data, majority, 1.0 / num_classes_);
  params_ = std::move(params);

  FitReport report;
  report.iterations = 1;
  report.converged = true;
  report.seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  return report;
}

}  // namespace verity::models

#include "models/testing/posterior_checks.h"

#include <gtest/gtest.h>

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace verity::models::testing {

int32_t ItemsWhosePosteriorDependsOnLabelOrder(const TruthModel& model,
                                               const AnnotationMatrix& data) {
  const size_t k = static_cast<size_t>(data.num_classes());
  int32_t differing = 0;
  for (int32_t i = 0; i < data.num_items(); ++i) {
    const absl::Span<const AnnotationMatrix::Entry> labels = data.LabelsOfItem(i);
    const std::vector<AnnotationMatrix::Entry> reversed(labels.rbegin(), labels.rend());
    std::vector<double> forward(k), backward(k);
    model.ItemPosterior(labels, -1, absl::MakeSpan(forward));
    model.ItemPosterior(reversed, -1, absl::MakeSpan(backward));
    differing += forward == backward ? 0 : 1;
  }
  return differing;
}

void ExpectUniformConfusionBeforeAFit(const TruthModel& model) {
  const int32_t k = model.num_classes();
  const std::vector<double> confusion = model.AnnotatorConfusion(0);
  ASSERT_EQ(confusion.size(), static_cast<size_t>(k) * k);
  for (double v : confusion) EXPECT_DOUBLE_EQ(v, 1.0 / k);
}

void ExpectTheFirstIterationNeverConverges(TruthModel& model) {
  const absl::StatusOr<AnnotationMatrix> m =
      AnnotationMatrix::Build(2, 2, 2, {{0, 0, 0}, {0, 1, 0}, {1, 0, 1}, {1, 1, 0}});
  ASSERT_TRUE(m.ok()) << m.status();
  absl::StatusOr<FitReport> report = model.Fit(*m, {}, false);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->converged);
  EXPECT_EQ(report->iterations, 2);
}

}  // namespace verity::models::testing

// The assignment score: how much one more label from an annotator is expected to tell about
// an item's true class (ARCHITECTURE.md, "Assignment").
//
// With p the item's posterior over K classes and C the annotator's predicted confusion matrix
// (row k = true class, C[k][y] = P(label y | true k)):
//   P(y)  = Σ_k p_k C[k][y]                       (predictive distribution of the label)
//   gain  = H(p) − Σ_y P(y) H(p ∘ C[:, y] / P(y))  (expected entropy reduction, in nats)
// This is the mutual information between the true class and the label, so 0 ≤ gain ≤ H(p):
// H(p) is an upper bound for any annotator, which lets candidate search stop early.
//
// Pure functions, thread-safe. Spans: p has K entries, confusion K*K (row-major).
#ifndef VERITY_SERVER_STATE_INFORMATION_GAIN_H_
#define VERITY_SERVER_STATE_INFORMATION_GAIN_H_

#include "absl/types/span.h"

namespace verity::server {

// Shannon entropy in nats (0 log 0 = 0).
double Entropy(absl::Span<const double> p);

// Expected entropy reduction of p from one label drawn through `confusion`.
double ExpectedEntropyReduction(absl::Span<const double> p, absl::Span<const double> confusion);

// Probability that the label is the true class: Σ_k p_k C[k][k].
double ProbabilityCorrect(absl::Span<const double> p, absl::Span<const double> confusion);

}  // namespace verity::server

#endif  // VERITY_SERVER_STATE_INFORMATION_GAIN_H_

#include "server/state/information_gain.h"

#include <algorithm>
#include <cmath>

namespace verity::server {

double Entropy(absl::Span<const double> p) {
  double h = 0;
  for (double v : p) {
    if (v > 0) h -= v * std::log(v);
  }
  return h;
}

double ExpectedEntropyReduction(absl::Span<const double> p, absl::Span<const double> confusion) {
  const size_t k = p.size();
  // Σ_y P(y) H(p ∘ C[:, y] / P(y)) = −Σ_y Σ_k j_ky log(j_ky / P(y)), with j_ky = p_k C[k][y].
  double conditional = 0;
  for (size_t y = 0; y < k; ++y) {
    double py = 0;
    for (size_t c = 0; c < k; ++c) py += p[c] * confusion[c * k + y];
    if (py <= 0) continue;
    for (size_t c = 0; c < k; ++c) {
      const double joint = p[c] * confusion[c * k + y];
      if (joint > 0) conditional -= joint * std::log(joint / py);
    }
  }
  // Rounding can make the difference a hair negative for a useless annotator.
  return std::max(0.0, Entropy(p) - conditional);
}

double ProbabilityCorrect(absl::Span<const double> p, absl::Span<const double> confusion) {
  const size_t k = p.size();
  double correct = 0;
  for (size_t c = 0; c < k; ++c) correct += p[c] * confusion[c * k + c];
  return correct;
}

}  // namespace verity::server

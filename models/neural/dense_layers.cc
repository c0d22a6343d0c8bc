#include "models/neural/dense_layers.h"

#include <algorithm>

namespace verity::models::neural {

std::vector<double> ApplyLinear(const DenseLayer& layer, absl::Span<const double> input) {
  if (static_cast<int64_t>(input.size()) != layer.inputs) return {};
  std::vector<double> out(layer.bias);
  for (int64_t o = 0; o < layer.outputs; ++o) {
    const double* row = layer.weight.data() + o * layer.inputs;
    for (int64_t i = 0; i < layer.inputs; ++i) out[o] += row[i] * input[i];
  }
  return out;
}

std::vector<double> ApplyDenseLayers(absl::Span<const DenseLayer> layers,
                                     absl::Span<const double> input) {
  if (layers.empty()) return {};
  std::vector<double> x(input.begin(), input.end());
  for (const DenseLayer& layer : layers) {
    x = ApplyLinear(layer, x);
    if (x.empty()) return {};
    for (double& v : x) v = std::max(v, 0.0);
  }
  return x;
}

}  // namespace verity::models::neural

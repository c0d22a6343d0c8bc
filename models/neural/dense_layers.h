// DenseLayers: a feature encoder's layers exported from LibTorch to plain C++, so that a query
// can run the encoder on features it was never trained on (an annotator added after the fit)
// without calling LibTorch (neural_truth_model.h: queries never do).
//
// Each layer is y = ReLU(W x + b), as RowEncoderImpl's feature mode computes in eval mode
// (dropout is the identity there). Encoders with batch norm are not exported (crowd_net.h).
#ifndef VERITY_MODELS_NEURAL_DENSE_LAYERS_H_
#define VERITY_MODELS_NEURAL_DENSE_LAYERS_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace verity::models::neural {

struct DenseLayer {
  int64_t inputs = 0;
  int64_t outputs = 0;
  std::vector<double> weight;  // outputs x inputs, row-major
  std::vector<double> bias;    // outputs
};

// The encoder's output for `input` (layers.front().inputs values): each layer in turn, ReLU after
// every layer. Empty when `layers` is empty or `input` has the wrong size.
std::vector<double> ApplyDenseLayers(absl::Span<const DenseLayer> layers,
                                     absl::Span<const double> input);

// W x + b of one layer without the ReLU (the linear heads after an encoder, such as lia's
// competence layer). Empty when `input` has the wrong size.
std::vector<double> ApplyLinear(const DenseLayer& layer, absl::Span<const double> input);

}  // namespace verity::models::neural

#endif  // VERITY_MODELS_NEURAL_DENSE_LAYERS_H_

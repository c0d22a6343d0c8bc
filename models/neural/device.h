// Device selection for the neural models: "cpu", "cuda", "cuda:N" or "auto".
#ifndef VERITY_MODELS_NEURAL_DEVICE_H_
#define VERITY_MODELS_NEURAL_DEVICE_H_

#include <string_view>

#include <torch/torch.h>

#include "absl/status/statusor.h"

namespace verity::models::neural {

// The device `spec` names. "auto" is CUDA device 0 when CUDA is available, else the CPU.
// "cuda" or "cuda:N" when CUDA is not available (a CPU-only LibTorch, no driver, N out of
// range) falls back to the CPU and logs one line on stderr saying so. INVALID_ARGUMENT for
// any other spelling.
absl::StatusOr<torch::Device> ResolveDevice(std::string_view spec);

}  // namespace verity::models::neural

#endif  // VERITY_MODELS_NEURAL_DEVICE_H_

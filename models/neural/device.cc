#include "models/neural/device.h"

#include <cstdio>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace verity::models::neural {

absl::StatusOr<torch::Device> ResolveDevice(std::string_view spec) {
  const bool cuda_available = torch::cuda::is_available();
  if (spec == "cpu") return torch::Device(torch::kCPU);
  if (spec == "auto") {
    return cuda_available ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  }
  int index = 0;
  if (spec == "cuda") {
    index = 0;
  } else if (spec.substr(0, 5) == "cuda:" &&
             absl::SimpleAtoi(absl::string_view(spec.data() + 5, spec.size() - 5), &index) &&
             index >= 0) {
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "device must be cpu, cuda, cuda:N or auto, got \"", std::string(spec), "\""));
  }
  if (!cuda_available || index >= static_cast<int>(torch::cuda::device_count())) {
    std::fprintf(stderr, "event=device_fallback requested=%s device=cpu reason=\"%s\"\n",
                 std::string(spec).c_str(),
                 cuda_available ? "no such CUDA device" : "CUDA not available");
    return torch::Device(torch::kCPU);
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

}  // namespace verity::models::neural

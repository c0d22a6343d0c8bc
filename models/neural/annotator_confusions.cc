#include "models/neural/annotator_confusions.h"

#include <algorithm>
#include <cmath>

namespace verity::models::neural {

void AnnotatorConfusions::Assign(const torch::Tensor& log_q) {
  torch::NoGradGuard no_grad;
  torch::Tensor cpu = log_q.detach().to(torch::kCPU, torch::kDouble).contiguous();
  num_annotators_ = static_cast<int32_t>(cpu.size(0));
  k_ = static_cast<int32_t>(cpu.size(1));
  log_q_.assign(cpu.data_ptr<double>(), cpu.data_ptr<double>() + cpu.numel());
  population_ = PopulationLogConfusion(log_q_.data(), num_annotators_, k_);
}

std::vector<double> PopulationLogConfusion(const double* log_q, int32_t num_annotators, int32_t k) {
  const size_t kk = static_cast<size_t>(k) * k;
  std::vector<double> population(kk, num_annotators > 0 ? 0.0 : 1.0 / k);
  for (int32_t a = 0; a < num_annotators; ++a) {
    for (size_t c = 0; c < kk; ++c) population[c] += std::exp(log_q[a * kk + c]) / num_annotators;
  }
  for (double& v : population) v = std::log(std::max(v, 1e-300));
  return population;
}

void AnnotatorConfusions::Get(int32_t a, double* out) const {
  const size_t kk = static_cast<size_t>(k_) * k_;
  const double* src = a >= 0 && a < num_annotators_ ? log_q_.data() + a * kk : population_.data();
  std::copy(src, src + kk, out);
}

torch::Tensor IdentityLogits(int64_t rows, int64_t k, double diagonal) {
  return (torch::eye(k) * diagonal).unsqueeze(0).repeat({rows, 1, 1});
}

}  // namespace verity::models::neural

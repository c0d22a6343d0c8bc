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
  const size_t kk = static_cast<size_t>(k_) * k_;
  population_.assign(kk, num_annotators_ > 0 ? 0.0 : 1.0 / k_);
  for (int32_t a = 0; a < num_annotators_; ++a) {
    for (size_t c = 0; c < kk; ++c) population_[c] += std::exp(log_q_[a * kk + c]) / num_annotators_;
  }
  for (double& v : population_) v = std::log(std::max(v, 1e-300));
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

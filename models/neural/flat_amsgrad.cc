#include "models/neural/flat_amsgrad.h"

#include <cmath>
#include <stdexcept>
#include <utility>

#include <torch/version.h>

// torch >= 2.0 has a fused Adam kernel for CUDA tensors (one pass over the buffers instead of
// ten); only the CUDA builds (VERITY_CUDA_GRAPHS) are against such a torch.
#if defined(VERITY_CUDA_GRAPHS) && TORCH_VERSION_MAJOR >= 2
#define VERITY_FUSED_ADAM 1
#endif

namespace verity::models::neural {
namespace {

constexpr double kRowTableBeta1 = 0.0;  // see the constructor

}  // namespace

FlatAmsGrad::FlatAmsGrad(std::vector<torch::Tensor> parameters, double learning_rate,
                         bool on_device_step, const std::vector<RowEncoderImpl*>& row_tables,
                         double beta1, double beta2, double eps)
    : learning_rate_(learning_rate), beta1_(beta1), beta2_(beta2), eps_(eps) {
  // First, so that the tables stop requiring a gradient and stay out of the flat buffer. Their
  // rows get no first moment (beta1 = 0): a row used once in a thousand steps would, with lazy
  // moments, lose the momentum tail over which the dense update spreads its step (about
  // 1 / (1 - beta1) = 10 times the step itself, since AMSGrad's denominator does not decay);
  // without momentum the row moves by that total at once.
  for (RowEncoderImpl* encoder : row_tables) {
    row_tables_.push_back(std::make_unique<SparseRowAmsGrad>(*encoder, learning_rate,
                                                             kRowTableBeta1, beta2, eps));
  }
  torch::NoGradGuard no_grad;
  for (torch::Tensor& p : parameters) {
    if (p.requires_grad()) parameters_.push_back(std::move(p));
  }
  int64_t total = 0;
  for (const torch::Tensor& p : parameters_) {
    if (p.scalar_type() != torch::kFloat || p.device() != parameters_.front().device()) {
      throw std::invalid_argument("FlatAmsGrad: parameters must be float tensors on one device");
    }
    total += p.numel();
  }
  const torch::TensorOptions options =
      parameters_.empty() ? torch::TensorOptions(torch::kFloat)
                          : parameters_.front().options().requires_grad(false);
  flat_ = torch::empty({total}, options);
  grad_ = torch::zeros({total}, options);
  int64_t offset = 0;
  for (torch::Tensor& p : parameters_) {
    const int64_t n = p.numel();
    torch::Tensor slot = flat_.narrow(0, offset, n).view(p.sizes());
    slot.copy_(p);
    p.set_data(slot);
    p.mutable_grad() = grad_.narrow(0, offset, n).view(p.sizes());
    offset += n;
  }
  exp_avg_ = torch::zeros({total}, options);
  exp_avg_sq_ = torch::zeros({total}, options);
  max_exp_avg_sq_ = torch::zeros({total}, options);
  denom_ = torch::empty({total}, options);
  if (on_device_step) device_step_ = torch::zeros({}, options.dtype(torch::kFloat));
}

FlatAmsGrad::~FlatAmsGrad() {
  for (torch::Tensor& p : parameters_) p.mutable_grad() = torch::Tensor();
}

void FlatAmsGrad::ZeroGrad() {
  grad_.zero_();
  for (auto& table : row_tables_) table->ZeroGrad();
}

void FlatAmsGrad::Step() {
  torch::NoGradGuard no_grad;
  ++steps_;
  if (device_step_.defined()) {
    device_step_.add_(1);
    for (auto& table : row_tables_) table->Step(device_step_);
#ifdef VERITY_FUSED_ADAM
    if (flat_.is_cuda()) {
      // The same update in one kernel (the step count is read on the device).
      at::_fused_adam_({flat_}, {grad_}, {exp_avg_}, {exp_avg_sq_}, {max_exp_avg_sq_},
                       {device_step_}, learning_rate_, beta1_, beta2_, /*weight_decay=*/0.0, eps_,
                       /*amsgrad=*/true, /*maximize=*/false);
      return;
    }
#endif
  }
  // torch::optim::Adam's arithmetic, in the same order: the moments, then the update divided
  // by the bias-corrected root of the largest second moment.
  exp_avg_.mul_(beta1_).add_(grad_, 1 - beta1_);
  exp_avg_sq_.mul_(beta2_).addcmul_(grad_, grad_, 1 - beta2_);
  torch::max_out(max_exp_avg_sq_, exp_avg_sq_, max_exp_avg_sq_);
  if (device_step_.defined()) {
    // The bias corrections computed on the device.
    torch::Tensor bias_correction1 = 1 - torch::pow(beta1_, device_step_);
    torch::Tensor bias_correction2 = 1 - torch::pow(beta2_, device_step_);
    torch::sqrt_out(denom_, max_exp_avg_sq_).div_(torch::sqrt(bias_correction2)).add_(eps_);
    denom_.mul_(bias_correction1 / -learning_rate_);
    flat_.addcdiv_(exp_avg_, denom_);
    return;
  }
  for (auto& table : row_tables_) table->Step(steps_);
  const double bias_correction1 = 1 - std::pow(beta1_, static_cast<double>(steps_));
  const double bias_correction2 = 1 - std::pow(beta2_, static_cast<double>(steps_));
  torch::sqrt_out(denom_, max_exp_avg_sq_).div_(std::sqrt(bias_correction2)).add_(eps_);
  flat_.addcdiv_(exp_avg_, denom_, -learning_rate_ / bias_correction1);
}

}  // namespace verity::models::neural

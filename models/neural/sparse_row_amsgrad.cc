#include "models/neural/sparse_row_amsgrad.h"

#include <cmath>
#include <stdexcept>
#include <vector>

namespace verity::models::neural {

SparseRowAmsGrad::SparseRowAmsGrad(RowEncoderImpl& encoder, double learning_rate, double beta1,
                                   double beta2, double eps)
    : encoder_(encoder),
      learning_rate_(learning_rate),
      beta1_(beta1),
      beta2_(beta2),
      eps_(eps) {
  if (encoder.feature_dim() != 0) {
    throw std::invalid_argument("SparseRowAmsGrad: the encoder projects features, it has no table");
  }
  torch::NoGradGuard no_grad;
  table_ = encoder.table();
  grad_sum_ = torch::zeros_like(table_);
  exp_avg_ = torch::zeros_like(table_);
  exp_avg_sq_ = torch::zeros_like(table_);
  max_exp_avg_sq_ = torch::zeros_like(table_);
  encoder_.SetSparseTraining(true);
}

SparseRowAmsGrad::~SparseRowAmsGrad() { encoder_.SetSparseTraining(false); }

void SparseRowAmsGrad::ZeroGrad() { encoder_.gathers().clear(); }

bool SparseRowAmsGrad::BeginUpdate(RowUpdate& update) {
  std::vector<torch::Tensor> rows, grads;
  for (const RowEncoderImpl::Gather& g : encoder_.gathers()) {
    if (!g.leaf.grad().defined()) continue;  // the loss did not use this forward pass
    rows.push_back(g.rows);
    grads.push_back(g.leaf.grad());
  }
  encoder_.gathers().clear();
  if (rows.empty()) return false;
  torch::NoGradGuard no_grad;
  update.rows = rows.size() == 1 ? rows.front() : torch::cat(rows);
  // Sum the gradients of each row (a row can be used several times in a step), then read the
  // sums back at every use: the duplicates of a row compute, and store, the same values.
  grad_sum_.index_add_(0, update.rows, grads.size() == 1 ? grads.front() : torch::cat(grads));
  const torch::Tensor grad = grad_sum_.index_select(0, update.rows);
  // FlatAmsGrad's arithmetic, in the same order (flat_amsgrad.cc).
  update.exp_avg = exp_avg_.index_select(0, update.rows).mul_(beta1_).add_(grad, 1 - beta1_);
  torch::Tensor exp_avg_sq =
      exp_avg_sq_.index_select(0, update.rows).mul_(beta2_).addcmul_(grad, grad, 1 - beta2_);
  update.max_exp_avg_sq = torch::max(max_exp_avg_sq_.index_select(0, update.rows), exp_avg_sq);
  exp_avg_.index_copy_(0, update.rows, update.exp_avg);
  exp_avg_sq_.index_copy_(0, update.rows, exp_avg_sq);
  max_exp_avg_sq_.index_copy_(0, update.rows, update.max_exp_avg_sq);
  update.weights = table_.index_select(0, update.rows);
  return true;
}

void SparseRowAmsGrad::EndUpdate(const RowUpdate& update) {
  torch::NoGradGuard no_grad;
  table_.index_copy_(0, update.rows, update.weights);
  grad_sum_.index_fill_(0, update.rows, 0.0);
}

void SparseRowAmsGrad::Step(int64_t step) {
  RowUpdate u;
  if (!BeginUpdate(u)) return;
  torch::NoGradGuard no_grad;
  const double bias_correction1 = 1 - std::pow(beta1_, static_cast<double>(step));
  const double bias_correction2 = 1 - std::pow(beta2_, static_cast<double>(step));
  torch::Tensor denom = torch::sqrt(u.max_exp_avg_sq).div_(std::sqrt(bias_correction2)).add_(eps_);
  u.weights.addcdiv_(u.exp_avg, denom, -learning_rate_ / bias_correction1);
  EndUpdate(u);
}

void SparseRowAmsGrad::Step(const torch::Tensor& device_step) {
  RowUpdate u;
  if (!BeginUpdate(u)) return;
  torch::NoGradGuard no_grad;
  torch::Tensor bias_correction1 = 1 - torch::pow(beta1_, device_step);
  torch::Tensor bias_correction2 = 1 - torch::pow(beta2_, device_step);
  torch::Tensor denom =
      torch::sqrt(u.max_exp_avg_sq).div_(torch::sqrt(bias_correction2)).add_(eps_);
  denom.mul_(bias_correction1 / -learning_rate_);
  u.weights.addcdiv_(u.exp_avg, denom);
  EndUpdate(u);
}

}  // namespace verity::models::neural

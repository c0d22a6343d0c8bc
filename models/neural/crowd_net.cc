#include "models/neural/crowd_net.h"

#include <algorithm>
#include <string>

#include "absl/strings/match.h"

namespace verity::models::neural {

RowEncoderImpl::RowEncoderImpl(int64_t num_rows, int64_t dim, int64_t feature_dim,
                               FeatureEncoderOptions feature_options)
    : feature_dim_(feature_dim), dropout_(feature_options.dropout) {
  if (feature_dim_ == 0) {
    embedding_ = register_module("embedding", torch::nn::Embedding(num_rows, dim));
    return;
  }
  for (int64_t l = 0; l < std::max<int64_t>(1, feature_options.layers); ++l) {
    layers_.push_back(register_module(l == 0 ? std::string("projection") : "layer" + std::to_string(l),
                                      torch::nn::Linear(l == 0 ? feature_dim : dim, dim)));
    if (feature_options.batch_norm) {
      norms_.push_back(register_module("norm" + std::to_string(l), torch::nn::BatchNorm1d(dim)));
    }
  }
  features_ = register_buffer("features", torch::zeros({num_rows, feature_dim}));
}

torch::Tensor RowEncoderImpl::forward(const torch::Tensor& rows) {
  // The same rows as embedding_->forward, but with index_select, whose backward (an index_add
  // into zeros) never waits for the device: a training step stays capturable in a CUDA graph.
  if (feature_dim_ == 0) {
    if (sparse_training_ && torch::GradMode::is_enabled()) {
      torch::Tensor leaf = embedding_->weight.index_select(0, rows).detach().requires_grad_(true);
      gathers_.push_back({rows, leaf});
      return leaf;
    }
    return embedding_->weight.index_select(0, rows);
  }
  torch::Tensor x = features_.index_select(0, rows);
  for (size_t l = 0; l < layers_.size(); ++l) {
    x = layers_[l]->forward(x);
    if (!norms_.empty()) x = norms_[l]->forward(x);
    x = torch::relu(x);
    if (dropout_ > 0) x = torch::dropout(x, dropout_, is_training());
  }
  return x;
}

void RowEncoderImpl::SetSparseTraining(bool on) {
  sparse_training_ = on && feature_dim_ == 0;
  gathers_.clear();
  if (feature_dim_ == 0) embedding_->weight.requires_grad_(!sparse_training_);
}

torch::Tensor RowEncoderImpl::table() const {
  return feature_dim_ == 0 ? embedding_->weight : torch::Tensor();
}

std::vector<DenseLayer> RowEncoderImpl::ExportDenseLayers() const {
  std::vector<DenseLayer> out;
  if (feature_dim_ == 0 || !norms_.empty()) return out;
  for (const torch::nn::Linear& linear : layers_) {
    DenseLayer layer;
    layer.outputs = linear->weight.size(0);
    layer.inputs = linear->weight.size(1);
    layer.weight = TensorToVector(linear->weight);
    layer.bias = TensorToVector(linear->bias);
    out.push_back(std::move(layer));
  }
  return out;
}

void RowEncoderImpl::SetFeatures(const torch::Tensor& features) {
  torch::NoGradGuard no_grad;
  const int64_t rows = std::min(features.size(0), features_.size(0));
  features_.narrow(0, 0, rows).copy_(features.narrow(0, 0, rows).to(features_.device()));
}

std::vector<double> TensorToVector(const torch::Tensor& t) {
  torch::Tensor cpu = t.detach().to(torch::kCPU, torch::kDouble).contiguous();
  return std::vector<double>(cpu.data_ptr<double>(), cpu.data_ptr<double>() + cpu.numel());
}

torch::nn::Sequential MakeMlp(int64_t in, int64_t hidden, int64_t out, int layers) {
  torch::nn::Sequential mlp;
  int64_t width = in;
  for (int l = 0; l + 1 < layers; ++l) {
    mlp->push_back(torch::nn::Linear(width, hidden));
    mlp->push_back(torch::nn::ReLU());
    width = hidden;
  }
  mlp->push_back(torch::nn::Linear(width, out));
  return mlp;
}

void CopyOverlappingParameters(torch::nn::Module& from, torch::nn::Module& to) {
  torch::NoGradGuard no_grad;
  auto copy = [](const torch::OrderedDict<std::string, torch::Tensor>& source,
                 torch::OrderedDict<std::string, torch::Tensor>& target) {
    for (auto& item : target) {
      const std::string& key = item.key();
      if (key == "features" || absl::EndsWith(key, ".features")) continue;  // inputs
      const torch::Tensor* old = source.find(key);
      if (old == nullptr) continue;
      torch::Tensor& now = item.value();
      if (old->sizes() == now.sizes()) {
        now.copy_(old->to(now.device()));
        continue;
      }
      if (old->dim() != now.dim() || old->dim() == 0) continue;
      bool rest_equal = true;
      for (int64_t d = 1; d < old->dim(); ++d) rest_equal &= old->size(d) == now.size(d);
      if (!rest_equal) continue;
      const int64_t rows = std::min(old->size(0), now.size(0));
      now.narrow(0, 0, rows).copy_(old->narrow(0, 0, rows).to(now.device()));
    }
  };
  auto from_params = from.named_parameters();
  auto to_params = to.named_parameters();
  copy(from_params, to_params);
  auto from_buffers = from.named_buffers();
  auto to_buffers = to.named_buffers();
  copy(from_buffers, to_buffers);
}

}  // namespace verity::models::neural

#include "models/neural/conal.h"

#include <algorithm>
#include <cmath>

#include "models/neural/annotator_confusions.h"

namespace verity::models::neural {
namespace {

class ConalNet : public CrowdNet {
 public:
  ConalNet(int32_t num_items, int32_t num_annotators, int32_t k, int64_t feature_dim, int64_t annotator_feature_dim,
           const TruthModelOptions::Neural& options)
      : lambda_(options.conal_lambda) {
    const int64_t a = std::max(1, num_annotators);
    const double diagonal = std::log(4.0 * (k - 1));  // 0.8 on the diagonal
    InitItems(num_items, options.embedding_dim, feature_dim);
    classifier_ = register_module("classifier", MakeMlp(options.embedding_dim, options.hidden_units, k, 2));
    instance_ = register_module("instance", MakeMlp(options.embedding_dim, options.hidden_units, options.embedding_dim, 2));
    InitAnnotators(a, options.embedding_dim, annotator_feature_dim);
    common_ = register_parameter("common", IdentityLogits(1, k, diagonal).squeeze(0));
    individual_ = register_parameter("individual", IdentityLogits(a, k, diagonal));
  }
  torch::Tensor LogPrior(const torch::Tensor& items) override {
    return torch::log_softmax(classifier_->forward(items_->forward(items)), 1);
  }
  torch::Tensor InstanceVectors(const torch::Tensor& items) {
    return torch::nn::functional::normalize(instance_->forward(items_->forward(items)),
                                            torch::nn::functional::NormalizeFuncOptions().dim(1));
  }
  torch::Tensor AnnotatorVectors(const torch::Tensor& annotators) {
    return torch::nn::functional::normalize(annotators_->forward(annotators),
                                            torch::nn::functional::NormalizeFuncOptions().dim(1));
  }
  torch::Tensor LogConfusion(const torch::Tensor& items, const torch::Tensor& annotators) override {
    torch::Tensor omega =
        torch::sigmoid((InstanceVectors(items) * AnnotatorVectors(annotators)).sum(1)).view({-1, 1, 1});
    torch::Tensor mixed = omega * torch::softmax(common_, 1).unsqueeze(0) +
                          (1 - omega) * torch::softmax(individual_.index_select(0, annotators), 2);
    return torch::log(mixed.clamp_min(1e-12));
  }
  torch::Tensor Regularizer() override {
    if (lambda_ == 0) return torch::zeros({}, common_.options());
    return lambda_ * (individual_ - common_.unsqueeze(0)).pow(2).sum();
  }
  torch::Tensor CommonProbabilities() { return torch::softmax(common_, 1); }
  torch::Tensor IndividualProbabilities() { return torch::softmax(individual_, 2); }

 private:
  double lambda_;
  torch::nn::Sequential classifier_{nullptr}, instance_{nullptr};
  torch::Tensor common_, individual_;
};

}  // namespace

std::shared_ptr<CrowdNet> ConalModel::MakeNet(int32_t num_items, int32_t num_annotators) const {
  return std::make_shared<ConalNet>(num_items, num_annotators, num_classes(), item_feature_dim(), annotator_feature_dim(), options().neural);
}

void ConalModel::ExportTables(CrowdNet& net) {
  torch::NoGradGuard no_grad;
  auto& conal = static_cast<ConalNet&>(net);
  dim_ = options().neural.embedding_dim;
  torch::Tensor items = torch::arange(static_cast<int64_t>(fitted_items()), torch::kLong);
  torch::Tensor vectors = conal.InstanceVectors(items);
  item_vectors_ = TensorToVector(vectors);
  mean_item_vector_ = fitted_items() > 0
                          ? TensorToVector(torch::nn::functional::normalize(
                                vectors.mean(0, /*keepdim=*/true),
                                torch::nn::functional::NormalizeFuncOptions().dim(1)))
                          : std::vector<double>(dim_, 0.0);
  annotator_vectors_ = TensorToVector(
      conal.AnnotatorVectors(torch::arange(static_cast<int64_t>(fitted_annotators()), torch::kLong)));
  common_ = TensorToVector(conal.CommonProbabilities());
  individual_ = TensorToVector(conal.IndividualProbabilities().narrow(0, 0, fitted_annotators()));
}

void ConalModel::LogConfusion(int32_t item, int32_t annotator, double* out) const {
  const int32_t k = num_classes();
  const size_t kk = static_cast<size_t>(k) * k;
  if (annotator < 0 || annotator >= fitted_annotators()) {
    for (size_t c = 0; c < kk; ++c) out[c] = std::log(std::max(common_[c], 1e-12));
    return;
  }
  const double* v = item >= 0 && item < fitted_items() ? item_vectors_.data() + static_cast<size_t>(item) * dim_
                                                       : mean_item_vector_.data();
  const double* u = annotator_vectors_.data() + static_cast<size_t>(annotator) * dim_;
  double dot = 0;
  for (int32_t d = 0; d < dim_; ++d) dot += u[d] * v[d];
  const double omega = 1.0 / (1.0 + std::exp(-dot));
  const double* own = individual_.data() + static_cast<size_t>(annotator) * kk;
  for (size_t c = 0; c < kk; ++c) out[c] = std::log(std::max(omega * common_[c] + (1 - omega) * own[c], 1e-12));
}

}  // namespace verity::models::neural

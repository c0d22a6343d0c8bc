#include "models/neural/conal.h"

#include <algorithm>
#include <cmath>

#include "models/neural/annotator_confusions.h"

namespace verity::models::neural {
ConalNet::ConalNet(int32_t num_items, int32_t num_annotators, int32_t k, int64_t feature_dim,
                   int64_t annotator_feature_dim, const TruthModelOptions::Neural& options)
    : lambda_(feature_dim > 0 || annotator_feature_dim > 0 ? options.conal_lambda
                                                           : options.featureless_conal_lambda) {
  const int64_t a = std::max(1, num_annotators);
  const double diagonal = std::log(4.0 * (k - 1));  // 0.8 on the diagonal
  InitItems(num_items, options.embedding_dim, feature_dim);
  classifier_ = register_module("classifier", MakeMlp(options.embedding_dim, options.hidden_units, k, 2));
  instance_ = register_module("instance", MakeMlp(options.embedding_dim, options.hidden_units, options.embedding_dim, 2));
  InitAnnotators(a, options.embedding_dim, annotator_feature_dim);
  common_ = register_parameter("common", IdentityLogits(1, k, diagonal).squeeze(0));
  individual_ = register_parameter("individual", IdentityLogits(a, k, diagonal));
}

torch::Tensor ConalNet::LogPrior(const torch::Tensor& items) {
  return torch::log_softmax(classifier_->forward(items_->forward(items)), 1);
}

torch::Tensor ConalNet::InstanceVectors(const torch::Tensor& items) {
  return InstanceVectorsOf(items_->forward(items));
}

torch::Tensor ConalNet::InstanceVectorsOf(const torch::Tensor& item_encodings) {
  return torch::nn::functional::normalize(instance_->forward(item_encodings),
                                          torch::nn::functional::NormalizeFuncOptions().dim(1));
}

torch::Tensor ConalNet::AnnotatorVectors(const torch::Tensor& annotators) {
  return torch::nn::functional::normalize(annotators_->forward(annotators),
                                          torch::nn::functional::NormalizeFuncOptions().dim(1));
}

torch::Tensor ConalNet::Omega(const torch::Tensor& item_encodings, const torch::Tensor& annotators) {
  return torch::sigmoid((InstanceVectorsOf(item_encodings) * AnnotatorVectors(annotators)).sum(1));
}

torch::Tensor ConalNet::LogNoisyLabel(const torch::Tensor& items, const torch::Tensor& annotators) {
  torch::Tensor encodings = items_->forward(items);                      // B x D
  torch::Tensor f = torch::softmax(classifier_->forward(encodings), 1);  // B x K
  torch::Tensor common = f.matmul(common_);                              // B x K
  torch::Tensor own = torch::bmm(f.unsqueeze(1), individual_.index_select(0, annotators)).squeeze(1);
  torch::Tensor omega = Omega(encodings, annotators).unsqueeze(1);
  return torch::log_softmax(omega * common + (1 - omega) * own, 1);
}

torch::Tensor ConalNet::LogConfusion(const torch::Tensor& items, const torch::Tensor& annotators) {
  torch::Tensor omega = Omega(items_->forward(items), annotators).view({-1, 1, 1});
  return torch::log_softmax(omega * common_.unsqueeze(0) + (1 - omega) * individual_.index_select(0, annotators), 2);
}

// As in the authors' code the distance is rewarded, so that the common confusion becomes what
// the individual ones are not (W_g and W_r start equal, and while they are, ω gets no
// gradient). It is taken between row-centred logits: a constant added to a row changes no
// probability, and rewarding it would only make the logits drift. The small constant keeps the
// gradient finite where W_r = W_g. The mean over annotators, not the paper's sum: conal.h.
torch::Tensor ConalNet::Regularizer() {
  if (lambda_ == 0) return torch::Tensor();
  torch::Tensor difference = individual_ - common_.unsqueeze(0);
  difference = difference - difference.mean(2, /*keepdim=*/true);
  return -lambda_ * (difference.pow(2).sum({1, 2}) + 1e-12).sqrt().mean();
}

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
  common_ = TensorToVector(conal.common());
  individual_ = TensorToVector(conal.individual().narrow(0, 0, fitted_annotators()));
  // An annotator never seen: the mean of the fitted annotators' confusions on the mean item.
  const int32_t k = num_classes();
  const size_t kk = static_cast<size_t>(k) * k;
  std::vector<double> fitted(static_cast<size_t>(fitted_annotators()) * kk);
  for (int32_t a = 0; a < fitted_annotators(); ++a) MixedLogConfusion(-1, a, fitted.data() + a * kk);
  population_ = PopulationLogConfusion(fitted.data(), fitted_annotators(), k);
  if (fitted_annotators() == 0) MixedLogConfusion(-1, -1, population_.data());  // softmax(W_g)
}

void ConalModel::LogConfusion(int32_t item, int32_t annotator, double* out) const {
  if (annotator < 0 || annotator >= fitted_annotators()) {
    std::copy(population_.begin(), population_.end(), out);
    return;
  }
  MixedLogConfusion(item, annotator, out);
}

void ConalModel::MixedLogConfusion(int32_t item, int32_t annotator, double* out) const {
  const int32_t k = num_classes();
  const size_t kk = static_cast<size_t>(k) * k;
  double omega = 1.0;  // an annotator outside the fit: the common confusion alone
  const double* own = common_.data();
  if (annotator >= 0 && annotator < fitted_annotators()) {
    const double* v = item >= 0 && item < fitted_items() ? item_vectors_.data() + static_cast<size_t>(item) * dim_
                                                         : mean_item_vector_.data();
    const double* u = annotator_vectors_.data() + static_cast<size_t>(annotator) * dim_;
    double dot = 0;
    for (int32_t d = 0; d < dim_; ++d) dot += u[d] * v[d];
    omega = 1.0 / (1.0 + std::exp(-dot));
    own = individual_.data() + static_cast<size_t>(annotator) * kk;
  }
  for (size_t c = 0; c < kk; ++c) out[c] = omega * common_[c] + (1 - omega) * own[c];
  for (int32_t row = 0; row < k; ++row) {
    double* logits = out + static_cast<size_t>(row) * k;
    const double m = *std::max_element(logits, logits + k);
    double sum = 0;
    for (int32_t y = 0; y < k; ++y) sum += std::exp(logits[y] - m);
    const double norm = m + std::log(sum);
    for (int32_t y = 0; y < k; ++y) logits[y] -= norm;
  }
}

}  // namespace verity::models::neural

#include "models/neural/crowdlayer.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

namespace verity::models::neural {
namespace {

// The scale of mw's identity start (crowdlayer.h): 1 + ln(K - 1).
double IdentityScale(int64_t k) { return 1.0 + std::log(static_cast<double>(k - 1)); }

class CrowdLayerNet : public CrowdNet {
 public:
  CrowdLayerNet(int32_t num_items, int32_t num_annotators, int32_t k, int64_t feature_dim,
                const TruthModelOptions::Neural& options)
      : k_(k),
        matrix_(options.crowdlayer_variant == "mw"),
        scale_(options.crowdlayer_variant == "vw" || options.crowdlayer_variant == "vw+b"),
        bias_(options.crowdlayer_variant == "vb" || options.crowdlayer_variant == "vw+b") {
    const int64_t a = std::max(1, num_annotators);
    InitItems(num_items, options.embedding_dim, feature_dim);
    classifier_ = register_module("classifier", MakeMlp(options.embedding_dim, options.hidden_units, k, 2));
    if (matrix_) weights_ = register_parameter("weights", (torch::eye(k) * IdentityScale(k)).unsqueeze(0).repeat({a, 1, 1}));
    if (scale_) scales_ = register_parameter("scales", torch::ones({a, k}));
    if (bias_) biases_ = register_parameter("biases", torch::zeros({a, k}));
  }
  torch::Tensor LogPrior(const torch::Tensor& items) override {
    return torch::log_softmax(classifier_->forward(items_->forward(items)), 1);
  }
  // The crowd layers of `annotators` applied to `sigma` (B x K or B x R x K): label logits.
  torch::Tensor Layer(const torch::Tensor& annotators, const torch::Tensor& sigma) {
    if (matrix_) {
      torch::Tensor w = weights_.index_select(0, annotators);  // B x K(label) x K(class)
      return sigma.dim() == 2 ? torch::bmm(w, sigma.unsqueeze(2)).squeeze(2)
                              : torch::bmm(sigma, w.transpose(1, 2));  // B x R x K
    }
    torch::Tensor out = sigma;
    const bool rows = sigma.dim() == 3;
    if (scale_) {
      torch::Tensor s = scales_.index_select(0, annotators);
      out = out * (rows ? s.unsqueeze(1) : s);
    }
    if (bias_) {
      torch::Tensor b = biases_.index_select(0, annotators);
      out = out + (rows ? b.unsqueeze(1) : b);
    }
    return out;
  }
  torch::Tensor LogNoisyLabel(const torch::Tensor& items, const torch::Tensor& annotators) override {
    return torch::log_softmax(Layer(annotators, torch::exp(LogPrior(items))), 1);
  }
  // Q_r[k, ·] = softmax(layer_r(σ̄_k)) (see crowdlayer.h), for the σ̄ last set by
  // SetTypicalOutputs (the one-hot classes until then).
  torch::Tensor LogConfusion(const torch::Tensor&, const torch::Tensor& annotators) override {
    torch::Tensor typical = typical_.defined() ? typical_ : torch::eye(k_, weights_or_any().options());
    return torch::log_softmax(
        Layer(annotators, typical.to(weights_or_any().device()).unsqueeze(0).expand({annotators.size(0), k_, k_})), 2);
  }
  // σ̄ (K x K, row k = σ̄_k), computed from the classifier's outputs on the fitted items.
  void SetTypicalOutputs(torch::Tensor typical) { typical_ = std::move(typical); }
  bool matrix() const { return matrix_; }
  bool scale() const { return scale_; }
  bool bias() const { return bias_; }
  const torch::Tensor& weights() const { return weights_; }
  const torch::Tensor& scales() const { return scales_; }
  const torch::Tensor& biases() const { return biases_; }

 private:
  const torch::Tensor& weights_or_any() const {
    return matrix_ ? weights_ : (scale_ ? scales_ : biases_);
  }
  int64_t k_;
  bool matrix_, scale_, bias_;
  torch::nn::Sequential classifier_{nullptr};
  torch::Tensor weights_, scales_, biases_;
  torch::Tensor typical_;  // not a buffer: recomputed from the parameters by every export
};

// σ̄_k = Σ_i σ_i[k] σ_i / Σ_i σ_i[k] for the rows of `sigma` (items x K); the identity without
// items (or for a class no item has mass on).
torch::Tensor TypicalOutputs(const torch::Tensor& sigma, int64_t k) {
  if (sigma.size(0) == 0) return torch::eye(k, sigma.options());
  torch::Tensor mass = sigma.sum(0).unsqueeze(1);  // K x 1
  torch::Tensor typical = sigma.t().matmul(sigma) / mass.clamp_min(1e-30);
  return torch::where(mass > 1e-12, typical, torch::eye(k, sigma.options()));
}

}  // namespace

std::shared_ptr<CrowdNet> CrowdLayerModel::MakeNet(int32_t num_items, int32_t num_annotators) const {
  return std::make_shared<CrowdLayerNet>(num_items, num_annotators, num_classes(), item_feature_dim(), options().neural);
}

void CrowdLayerModel::ExportTables(CrowdNet& net) {
  torch::NoGradGuard no_grad;
  auto& crowd = static_cast<CrowdLayerNet&>(net);
  const int64_t k = num_classes();
  std::vector<double> sigma;
  sigma.reserve(static_cast<size_t>(fitted_items()) * k);
  for (int32_t i = 0; i < fitted_items(); ++i) {
    const double* log_prior = LogPriorOf(i);
    for (int64_t c = 0; c < k; ++c) sigma.push_back(std::exp(log_prior[c]));
  }
  torch::Tensor sigma_tensor =
      torch::from_blob(sigma.data(), {static_cast<int64_t>(fitted_items()), k}, torch::kDouble).clone();
  crowd.SetTypicalOutputs(TypicalOutputs(sigma_tensor, k).to(torch::kFloat));
  torch::Tensor annotators = torch::arange(static_cast<int64_t>(fitted_annotators()), torch::kLong);
  torch::Tensor none = torch::zeros({fitted_annotators()}, torch::kLong);
  confusions_.Assign(net.LogConfusion(none, annotators));
  auto rows = [&](const torch::Tensor& t) { return TensorToVector(t.narrow(0, 0, fitted_annotators())); };
  weights_ = crowd.matrix() ? rows(crowd.weights()) : std::vector<double>();
  scales_ = crowd.scale() ? rows(crowd.scales()) : std::vector<double>();
  biases_ = crowd.bias() ? rows(crowd.biases()) : std::vector<double>();
}

std::vector<double> CrowdLayerModel::TrainedLabelDistribution(int32_t annotator,
                                                              absl::Span<const double> sigma) const {
  const int32_t k = num_classes();
  std::vector<double> logits(k, 0.0);
  if (!has_parameters() || fitted_annotators() == 0) return std::vector<double>(k, 1.0 / k);
  const bool known = annotator >= 0 && annotator < fitted_annotators();
  // A parameter of annotator `annotator`'s layer, or the annotators' mean.
  auto parameter = [&](const std::vector<double>& table, size_t per_annotator, size_t index) {
    if (known) return table[annotator * per_annotator + index];
    double mean = 0;
    for (int32_t a = 0; a < fitted_annotators(); ++a) mean += table[a * per_annotator + index] / fitted_annotators();
    return mean;
  };
  const size_t kk = static_cast<size_t>(k) * k;
  for (int32_t y = 0; y < k; ++y) {
    if (!weights_.empty()) {
      for (int32_t c = 0; c < k; ++c) logits[y] += parameter(weights_, kk, y * k + c) * sigma[c];
    } else {
      logits[y] = sigma[y] * (scales_.empty() ? 1.0 : parameter(scales_, k, y)) +
                  (biases_.empty() ? 0.0 : parameter(biases_, k, y));
    }
  }
  const double m = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (double& v : logits) sum += (v = std::exp(v - m));
  for (double& v : logits) v /= sum;
  return logits;
}

void CrowdLayerModel::LogConfusion(int32_t, int32_t annotator, double* out) const {
  confusions_.Get(annotator, out);
}

}  // namespace verity::models::neural

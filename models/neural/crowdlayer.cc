#include "models/neural/crowdlayer.h"

#include <algorithm>
#include <string>

namespace verity::models::neural {
namespace {

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
    if (matrix_) weights_ = register_parameter("weights", torch::eye(k).unsqueeze(0).repeat({a, 1, 1}));
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
  torch::Tensor LogConfusion(const torch::Tensor&, const torch::Tensor& annotators) override {
    torch::Tensor one_hot = torch::eye(k_, weights_or_any().options())
                                .unsqueeze(0)
                                .expand({annotators.size(0), k_, k_});
    return torch::log_softmax(Layer(annotators, one_hot), 2);
  }

 private:
  const torch::Tensor& weights_or_any() const {
    return matrix_ ? weights_ : (scale_ ? scales_ : biases_);
  }
  int64_t k_;
  bool matrix_, scale_, bias_;
  torch::nn::Sequential classifier_{nullptr};
  torch::Tensor weights_, scales_, biases_;
};

}  // namespace

std::shared_ptr<CrowdNet> CrowdLayerModel::MakeNet(int32_t num_items, int32_t num_annotators) const {
  return std::make_shared<CrowdLayerNet>(num_items, num_annotators, num_classes(), item_feature_dim(), options().neural);
}

void CrowdLayerModel::ExportTables(CrowdNet& net) {
  torch::NoGradGuard no_grad;
  torch::Tensor annotators = torch::arange(static_cast<int64_t>(fitted_annotators()), torch::kLong);
  torch::Tensor none = torch::zeros({fitted_annotators()}, torch::kLong);
  confusions_.Assign(net.LogConfusion(none, annotators));
}

void CrowdLayerModel::LogConfusion(int32_t, int32_t annotator, double* out) const {
  confusions_.Get(annotator, out);
}

}  // namespace verity::models::neural

#include "models/neural/trace_reg.h"

#include <algorithm>
#include <cmath>

namespace verity::models::neural {
namespace {

class TraceRegNet : public CrowdNet {
 public:
  TraceRegNet(int32_t num_items, int32_t num_annotators, int32_t k, int64_t feature_dim,
              const TruthModelOptions::Neural& options)
      : lambda_(options.trace_lambda) {
    InitItems(num_items, options.embedding_dim, feature_dim);
    classifier_ = register_module("classifier", MakeMlp(options.embedding_dim, options.hidden_units, k, 2));
    // Near the identity: 0.8 on the diagonal.
    confusion_ = register_parameter(
        "confusion", IdentityLogits(std::max(1, num_annotators), k, std::log(4.0 * (k - 1))));
  }
  torch::Tensor LogPrior(const torch::Tensor& items) override {
    return torch::log_softmax(classifier_->forward(items_->forward(items)), 1);
  }
  torch::Tensor LogConfusion(const torch::Tensor&, const torch::Tensor& annotators) override {
    return torch::log_softmax(confusion_.index_select(0, annotators), 2);
  }
  torch::Tensor Regularizer() override {
    if (lambda_ == 0) return torch::Tensor();
    return lambda_ * torch::softmax(confusion_, 2).diagonal(0, 1, 2).sum(1).mean();
  }
  torch::Tensor AllLogConfusions() { return torch::log_softmax(confusion_, 2); }

 private:
  double lambda_;
  torch::nn::Sequential classifier_{nullptr};
  torch::Tensor confusion_;
};

}  // namespace

std::shared_ptr<CrowdNet> TraceRegModel::MakeNet(int32_t num_items, int32_t num_annotators) const {
  return std::make_shared<TraceRegNet>(num_items, num_annotators, num_classes(), item_feature_dim(), options().neural);
}

void TraceRegModel::ExportTables(CrowdNet& net) {
  torch::Tensor all = static_cast<TraceRegNet&>(net).AllLogConfusions();
  confusions_.Assign(all.narrow(0, 0, std::min<int64_t>(all.size(0), fitted_annotators())));
}

void TraceRegModel::LogConfusion(int32_t, int32_t annotator, double* out) const {
  confusions_.Get(annotator, out);
}

}  // namespace verity::models::neural

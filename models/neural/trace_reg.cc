#include "models/neural/trace_reg.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace verity::models::neural {

TraceRegNet::TraceRegNet(int32_t num_items, int32_t num_annotators, int32_t k, int64_t feature_dim,
                         const TruthModelOptions::Neural& options, Parameterisation parameterisation)
    : parameterisation_(parameterisation) {
  InitItems(num_items, options.embedding_dim, feature_dim);
  const int64_t annotators = std::max(1, num_annotators);
  trace_weights_ = register_buffer("trace_weights", torch::full({annotators}, options.trace_lambda));
  classifier_ = register_module("classifier", MakeMlp(options.embedding_dim, options.hidden_units, k, 2));
  // Distinct names, so that load() knows which kind a stored net holds.
  if (parameterisation_ == Parameterisation::kProbabilities) {
    confusion_ = register_parameter(kProbabilitiesName, torch::eye(k).unsqueeze(0).repeat({annotators, 1, 1}));
  } else {
    const double diagonal = std::log(kLogitStartDiagonal * (k - 1) / (1 - kLogitStartDiagonal));
    confusion_ = register_parameter(kLogitsName, IdentityLogits(annotators, k, diagonal));
  }
}

torch::Tensor TraceRegNet::LogPrior(const torch::Tensor& items) {
  return torch::log_softmax(classifier_->forward(items_->forward(items)), 1);
}

torch::Tensor TraceRegNet::Confusions() const {
  if (parameterisation_ == Parameterisation::kLogits) return torch::softmax(confusion_, 2);
  // The projection keeps confusion_ on the simplex; the division only matters within a step.
  return confusion_ / confusion_.sum(2, /*keepdim=*/true);
}

torch::Tensor TraceRegNet::LogConfusion(const torch::Tensor&, const torch::Tensor& annotators) {
  if (parameterisation_ == Parameterisation::kLogits) {
    return torch::log_softmax(confusion_.index_select(0, annotators), 2);
  }
  return torch::log(Confusions().index_select(0, annotators).clamp_min(kMinConfusion));
}

torch::Tensor TraceRegNet::LogNoisyLabel(const torch::Tensor& items, const torch::Tensor& annotators) {
  torch::Tensor p = torch::exp(LogPrior(items)).unsqueeze(1);                     // B x 1 x K
  torch::Tensor noisy = torch::bmm(p, Confusions().index_select(0, annotators));  // B x 1 x K
  return torch::log(noisy.squeeze(1).clamp_min(1e-30));
}

torch::Tensor TraceRegNet::Regularizer() {
  return (trace_weights_ * Confusions().diagonal(0, 1, 2).sum(1)).sum();
}

void TraceRegNet::load(torch::serialize::InputArchive& archive) {
  torch::NoGradGuard no_grad;
  // As Module::load, for everything but the confusions.
  for (auto& parameter : named_parameters(/*recurse=*/false)) {
    if (!parameter.value().is_same(confusion_)) archive.read(parameter.key(), parameter.value());
  }
  for (auto& buffer : named_buffers(/*recurse=*/false)) {
    archive.read(buffer.key(), buffer.value(), /*is_buffer=*/true);
  }
  for (const auto& child : named_children()) {
    torch::serialize::InputArchive child_archive;
    archive.read(child.key(), child_archive);
    child.value()->load(child_archive);
  }
  torch::Tensor stored;
  if (archive.try_read(kLogitsName, stored)) {
    if (parameterisation_ == Parameterisation::kProbabilities) stored = torch::softmax(stored, 2);
  } else if (archive.try_read(kProbabilitiesName, stored)) {
    if (parameterisation_ == Parameterisation::kLogits) stored = torch::log(stored.clamp_min(kMinConfusion));
  } else {
    throw std::runtime_error("trace_reg: the stored net has no confusions");
  }
  if (!stored.sizes().equals(confusion_.sizes())) {
    throw std::runtime_error("trace_reg: the stored confusions have another shape");
  }
  confusion_.copy_(stored);
}

void TraceRegNet::set_trace_weights(const torch::Tensor& weights) {
  torch::NoGradGuard no_grad;
  trace_weights_.copy_(weights.to(trace_weights_.options()));
}

void TraceRegNet::AfterOptimizerStep() {
  if (parameterisation_ == Parameterisation::kLogits) return;  // rows are softmaxes
  torch::NoGradGuard no_grad;
  confusion_.clamp_min_(kMinConfusion);
  confusion_.div_(confusion_.sum(2, /*keepdim=*/true));
}

std::shared_ptr<CrowdNet> TraceRegModel::MakeNet(int32_t num_items, int32_t num_annotators) const {
  return std::make_shared<TraceRegNet>(
      num_items, num_annotators, num_classes(), item_feature_dim(), options().neural,
      TrainsByEm() ? TraceRegNet::Parameterisation::kLogits
                   : TraceRegNet::Parameterisation::kProbabilities);
}

int TraceRegModel::Train(CrowdNet& net, const LabelTensors& data, bool warm_start) {
  if (data.num_labels > 0) {
    // λ n_r / L for annotator r (see the file comment): its share of the labels.
    torch::Tensor labels_per_annotator =
        torch::bincount(data.annotators, /*weights=*/{}, data.num_annotators).to(torch::kFloat);
    static_cast<TraceRegNet&>(net).set_trace_weights(
        labels_per_annotator * (options().neural.trace_lambda / static_cast<double>(data.num_labels)));
  }
  return TrainMarginal(net, data, StepsForFit(data.num_labels, warm_start));
}

void TraceRegModel::ExportTables(CrowdNet& net) {
  torch::NoGradGuard no_grad;
  torch::Tensor all = torch::log(static_cast<TraceRegNet&>(net).Confusions().clamp_min(TraceRegNet::kMinConfusion));
  confusions_.Assign(all.narrow(0, 0, std::min<int64_t>(all.size(0), fitted_annotators())));
}

void TraceRegModel::LogConfusion(int32_t, int32_t annotator, double* out) const {
  confusions_.Get(annotator, out);
}

}  // namespace verity::models::neural

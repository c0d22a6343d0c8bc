#include "models/neural/lia.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

namespace verity::models::neural {
namespace {

constexpr int64_t kConvergenceWindow = 50;  // steps per window of the stopping rule (lia.h)

class LiaNet : public CrowdNet {
 public:
  // L is featureless_lia_latent_dim where neither items nor annotators carry features, else
  // lia_latent_dim (truth_model.h).
  LiaNet(int32_t num_items, int32_t num_annotators, int32_t k, int64_t feature_dim, int64_t annotator_feature_dim, const TruthModelOptions::Neural& options)
      : k_(k),
        latent_(feature_dim == 0 && annotator_feature_dim == 0 ? options.featureless_lia_latent_dim
                                                               : options.lia_latent_dim),
        width_(options.embedding_dim),
        hidden_(options.hidden_units) {
    InitItems(num_items, width_, feature_dim);
    InitAnnotators(num_annotators, width_, annotator_feature_dim);
    truth_ = register_module("truth", MakeMlp(width_, hidden_, k, 4));
    difficulty_ = register_module("difficulty", MakeMlp(width_, hidden_, k * k * latent_, 4));
    competence_ = register_module("competence", torch::nn::Linear(width_, k * k * latent_));
  }
  int64_t latent() const { return latent_; }
  // A net of another L: the copy would pair unrelated (class, label, l) entries.
  bool CanWarmStartFrom(const CrowdNet& previous) const override {
    const auto* lia = dynamic_cast<const LiaNet*>(&previous);
    return lia != nullptr && lia->latent_ == latent_;
  }
  // Restores a stored net of any L: its own, or another (a version fitted before the default
  // changed), whose difficulty and competence networks are rebuilt at the stored size first.
  void load(torch::serialize::InputArchive& archive) override {
    torch::serialize::InputArchive stored_competence;
    torch::Tensor weight;
    if (archive.try_read("competence", stored_competence) &&
        stored_competence.try_read("weight", weight) && weight.dim() == 2 &&
        weight.size(0) != k_ * k_ * latent_) {
      if (weight.size(0) % (k_ * k_) != 0) {
        throw std::runtime_error("lia: the stored competence network has " +
                                 std::to_string(weight.size(0)) + " outputs, not a multiple of K²");
      }
      latent_ = weight.size(0) / (k_ * k_);
      difficulty_ = replace_module("difficulty", MakeMlp(width_, hidden_, k_ * k_ * latent_, 4));
      competence_ = replace_module("competence", torch::nn::Linear(width_, k_ * k_ * latent_));
    }
    torch::nn::Module::load(archive);
  }
  torch::Tensor LogPrior(const torch::Tensor& items) override {
    return torch::log_softmax(truth_->forward(items_->forward(items)), 1);
  }
  torch::Tensor Difficulty(const torch::Tensor& items) {
    return difficulty_->forward(items_->forward(items)).view({-1, k_, k_, latent_});
  }
  // The competence network c_ψ (the linear layer after the annotator encoder).
  torch::nn::Linear& competence_layer() { return competence_; }
  torch::Tensor Competence(const torch::Tensor& annotators) {
    return competence_->forward(annotators_->forward(annotators)).view({-1, k_, k_, latent_});
  }
  torch::Tensor LogConfusion(const torch::Tensor& items, const torch::Tensor& annotators) override {
    return ConfusionOf(Difficulty(items), annotators);
  }
  // log p(true class | item) (B x K) and log Q (B x K x K) of a batch from one pass of the
  // item encoder (a training step needs both).
  std::pair<torch::Tensor, torch::Tensor> LogPriorAndConfusion(const torch::Tensor& items,
                                                               const torch::Tensor& annotators) {
    torch::Tensor embedded = items_->forward(items);
    return {torch::log_softmax(truth_->forward(embedded), 1),
            ConfusionOf(difficulty_->forward(embedded), annotators)};
  }
  torch::Tensor LogNoisyLabel(const torch::Tensor& items, const torch::Tensor& annotators) override {
    auto [log_prior, log_confusion] = LogPriorAndConfusion(items, annotators);
    return torch::logsumexp(log_prior.unsqueeze(2) + log_confusion, 1);
  }

 private:
  // Q from the difficulty network's output (B x K²L) and the annotators' competences.
  torch::Tensor ConfusionOf(const torch::Tensor& difficulty, const torch::Tensor& annotators) {
    return torch::log_softmax((difficulty.view({-1, k_, k_, latent_}) * Competence(annotators)).sum(3), 2);
  }

  int64_t k_, latent_, width_, hidden_;
  torch::nn::Sequential truth_{nullptr}, difficulty_{nullptr};
  torch::nn::Linear competence_{nullptr};
};

// log Q = row-log-softmax(Σ_l D[·,·,l] C[·,·,l]) into `out` (K x K), from a difficulty D and
// a competence C (K x K x L each).
void LogConfusionFrom(const double* d, const double* c, int32_t k, int32_t latent, double* out) {
  for (int32_t row = 0; row < k; ++row) {
    double* logits = out + row * k;
    double m = -1e300;
    for (int32_t y = 0; y < k; ++y) {
      double v = 0;
      const size_t base = (static_cast<size_t>(row) * k + y) * latent;
      for (int32_t l = 0; l < latent; ++l) v += d[base + l] * c[base + l];
      logits[y] = v;
      m = std::max(m, v);
    }
    double s = 0;
    for (int32_t y = 0; y < k; ++y) s += std::exp(logits[y] - m);
    const double norm = m + std::log(s);
    for (int32_t y = 0; y < k; ++y) logits[y] -= norm;
  }
}

}  // namespace

std::shared_ptr<CrowdNet> LiaModel::MakeNet(int32_t num_items, int32_t num_annotators) const {
  return std::make_shared<LiaNet>(num_items, num_annotators, num_classes(), item_feature_dim(), annotator_feature_dim(), options().neural);
}

int LiaModel::Train(CrowdNet& net, const LabelTensors& data, bool warm_start) {
  if (data.num_labels == 0) return 0;
  const int32_t k = num_classes();
  const int em = options().neural.em_iterations;
  const int iterations = warm_start ? std::max(1, em / 3) : em;
  const TruthModelOptions::Neural& n = options().neural;
  // The step budget of each phase (lia.h): neural.steps split over the iterations, else
  // lia_max_steps, else (the default) the budget scaled with the data.
  const int64_t budget =
      n.steps > 0            ? std::max<int64_t>(1, n.steps / em)
      : n.lia_max_steps > 0 ? n.lia_max_steps
                            : std::max<int64_t>(50, StepsForFit(data.num_labels, false) / em);
  const auto float_options = data.labels_per_item.options();

  // First E-step: Dawid-Skene's posteriors (lia.h), or the posteriors under the warm-started
  // parameters. q keeps its storage for the whole fit (later E-steps refill it): the training
  // step reads it.
  const auto start = std::chrono::steady_clock::now();
  torch::Tensor q = warm_start ? torch::exp(ItemLogPosteriors(net, data, k))
                               : DawidSkenePosteriors(data, k, options().vote_smoothing,
                                                      kDawidSkeneStartIterations);
  if (!warm_start) CountAsInitialisation(start);
  net.train();
  auto& lia = static_cast<LiaNet&>(net);
  std::unique_ptr<FlatAmsGrad> optimizer = MakeOptimizer(net);
  const int64_t batch = std::min<int64_t>(batch_size(), data.num_labels);
  const torch::Tensor per_item = data.labels_per_item.clamp_min(1.0);
  ConvergenceCheck check(budget, kConvergenceWindow, n.lia_tolerance, float_options);
  // The expected complete log-likelihood of a batch (see lia.h).
  std::unique_ptr<TrainingStep> step = MakeTrainingStep(
      *optimizer,
      [&](const torch::Tensor& idx) {
        torch::Tensor items = data.items.index_select(0, idx);
        torch::Tensor y = data.labels.index_select(0, idx);
        auto [log_prior, log_confusion] =
            lia.LogPriorAndConfusion(items, data.annotators.index_select(0, idx));
        torch::Tensor log_q_y =
            log_confusion.gather(2, y.view({-1, 1, 1}).expand({-1, k, 1})).squeeze(2);
        torch::Tensor weighted_prior = log_prior / per_item.index_select(0, items).unsqueeze(1);
        torch::Tensor loss = WithGoldLoss(
            -(q.index_select(0, items) * (log_q_y + weighted_prior)).sum(1).mean(), net, data);
        check.Add(loss);
        return loss;
      },
      batch);
  torch::Tensor order;
  int64_t taken = 0;  // steps of the EM phase, for the minibatch order across M-steps
  for (int t = 0; t < iterations; ++t) {
    check.Restart();
    do {
      const int64_t start = (taken++ * batch) % data.num_labels;
      if (start < batch) order = torch::randperm(data.num_labels, data.items.options());
      TakeStep(*step, order.narrow(0, start, std::min(batch, data.num_labels - start)));
    } while (!check.StepDone());
    q.copy_(torch::exp(ItemLogPosteriors(net, data, k)));
    net.train();
  }
  // Marginal-likelihood fine-tuning, with an optimiser of its own: free the EM phase's first
  // (its moment buffers and, on CUDA, its graph's memory pool).
  step.reset();
  optimizer.reset();
  TrainMarginalToConvergence(net, data, budget, kConvergenceWindow, n.lia_tolerance);
  return iterations;
}

void LiaModel::ExportTables(CrowdNet& net) {
  torch::NoGradGuard no_grad;
  auto& lia = static_cast<LiaNet&>(net);
  latent_ = static_cast<int32_t>(lia.latent());
  torch::Tensor d = lia.Difficulty(torch::arange(static_cast<int64_t>(fitted_items()), torch::kLong));
  torch::Tensor c = lia.Competence(torch::arange(static_cast<int64_t>(fitted_annotators()), torch::kLong));
  difficulty_ = TensorToVector(d);
  competence_ = TensorToVector(c);
  const int64_t k = num_classes();
  mean_competence_ = fitted_annotators() > 0 ? TensorToVector(c.mean(0)) : std::vector<double>(k * k * latent_, 0.0);
  // The items that stand for the mean item (lia.h): every fitted item up to kMeanItemSample,
  // else that many spread evenly over the table; a model without fitted items has one
  // difficulty of ones (every annotator's competence alone).
  const size_t cell = static_cast<size_t>(k) * k * latent_;
  mean_item_sample_.clear();
  if (fitted_items() == 0) {
    difficulty_.assign(cell, 1.0);
    mean_item_sample_.push_back(0);
  } else {
    const int64_t n = fitted_items(), m = std::min<int64_t>(n, kMeanItemSample);
    for (int64_t s = 0; s < m; ++s) mean_item_sample_.push_back(static_cast<int32_t>(s * n / m));
  }
  // Q of the mean item for each fitted annotator, and (last) for the mean competence.
  const size_t kk = static_cast<size_t>(k) * k;
  unseen_item_confusion_.assign((static_cast<size_t>(fitted_annotators()) + 1) * kk, 0.0);
  for (int32_t a = 0; a <= fitted_annotators(); ++a) {
    const double* competence = a < fitted_annotators() ? competence_.data() + a * cell : mean_competence_.data();
    MeanItemConfusion(competence, unseen_item_confusion_.data() + a * kk);
  }
  torch::nn::Linear& layer = lia.competence_layer();
  competence_network_.outputs = layer->weight.size(0);
  competence_network_.inputs = layer->weight.size(1);
  competence_network_.weight = TensorToVector(layer->weight);
  competence_network_.bias = TensorToVector(layer->bias);
}

void LiaModel::MeanItemConfusion(const double* competence, double* out) const {
  const int32_t k = num_classes();
  const size_t kk = static_cast<size_t>(k) * k, cell = kk * latent_;
  std::vector<double> log_q(kk);
  // Row k averages the sample's rows k weighted by h_i[k] (lia.h), or equally where no item
  // of the sample carries weight for class k (a model without fitted items, a class no item
  // is believed to be).
  std::vector<double> weighted(kk, 0.0), plain(kk, 0.0), weight(k, 0.0);
  for (int32_t item : mean_item_sample_) {
    LogConfusionFrom(difficulty_.data() + item * cell, competence, k, latent_, log_q.data());
    const double* log_prior = LogPriorOf(item < fitted_items() ? item : -1);
    for (int32_t row = 0; row < k; ++row) {
      const double h = std::exp(log_prior[row]);
      weight[row] += h;
      for (int32_t y = 0; y < k; ++y) {
        const size_t x = static_cast<size_t>(row) * k + y;
        weighted[x] += h * std::exp(log_q[x]);
        plain[x] += std::exp(log_q[x]);
      }
    }
  }
  const double n = static_cast<double>(mean_item_sample_.size());
  for (int32_t row = 0; row < k; ++row) {
    for (int32_t y = 0; y < k; ++y) {
      const size_t x = static_cast<size_t>(row) * k + y;
      out[x] = weight[row] > 1e-12 ? weighted[x] / weight[row] : plain[x] / n;
    }
  }
}

std::vector<double> LiaModel::ConfusionFromAnnotatorEmbedding(absl::Span<const double> embedding) const {
  const std::vector<double> competence = ApplyLinear(competence_network_, embedding);
  const int32_t k = num_classes();
  if (competence.size() != static_cast<size_t>(k) * k * latent_) return {};
  std::vector<double> q(static_cast<size_t>(k) * k);
  MeanItemConfusion(competence.data(), q.data());
  return q;
}

void LiaModel::LogConfusion(int32_t item, int32_t annotator, double* out) const {
  const int32_t k = num_classes();
  const bool fitted_annotator = annotator >= 0 && annotator < fitted_annotators();
  if (item < 0 || item >= fitted_items()) {
    // The mean item's Q, precomputed per annotator (ExportTables).
    const size_t kk = static_cast<size_t>(k) * k;
    const double* q = unseen_item_confusion_.data() + (fitted_annotator ? annotator : fitted_annotators()) * kk;
    for (size_t x = 0; x < kk; ++x) out[x] = std::log(std::max(q[x], 1e-300));
    return;
  }
  const size_t cell = static_cast<size_t>(k) * k * latent_;
  const double* c = fitted_annotator ? competence_.data() + annotator * cell : mean_competence_.data();
  LogConfusionFrom(difficulty_.data() + item * cell, c, k, latent_, out);
  // Row k of the item's own Q weighs h_i[k], the mean item's row the rest (lia.h).
  const size_t kk = static_cast<size_t>(k) * k;
  const double* mean_item =
      unseen_item_confusion_.data() + (fitted_annotator ? annotator : fitted_annotators()) * kk;
  const double* log_prior = LogPriorOf(item);
  for (int32_t row = 0; row < k; ++row) {
    const double own = std::exp(log_prior[row]);
    for (int32_t y = 0; y < k; ++y) {
      const size_t x = static_cast<size_t>(row) * k + y;
      out[x] = std::log(std::max(own * std::exp(out[x]) + (1.0 - own) * mean_item[x], 1e-300));
    }
  }
}

std::optional<double> LiaModel::ItemDifficulty(int32_t item) const {
  if (!has_parameters()) return std::nullopt;
  const int32_t k = num_classes();
  std::vector<double> log_q(static_cast<size_t>(k) * k);
  LogConfusion(item, /*annotator=*/-1, log_q.data());  // -1: the mean competence
  double correct = 0;
  for (int32_t c = 0; c < k; ++c) correct += std::exp(log_q[static_cast<size_t>(c) * k + c]);
  return 1.0 - correct / k;
}

}  // namespace verity::models::neural
